"""Calling a silo's ``Work.Process``: ``WorkClient`` (asyncio) and ``SyncWorkClient`` (blocking).

Both send one batch of ``(key, payload)`` items to one silo's handler and return one result
per item, in order. Channels are cached per silo endpoint and reused until ``close()``.
``SyncWorkClient`` uses gRPC's blocking API, so a Spark executor (no event loop) needs no
thread of its own.

Errors say what the caller should do next::

    WorkUnavailableError   the silo could not take the batch: unreachable, not Active
                           (UNAVAILABLE), deadline exceeded, or another incarnation answered
                           at its endpoint. Re-read the view and send the batch to the key's
                           new owner (delivery is at-least-once: handlers are idempotent).
    WorkError              the silo refused or the handler failed: unknown handler
                           (NOT_FOUND), wrong result count (INVALID_ARGUMENT), the handler
                           raised (INTERNAL), another cluster (FAILED_PRECONDITION). Sending
                           the batch elsewhere would fail the same way: do not fail over.

Both derive from ``silo.errors.SiloError`` and are siblings, so ``except WorkError`` never
swallows a fail-over.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, Generic, Self, TypeVar

import grpc

from membership_tables import SiloAddress
from membership_tables.model import validate_cluster_id
from silo.errors import SiloError
from silo.wire import codec
from silo.wire.channels import CHANNEL_OPTIONS
from silo.wire.proto.silo.v1 import membership_pb2 as pb

__all__ = ["SyncWorkClient", "WorkClient", "WorkError", "WorkUnavailableError"]

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


def default_sender() -> str:
    """How a client names itself to silos (their logs): ``host pid N``."""
    return f"{socket.gethostname()} pid {os.getpid()}"


class _Batch:
    """One call: builds the request and interprets the answer, for both flavours."""

    def __init__(
        self, cluster_id: str, sender: str, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]]
    ) -> None:
        self.silo = silo
        self.handler = handler
        self.request = pb.ProcessRequest(
            cluster_id=cluster_id,
            sender=sender,
            handler=handler,
            items=[pb.WorkItem(key=key, payload=payload) for key, payload in items],
        )

    def results(self, response: pb.ProcessResponse) -> list[bytes]:
        if response.silo != str(self.silo):
            raise WorkUnavailableError(
                f"{self.silo.endpoint} is now {response.silo or 'another silo'}, not {self.silo}: "
                "the silo restarted; re-read the view",
                silo=self.silo,
                handler=self.handler,
            )
        if len(response.results) != len(self.request.items):
            raise WorkError(
                f"silo {self.silo} returned {len(response.results)} results for {len(self.request.items)} items",
                silo=self.silo,
                handler=self.handler,
                code=grpc.StatusCode.INVALID_ARGUMENT.name,
            )
        return list(response.results)

    def error(self, exc: grpc.RpcError) -> WorkError | WorkUnavailableError:
        call = isinstance(exc, (grpc.Call, grpc.aio.AioRpcError))
        code = exc.code() if call else grpc.StatusCode.UNKNOWN
        details = exc.details() if call else str(exc)
        message = f"handler {self.handler!r} on silo {self.silo}: {code.name}: {details}"
        if code in FAIL_OVER_CODES:
            return WorkUnavailableError(message, silo=self.silo, handler=self.handler)
        return WorkError(message, silo=self.silo, handler=self.handler, code=code.name)


def _check_timeout(timeout: float) -> None:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


Channel = TypeVar("Channel")


class _ChannelCache(Generic[Channel]):
    """What both flavours share: the cluster id, the sender, one channel per silo endpoint."""

    def __init__(self, cluster_id: str, sender: str | None, open_channel: Callable[..., Channel]) -> None:
        self._cluster_id = validate_cluster_id(cluster_id)
        self._sender = default_sender() if sender is None else sender
        self._open_channel = open_channel
        self._channels: dict[str, Channel] = {}

    def _prepare(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], timeout: float
    ) -> tuple[_Batch, Channel]:
        _check_timeout(timeout)
        channel = self._channels.get(silo.endpoint)
        if channel is None:
            channel = self._channels[silo.endpoint] = self._open_channel(silo.endpoint, options=CHANNEL_OPTIONS)
        return _Batch(self._cluster_id, self._sender, silo, handler, items), channel

    def _take_channels(self) -> list[Channel]:
        channels, self._channels = self._channels, {}
        return list(channels.values())


class WorkClient(_ChannelCache[Any]):
    """Sends batches to silos' ``Work.Process`` from asyncio code (use it within one event loop)."""

    def __init__(self, cluster_id: str, *, sender: str | None = None) -> None:
        """``sender`` names this client in the silos' logs (default: ``host pid N``)."""
        super().__init__(cluster_id, sender, grpc.aio.insecure_channel)

    async def process(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], timeout: float
    ) -> list[bytes]:
        """One result per item, in order; raises ``WorkUnavailableError`` or ``WorkError``."""
        batch, channel = self._prepare(silo, handler, items, timeout)
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


class SyncWorkClient(_ChannelCache[grpc.Channel]):
    """``WorkClient`` with blocking calls, for code without an event loop (Spark executors)."""

    def __init__(self, cluster_id: str, *, sender: str | None = None) -> None:
        super().__init__(cluster_id, sender, grpc.insecure_channel)

    def process(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], timeout: float
    ) -> list[bytes]:
        """One result per item, in order; raises ``WorkUnavailableError`` or ``WorkError``."""
        batch, channel = self._prepare(silo, handler, items, timeout)
        try:
            response = codec.PROCESS.bind_sync(channel)(batch.request, timeout=timeout)
        except grpc.RpcError as exc:
            raise batch.error(exc) from exc
        return batch.results(response)

    def close(self) -> None:
        """Close every cached channel."""
        for channel in self._take_channels():
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
