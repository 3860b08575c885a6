"""Calling a silo's ``Work.Process``: ``WorkClient`` (asyncio) and ``SyncWorkClient`` (blocking).

Both send one batch of ``(key, payload)`` items to one silo's handler and return one result
per item, in order. ``SyncWorkClient`` also sends columnar batches (Arrow record batches, as
IPC bytes; ``silo.work.columns``), several in flight at once (``submit_columnar``). Channels
are cached per silo endpoint and reused until ``close()``. ``SyncWorkClient`` uses gRPC's
blocking API, so a Spark executor (no event loop) needs no thread of its own.

Errors say what the caller should do next::

    WorkUnavailableError   the silo could not take the batch: unreachable, not Active
                           (UNAVAILABLE), deadline exceeded, or another incarnation answered
                           at its endpoint. Re-read the view and send the batch to the key's
                           new owner (delivery is at-least-once: handlers are idempotent).
    WorkError              the silo refused or the handler failed: unknown handler
                           (NOT_FOUND), wrong result count (INVALID_ARGUMENT), the handler
                           raised (INTERNAL), another cluster (FAILED_PRECONDITION), a
                           certificate refused (PERMISSION_DENIED, UNAUTHENTICATED). Sending
                           the batch elsewhere would fail the same way: do not fail over.

Both derive from ``silo.errors.SiloError`` and are siblings, so ``except WorkError`` never
swallows a fail-over.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self

import grpc

from membership_tables import SiloAddress
from membership_tables.model import validate_cluster_id
from silo.errors import SiloError
from silo.wire import codec
from silo.wire.channels import CHANNEL_OPTIONS
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tls import ChannelPool, TlsSettings, checked_tls
from silo.work import columns
from silo.work.hashring import KEY_HASH

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SyncWorkClient", "WorkClient", "WorkError", "WorkNotOwnedError", "WorkUnavailableError"]

FAIL_OVER_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,  # the silo stopped while serving the call
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
"""Status codes after which another silo may well succeed."""


class WorkError(SiloError):
    """The silo refused the batch or its handler failed: another silo would fail the same way."""

    def __init__(self, message: str, *, silo: SiloAddress, handler: str, code: str) -> None:
        super().__init__(message)
        self.silo = silo
        self.handler = handler
        self.code = code
        """The gRPC status name, e.g. ``"NOT_FOUND"``."""


class WorkUnavailableError(SiloError, ConnectionError):
    """The silo could not take the batch now; send it to the key's next owner."""

    def __init__(self, message: str, *, silo: SiloAddress, handler: str) -> None:
        super().__init__(message)
        self.silo = silo
        self.handler = handler


class WorkNotOwnedError(SiloError):
    """The silo does not serve some of the batch's keys now (ABORTED): another silo owns them in its
    view, or their owner was declared Dead and may still serve them until its lease runs out.
    Refresh the view and send them to their owners; retry after a short pause."""

    def __init__(self, message: str, *, silo: SiloAddress, handler: str) -> None:
        super().__init__(message)
        self.silo = silo
        self.handler = handler


def default_sender() -> str:
    """How a client names itself to silos (their logs): ``host pid N``."""
    return f"{socket.gethostname()} pid {os.getpid()}"


class _Batch:
    """One call: builds the request and interprets the answer, for both flavours and both forms."""

    def __init__(
        self,
        cluster_id: str,
        sender: str,
        silo: SiloAddress,
        handler: str,
        items: Sequence[tuple[str, bytes]] = (),
        *,
        arrow_batch: bytes = b"",
        count: int | None = None,
        view_version: int = 0,
    ) -> None:
        self.silo = silo
        self.handler = handler
        self.count = len(items) if count is None else count
        self.request = pb.ProcessRequest(
            cluster_id=cluster_id,
            sender=sender,
            handler=handler,
            items=[pb.WorkItem(key=key, payload=payload) for key, payload in items],
            arrow_batch=arrow_batch,
            view_version=view_version,
            key_hash=KEY_HASH,
        )

    def _check(self, response: pb.ProcessResponse, count: int) -> None:
        if response.silo != str(self.silo):
            raise WorkUnavailableError(
                f"{self.silo.endpoint} is now {response.silo or 'another silo'}, not {self.silo}: "
                "the silo restarted; re-read the view",
                silo=self.silo,
                handler=self.handler,
            )
        if count != self.count:
            raise WorkError(
                f"silo {self.silo} returned {count} results for {self.count} items",
                silo=self.silo,
                handler=self.handler,
                code=grpc.StatusCode.INVALID_ARGUMENT.name,
            )

    def results(self, response: pb.ProcessResponse) -> list[bytes]:
        self._check(response, len(response.results))
        return list(response.results)

    def columnar_results(self, response: pb.ProcessResponse) -> pa.Array:
        try:
            array = columns.read_batch(response.arrow_results).column(0)
        except (ValueError, IndexError) as exc:
            raise WorkError(
                f"silo {self.silo} answered a columnar batch without readable results ({exc})",
                silo=self.silo,
                handler=self.handler,
                code=grpc.StatusCode.INTERNAL.name,
            ) from exc
        self._check(response, len(array))
        return array

    def error(self, exc: grpc.RpcError) -> WorkError | WorkUnavailableError | WorkNotOwnedError:
        call = isinstance(exc, (grpc.Call, grpc.aio.AioRpcError))
        code = exc.code() if call else grpc.StatusCode.UNKNOWN
        details = exc.details() if call else str(exc)
        message = f"handler {self.handler!r} on silo {self.silo}: {code.name}: {details}"
        if code in FAIL_OVER_CODES:
            return WorkUnavailableError(message, silo=self.silo, handler=self.handler)
        if code is grpc.StatusCode.ABORTED:
            return WorkNotOwnedError(message, silo=self.silo, handler=self.handler)
        return WorkError(message, silo=self.silo, handler=self.handler, code=code.name)


def _check_timeout(timeout: float) -> None:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


class _ChannelCache:
    """What both flavours share: the cluster id, the sender, one channel per silo endpoint."""

    def __init__(self, cluster_id: str, sender: str | None, tls: TlsSettings | None, *, aio: bool) -> None:
        self._cluster_id = validate_cluster_id(cluster_id)
        self._sender = default_sender() if sender is None else sender
        self._channels = ChannelPool(self._cluster_id, checked_tls(tls), CHANNEL_OPTIONS, aio=aio)

    def _prepare(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], timeout: float, view_version: int
    ) -> tuple[_Batch, Any]:
        batch = _Batch(self._cluster_id, self._sender, silo, handler, items, view_version=view_version)
        return batch, self._channel(silo, timeout)

    def _prepare_columnar(
        self, silo: SiloAddress, handler: str, batch: pa.RecordBatch, timeout: float, view_version: int
    ) -> tuple[_Batch, Any]:
        if batch.num_columns < 1:
            raise ValueError("a columnar batch needs its routing keys in column 0; this batch has no columns")
        data = columns.write_batch(batch)
        call = _Batch(
            self._cluster_id,
            self._sender,
            silo,
            handler,
            arrow_batch=data,
            count=batch.num_rows,
            view_version=view_version,
        )
        return call, self._channel(silo, timeout)

    def _channel(self, silo: SiloAddress, timeout: float) -> Any:
        _check_timeout(timeout)
        return self._channels.get(silo.endpoint)

    def _take_channels(self) -> list[Any]:
        return self._channels.drain()


class WorkClient(_ChannelCache):
    """Sends batches to silos' ``Work.Process`` from asyncio code (use it within one event loop)."""

    def __init__(self, cluster_id: str, *, sender: str | None = None, tls: TlsSettings | None = None) -> None:
        """``sender`` names this client in the silos' logs (default: ``host pid N``); ``tls``: call
        over mutual TLS with these files (a client or silo certificate of ``cluster_id``)."""
        super().__init__(cluster_id, sender, tls, aio=True)

    async def process(
        self,
        silo: SiloAddress,
        handler: str,
        items: Sequence[tuple[str, bytes]],
        timeout: float,
        *,
        view_version: int = 0,
    ) -> list[bytes]:
        """One result per item, in order; raises ``WorkUnavailableError``, ``WorkNotOwnedError`` or
        ``WorkError``. ``view_version``: the table version of the caller's view (0: none); a silo
        behind it catches up first."""
        batch, channel = self._prepare(silo, handler, items, timeout, view_version)
        try:
            response = await codec.PROCESS.bind(channel)(batch.request, timeout=timeout)
        except grpc.RpcError as exc:
            raise batch.error(exc) from exc
        return batch.results(response)

    async def close(self) -> None:
        """Close every cached channel."""
        for channel in self._take_channels():
            await channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class PendingColumnarCall:
    """A columnar call in flight (``SyncWorkClient.submit_columnar``)."""

    def __init__(self, call: _Batch, future: Any) -> None:
        self._call = call
        self._future = future
        self.handler_seconds = 0.0
        """After ``result()``: seconds the silo spent in the handler."""
        self.serialization_seconds = 0.0
        """After ``result()``: seconds the silo spent decoding the batch and encoding the results."""

    @property
    def request_bytes(self) -> int:
        return len(self._call.request.arrow_batch)

    def result(self) -> pa.Array:
        """The binary result array; raises ``WorkUnavailableError`` or ``WorkError``."""
        try:
            response = self._future.result()
        except grpc.RpcError as exc:
            raise self._call.error(exc) from exc
        self.handler_seconds = response.handler_seconds
        self.serialization_seconds = response.serialization_seconds
        return self._call.columnar_results(response)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (from gRPC's thread) once the answer or the error has arrived."""
        self._future.add_done_callback(lambda _future: callback())

    def cancel(self) -> bool:
        return bool(self._future.cancel())


class SyncWorkClient(_ChannelCache):
    """``WorkClient`` with blocking calls, for code without an event loop (Spark executors)."""

    def __init__(self, cluster_id: str, *, sender: str | None = None, tls: TlsSettings | None = None) -> None:
        super().__init__(cluster_id, sender, tls, aio=False)

    def process(
        self,
        silo: SiloAddress,
        handler: str,
        items: Sequence[tuple[str, bytes]],
        timeout: float,
        *,
        view_version: int = 0,
    ) -> list[bytes]:
        """One result per item, in order; raises ``WorkUnavailableError``, ``WorkNotOwnedError`` or
        ``WorkError``. ``view_version``: the table version of the caller's view (0: none); a silo
        behind it catches up first."""
        batch, channel = self._prepare(silo, handler, items, timeout, view_version)
        try:
            response = codec.PROCESS.bind_sync(channel)(batch.request, timeout=timeout)
        except grpc.RpcError as exc:
            raise batch.error(exc) from exc
        return batch.results(response)

    def submit_columnar(
        self, silo: SiloAddress, handler: str, batch: pa.RecordBatch, timeout: float, *, view_version: int = 0
    ) -> PendingColumnarCall:
        """Start sending a columnar batch (column 0 the routing keys, then the values) and return at once.

        Several calls may be in flight on one channel (HTTP/2 multiplexes them); ``result()``
        on the returned call waits for its binary result array. ``view_version``: the table
        version of the caller's view (0: none); a silo behind it catches up first.
        """
        call, channel = self._prepare_columnar(silo, handler, batch, timeout, view_version)
        future = codec.PROCESS.bind_future(channel)(call.request, timeout=timeout)
        return PendingColumnarCall(call, future)

    def process_columnar(self, silo: SiloAddress, handler: str, batch: pa.RecordBatch, timeout: float) -> pa.Array:
        """``submit_columnar`` and wait: one binary result per row, in order."""
        return self.submit_columnar(silo, handler, batch, timeout).result()

    def close(self) -> None:
        """Close every cached channel."""
        for channel in self._take_channels():
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
