"""The membership client: the live view of a cluster, and a stream of its changes.

::

    from silo.client import MembershipClient

    with MembershipClient("demo", gateways=["127.0.0.1:30000", "127.0.0.1:30001"]) as client:
        view = client.view()                 # ClusterView: version, Active silos oldest first, leader
        for update in client.watch():        # ViewUpdate: the initial view, then every newer one
            print(update.view.version, update.diff.joined, update.diff.died)

``MembershipClient`` blocks (it runs an asyncio loop on a private thread);
``AsyncMembershipClient`` is the same client for asyncio code. A client reads either
through silo **gateways** (``silo run --gateway-port``; failing over between them and the
gateways advertised in the view) or straight from the **table** URI, polling it every
``poll_interval`` seconds (no silo needed; see ``silo.client.view_sources``).

``watch()`` yields ``ViewUpdate``s in strictly increasing version order, starting with the
initial view (whose diff lists every silo as joined); never an older view after a newer one,
also across a gateway failover. Its leader is pinned (``silo.client.topology``): it changes only when
the leader leaves the Active set. A slow consumer may skip versions; it always gets the latest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator, Sequence
from typing import Any, Self, TypeVar

from membership_tables import MembershipTableError, open_table
from membership_tables.model import validate_cluster_id
from silo.client.errors import (
    ClientClosedError,
    ClientConfigError,
)
from silo.client.topology import ClusterView, ViewTracker, ViewUpdate
from silo.client.view_sources import GatewaySource, TableSource, ViewSource, parse_endpoint
from silo.wire.tls import TlsConfigError, TlsSettings, checked_tls

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_RETRY_TIMEOUT = 30.0


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ClientConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _endpoints(gateways: Sequence[str] | str) -> list[str]:
    if isinstance(gateways, str):
        gateways = [part for part in gateways.split(",") if part.strip()]
    return [parse_endpoint(gateway) for gateway in gateways]


class AsyncMembershipClient:
    """The membership client for asyncio code (use it within one event loop)."""

    def __init__(
        self,
        cluster_id: str,
        gateways: Sequence[str] | str = (),
        *,
        table: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        tls: TlsSettings | None = None,
    ) -> None:
        """Read ``cluster_id`` through ``gateways`` or from the ``table`` URI (exactly one of them).

        ``gateways``: ``host:port`` endpoints (a list, or one comma-separated string).
        ``table``: any URI ``open_table`` accepts; it is polled every ``poll_interval`` seconds.
        ``timeout``: seconds for one gateway to answer ``view()``. ``retry_timeout``: how long
        ``watch()`` keeps trying when nothing can be reached before it raises
        ``MembershipUnavailableError``. ``tls``: reach the gateways over mutual TLS with these
        files (a certificate of this cluster with the client role, ``silo certs issue``). Raises
        ``ClientConfigError`` for bad arguments.
        """
        try:
            self._cluster_id = validate_cluster_id(cluster_id)
        except MembershipTableError as exc:
            raise ClientConfigError(str(exc)) from exc
        endpoints = _endpoints(gateways)
        timeout = _positive("timeout", timeout)
        poll_interval = _positive("poll_interval", poll_interval)
        retry_timeout = _positive("retry_timeout", retry_timeout)
        if endpoints and table is not None:
            raise ClientConfigError("give gateways or a table, not both")
        self._source: ViewSource
        try:
            tls = checked_tls(tls)
        except TlsConfigError as exc:
            raise ClientConfigError(str(exc)) from exc
        if tls is not None and table is not None:
            raise ClientConfigError("tls applies to gateways; a table is read with the store's own credentials")
        if endpoints:
            try:
                self._source = GatewaySource(
                    self._cluster_id, endpoints, timeout=timeout, retry_timeout=retry_timeout, tls=tls
                )
            except TlsConfigError as exc:
                raise ClientConfigError(str(exc)) from exc
        elif table is not None:
            try:
                opened = open_table(table, self._cluster_id)
            except MembershipTableError as exc:
                raise ClientConfigError(f"cannot use table {table!r}: {exc}") from exc
            self._source = TableSource(opened, poll_interval=poll_interval, retry_timeout=retry_timeout)
        else:
            raise ClientConfigError(
                "no source: give gateways=['host:port', ...] (silo run --gateway-port) or table='URI'"
            )
        self._latest = ViewTracker(self._cluster_id)
        self._closed = False

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    async def view(self) -> ClusterView:
        """The current view; never older than one this client returned before.

        Raises ``MembershipUnavailableError`` if no gateway answers (or the table is down) and
        ``WrongClusterError`` if a gateway serves another cluster.
        """
        self._check_open()
        self._latest.offer(await self._source.read())
        current = self._latest.current
        assert current is not None  # offer() just set it, or an equal or newer one was there
        return current

    async def watch(self) -> AsyncGenerator[ViewUpdate, None]:
        """The current view, then one update per newer version, until ``close()``.

        Raises ``WrongClusterError`` at once, and ``MembershipUnavailableError`` after
        ``retry_timeout`` seconds in which no gateway (or the table) could be reached.
        """
        self._check_open()
        tracker = ViewTracker(self._cluster_id)

        def after() -> int | None:
            return tracker.current.version if tracker.current is not None else None

        async for view in self._source.views(after):
            update = tracker.offer(view)
            if update is not None:
                yield update

    async def close(self) -> None:
        """End every ``watch()`` and release the connections. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._source.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this membership client is closed; create a new one")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _LoopThread:
    """An asyncio event loop on a daemon thread, running the async client for blocking callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="silo-membership-client", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self.closed = False

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for it; ``ClientClosedError`` once closed."""
        with self._lock:
            if self.closed:
                coroutine.close()
                raise ClientClosedError("this membership client is closed; create a new one")
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClientClosedError("this membership client was closed during the call") from None

    def close(self, last: Coroutine[Any, Any, None]) -> None:
        """Cancel whatever still runs (callers get ``ClientClosedError``), run ``last``, stop the loop."""
        with self._lock:
            if self.closed:
                last.close()
                return
            self.closed = True
        asyncio.run_coroutine_threadsafe(self._cancel_others(), self._loop).result()
        asyncio.run_coroutine_threadsafe(last, self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @staticmethod
    async def _cancel_others() -> None:
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


class MembershipClient:
    """The membership client with blocking calls; the arguments are ``AsyncMembershipClient``'s.

    Safe to use from several threads; ``close()`` (or leaving the ``with`` block) ends every
    ``watch()`` iteration, in any thread.
    """

    def __init__(
        self,
        cluster_id: str,
        gateways: Sequence[str] | str = (),
        *,
        table: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        tls: TlsSettings | None = None,
    ) -> None:
        self._client = AsyncMembershipClient(
            cluster_id,
            gateways,
            table=table,
            timeout=timeout,
            poll_interval=poll_interval,
            retry_timeout=retry_timeout,
            tls=tls,
        )
        self._loop = _LoopThread()

    @property
    def cluster_id(self) -> str:
        return self._client.cluster_id

    def view(self) -> ClusterView:
        """The current view (see ``AsyncMembershipClient.view``)."""
        return self._loop.run(self._client.view())

    def watch(self) -> Iterator[ViewUpdate]:
        """The current view, then one update per newer version; ends when the client is closed."""
        updates = self._client.watch()

        async def next_update() -> ViewUpdate:
            return await anext(updates)

        async def stop() -> None:
            await updates.aclose()

        try:
            while True:
                try:
                    update = self._loop.run(next_update())
                except (StopAsyncIteration, ClientClosedError):
                    return
                yield update
        finally:
            with contextlib.suppress(ClientClosedError):
                self._loop.run(stop())

    def close(self) -> None:
        """End every ``watch()`` and release the connections and the loop thread. Idempotent."""
        self._loop.close(self._client.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
