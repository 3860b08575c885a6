"""Where a membership client gets its views: silo gateways over gRPC, or the table itself.

Both sources hand out raw ``ClusterView``s, possibly repeated or out of order across a
reconnect; ``silo.client.membership_client`` puts them through a ``ViewTracker``, which keeps only newer ones.

``GatewaySource`` asks any gateway (``GetMembership``) and watches one at a time
(``WatchMembership``). When the watched gateway dies or stops, it moves to the next one and
re-subscribes with ``after_version`` = the newest version delivered, so the new gateway sends
only newer views. Candidates are the configured endpoints, then the gateways advertised by
the silos of the latest view (so a client seeded with one gateway survives its death); it
starts with the gateway that last worked. ``FAILED_PRECONDITION`` (another cluster) is a
configuration error: it is raised at once, never retried.

``TableSource`` polls ``read_all()`` every ``poll_interval`` seconds in a worker thread: no
silo is needed, at the cost of one table read per interval per client and a change seen up
to ``poll_interval`` late.

Either source gives up (``MembershipUnavailableError``) once nothing could be reached for
``retry_timeout`` seconds in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import grpc

from membership_tables import InvalidEntryError, MembershipTable, MembershipTableData, TableUnavailableError
from silo.client.errors import ClientConfigError, MembershipUnavailableError, WrongClusterError
from silo.client.topology import ClusterView
from silo.events import membership_events
from silo.wire import codec
from silo.wire.channels import CHANNEL_OPTIONS
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tls import ChannelPool, TlsSettings

log = logging.getLogger("silo.client")

MAX_PORT = 65535
RETRY_INTERVAL = 0.5
"""Seconds between rounds over every gateway (or table reads) while none can be reached."""

GATEWAY_CHANNEL_OPTIONS = [
    *CHANNEL_OPTIONS,
    # A watch stream is quiet between membership changes: ping to notice a gateway host that
    # vanished without closing the connection (the server accepts pings every 5 s).
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),  # recent gRPC times a keepalive ping out by this one (default 60 s)
    ("grpc.keepalive_permit_without_calls", 1),
    # Keep pinging however long the stream stays quiet (gRPC's default stops after two pings).
    ("grpc.http2.max_pings_without_data", 0),
]

AfterVersion = Callable[[], int | None]
"""The newest version the consumer already has (``None``: nothing yet)."""


def parse_endpoint(text: object) -> str:
    """``host:port`` normalized, or ``ClientConfigError`` saying what a gateway endpoint looks like."""
    problem = f"bad gateway endpoint {text!r}: expected HOST:PORT with a port in 1..{MAX_PORT}, "
    problem += "e.g. 127.0.0.1:30000 ([::1]:30000 for IPv6)"
    if not isinstance(text, str):
        raise ClientConfigError(problem)
    host, colon, port = text.strip().rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not (colon and bare and port.isdigit() and 1 <= int(port) <= MAX_PORT):
        raise ClientConfigError(problem)
    if any(char in bare for char in "[]/@ \t") or (":" in bare and bare == host):
        raise ClientConfigError(problem)
    return f"{host}:{int(port)}"


class ViewSource(Protocol):
    """What the client needs from a source of views."""

    async def read(self) -> ClusterView:
        """One current view; raises ``MembershipUnavailableError`` or ``WrongClusterError``."""
        ...

    def views(self, after: AfterVersion) -> AsyncIterator[ClusterView]:
        """Views as they change, forever (until ``close()``); raises as ``read`` does."""
        ...

    async def close(self) -> None: ...


class _GiveUp:
    """Tracks how long nothing could be reached; raises once that exceeds ``retry_timeout``."""

    def __init__(self, retry_timeout: float) -> None:
        self._retry_timeout = retry_timeout
        self._since: float | None = None

    def reached(self) -> None:
        self._since = None

    def missed(self, what: str) -> None:
        now = asyncio.get_running_loop().time()
        if self._since is None:
            self._since = now
        elif now - self._since >= self._retry_timeout:
            raise MembershipUnavailableError(f"{what} for {self._retry_timeout:g}s; giving up")


class GatewaySource:
    """Views from silo gateways over gRPC, failing over between them."""

    def __init__(
        self,
        cluster_id: str,
        endpoints: Sequence[str],
        *,
        timeout: float,
        retry_timeout: float,
        tls: TlsSettings | None = None,
    ) -> None:
        """``tls``: call the gateways over mutual TLS with these files (a client or silo certificate)."""
        self._cluster_id = cluster_id
        self._configured = list(dict.fromkeys(endpoints))
        self._advertised: list[str] = []
        self._current: str | None = None
        self._timeout = timeout
        self._retry_timeout = retry_timeout
        self._channels = ChannelPool(cluster_id, tls, GATEWAY_CHANNEL_OPTIONS, aio=True)
        self._closed = False

    def candidates(self) -> list[str]:
        """Endpoints to try, in order, starting with the one that last answered."""
        endpoints = list(dict.fromkeys([*self._configured, *self._advertised]))
        if self._current in endpoints:
            start = endpoints.index(self._current)
            endpoints = endpoints[start:] + endpoints[:start]
        return endpoints

    async def read(self) -> ClusterView:
        failures: list[str] = []
        for endpoint in self.candidates():
            request = pb.GetMembershipRequest(header=codec.header(self._cluster_id, None))
            try:
                response = await codec.GET_MEMBERSHIP.bind(self._channel(endpoint))(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                self._refuse_wrong_cluster(endpoint, exc)
                failures.append(f"{endpoint}: {exc.code().name} {exc.details()}")
                continue
            try:
                return self._accept(endpoint, response)
            except InvalidEntryError as exc:
                failures.append(_unreadable_view(endpoint, exc))
        raise MembershipUnavailableError(f"no gateway of cluster {self._cluster_id!r} answered: {'; '.join(failures)}")

    async def views(self, after: AfterVersion) -> AsyncIterator[ClusterView]:
        give_up = _GiveUp(self._retry_timeout)
        while not self._closed:
            delivered = False
            for endpoint in self.candidates():
                async with contextlib.aclosing(self._watch(endpoint, after())) as stream:
                    async for view in stream:
                        delivered = True
                        give_up.reached()
                        yield view
                if self._closed:
                    return
            if not delivered:
                give_up.missed(f"no gateway of cluster {self._cluster_id!r} could be watched ({self.candidates()})")
            await asyncio.sleep(RETRY_INTERVAL)

    async def _watch(self, endpoint: str, after_version: int | None) -> AsyncGenerator[ClusterView, None]:
        """The views one gateway streams, until it fails (logged) or the source is closed."""
        request = pb.WatchMembershipRequest(header=codec.header(self._cluster_id, None), after_version=after_version)
        call = codec.WATCH_MEMBERSHIP.bind(self._channel(endpoint))(request)
        try:
            async for message in call:
                yield self._accept(endpoint, message)
        except grpc.aio.AioRpcError as exc:
            self._refuse_wrong_cluster(endpoint, exc)
            if not self._closed:
                log.info(
                    "gateway %s: watch ended (%s %s); trying the next gateway", endpoint, exc.code().name, exc.details()
                )
        except InvalidEntryError as exc:
            _unreadable_view(endpoint, exc)
        finally:
            call.cancel()

    def _accept(self, endpoint: str, message: pb.GetMembershipResponse | pb.MembershipView) -> ClusterView:
        events = codec.events_from_proto(message) if isinstance(message, pb.MembershipView) else ()
        view = ClusterView.from_table_data(self._cluster_id, codec.snapshot_from_proto(message), events)
        self._current = endpoint
        self._advertised = [silo.gateway for silo in view.silos if silo.gateway is not None]
        return view

    def _refuse_wrong_cluster(self, endpoint: str, exc: grpc.aio.AioRpcError) -> None:
        if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            raise ClientConfigError(
                f"gateway {endpoint} refused this client's certificate: {exc.details()}; "
                f"use a certificate issued for cluster {self._cluster_id!r} (silo certs issue ... --role client)"
            ) from exc
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise WrongClusterError(
                f"gateway {endpoint} refused cluster {self._cluster_id!r}: {exc.details()}; "
                "point the client at a gateway of its own cluster"
            ) from exc

    def _channel(self, endpoint: str) -> Any:
        return self._channels.get(endpoint)

    async def close(self) -> None:
        """End every watch and close every channel."""
        self._closed = True
        for channel in self._channels.drain():
            await channel.close()


class TableSource:
    """Views read straight from the membership table, polled every ``poll_interval`` seconds."""

    def __init__(
        self,
        table: MembershipTable,
        *,
        poll_interval: float,
        retry_timeout: float,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._table = table
        self._poll_interval = poll_interval
        self._retry_timeout = retry_timeout
        self._now = now
        self._closed = False
        self._previous: MembershipTableData | None = None

    async def read(self) -> ClusterView:
        """One read; its events are the changes since the newest earlier read."""
        try:
            data = await asyncio.to_thread(self._table.read_all)
        except TableUnavailableError as exc:
            raise MembershipUnavailableError(f"cannot read the membership table: {exc}") from exc
        events = membership_events(self._previous, data, self._now())
        if self._previous is None or data.version.version > self._previous.version.version:
            self._previous = data
        return ClusterView.from_table_data(self._table.cluster_id, data, events)

    async def views(self, after: AfterVersion) -> AsyncIterator[ClusterView]:
        give_up = _GiveUp(self._retry_timeout)
        while not self._closed:
            try:
                view = await self.read()
            except MembershipUnavailableError as exc:
                give_up.missed(str(exc))
            else:
                give_up.reached()
                yield view
            await asyncio.sleep(self._poll_interval)

    async def close(self) -> None:
        self._closed = True
        await asyncio.to_thread(self._table.close)


def _unreadable_view(endpoint: str, error: InvalidEntryError) -> str:
    """Logs a gateway's malformed view (a bug or another program on its port) and says so for an error message."""
    log.warning("gateway %s sent a view this client cannot read (%s); trying the next gateway", endpoint, error)
    return f"{endpoint}: sent an invalid view ({error})"
