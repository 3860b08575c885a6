"""A function-backed ``MembershipRpcHandler`` and helpers to serve it on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.membership.lease import MembershipConfirmation
from silo.membership.probing import GossipMessage, IndirectProbeResult
from silo.membership.snapshot import MembershipSnapshot
from silo.wire.server import MembershipServer
from silo.wire.tls import TlsSettings
from silo.work.hashring import HashRing
from silo.work.ownership import OwnershipCheck
from silo.work.registry import HandlerRegistry
from silo.work.service import WorkHost, WorkService

CLUSTER = "test-cluster"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one async scenario in a fresh event loop (grpc.aio objects belong to their loop)."""
    return asyncio.run(coroutine)


async def _never_probed(target: SiloAddress, timeout: float) -> IndirectProbeResult:
    return IndirectProbeResult(succeeded=False, intermediary_health_score=0, response_time=0.0, failure_message="n/a")


@dataclass
class FakeHandler:
    """Answers RPCs from plain values and functions; records what peers told it."""

    silo_address: SiloAddress
    cluster_id: str = CLUSTER
    score: int = 0
    probe: Callable[[SiloAddress, float], Awaitable[IndirectProbeResult]] = _never_probed
    snapshot: MembershipTableData = field(default_factory=lambda: MembershipTableData((), TableVersion(0, "")))
    gossiped: list[int] = field(default_factory=list)
    messages: list[GossipMessage] = field(default_factory=list)
    status: SiloStatus = SiloStatus.ACTIVE
    stream: tuple[MembershipTableData, ...] = ()
    """What ``snapshots()`` yields before it ends (default: ``snapshot`` alone)."""
    hold_open: bool = False
    """``snapshots()`` never ends, like a silo whose membership does not change."""
    ring_peers: tuple[SiloAddress, ...] = ()
    """Other silos on the serving ring: keys they own are refused (ABORTED)."""
    fenced: bool = False
    """What the silo says of its lease (a fenced silo ends its watch streams)."""
    known_versions: list[int] = field(default_factory=list)
    """The ``known_version`` of every ``ConfirmMembership`` asked of it."""
    heard: list[int] = field(default_factory=list)
    """Every version a ping told it of (``hear_of``)."""
    withheld: str | None = None
    """Why results are withheld when a handler returns (as if the lease ran out during it)."""
    observed_at: datetime | None = None
    """The ``observed_at`` of every snapshot ``snapshots()`` yields (as ``SnapshotPublisher`` stamps it)."""

    def health_score(self) -> int:
        return self.score

    def hear_of(self, version: int) -> None:
        self.heard.append(version)

    def ownership(self) -> OwnershipCheck:
        """The keys this silo owns on the ring of itself and ``ring_peers`` (every key without peers)."""
        ring = HashRing([self.silo_address, *self.ring_peers])
        return OwnershipCheck(self.silo_address, ring, ring.addresses.index(self.silo_address), 0, 7, 0.0, {})

    async def catch_up(self, version: int) -> bool:
        return False

    def results_guard(self) -> Callable[[], str | None]:
        return lambda: self.withheld

    def work_refusal(self) -> str | None:
        if self.status is not SiloStatus.ACTIVE:
            return f"silo {self.silo_address} is {self.status.name}, not ACTIVE; send the batch to another silo"
        return None

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        self.gossiped.append(message.version)
        self.messages.append(message)

    async def probe_for_peer(self, target: SiloAddress, timeout: float) -> IndirectProbeResult:
        return await self.probe(target, timeout)

    def membership_snapshot(self) -> MembershipTableData:
        return self.snapshot

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        self.known_versions.append(known_version)
        version = self.snapshot.version.version
        return MembershipConfirmation(self.silo_address, False, SiloStatus.NONE, version, version, False)

    async def snapshots(self) -> AsyncIterator[MembershipSnapshot]:
        for data in self.stream or (self.snapshot,):
            yield MembershipSnapshot(data, observed_at=self.observed_at)
        if self.hold_open:
            await asyncio.Event().wait()


def entry(address: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, **changes: object) -> MembershipEntry:
    row = MembershipEntry(silo_address=address, status=status, start_time=T0, i_am_alive_time=T0)
    return row.replace(**changes) if changes else row


@contextlib.asynccontextmanager
async def serving(
    make_handler: Callable[[SiloAddress], FakeHandler],
    host: str = "127.0.0.1",
    tls: TlsSettings | None = None,
    *,
    port: int = 0,
    server_type: type[MembershipServer] = MembershipServer,
) -> AsyncIterator[tuple[MembershipServer, FakeHandler]]:
    """A started server (a ``server_type``) on ``port`` (0: a free one), mutual TLS with ``tls``, whose
    handler is built once the address is known; it serves Work with the built-in handlers."""
    server = server_type(host, port, tls=tls)
    handler = make_handler(SiloAddress(host, server.port, 1))
    serve_work(server, handler)
    await server.start(handler)
    try:
        yield server, handler
    finally:
        await server.stop(None)


class CountingServer(MembershipServer):
    """A real server that counts its ping and gossip streams and can hold its ping answers (a hung
    silo): clear ``answering`` and every ping stream waits before its next answer; set it and the
    held ones go out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streams_opened = 0
        self.streams_open = 0
        self.gossip_streams_opened = 0
        self.gossip_streams_open = 0
        self.answering = asyncio.Event()
        self.answering.set()

    async def _gossip_stream(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        self.gossip_streams_opened += 1
        self.gossip_streams_open += 1
        try:
            async for response in super()._gossip_stream(requests, context):
                yield response
        finally:
            self.gossip_streams_open -= 1

    async def _ping_stream(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        self.streams_opened += 1
        self.streams_open += 1
        try:
            async for response in super()._ping_stream(requests, context):
                await self.answering.wait()
                yield response
        finally:
            self.streams_open -= 1


def serve_work(server: MembershipServer, silo: WorkHost, handlers: HandlerRegistry | None = None) -> WorkService:
    """Have ``server`` serve the Work service for ``silo`` (as ``silo.runtime.process.assemble`` does)."""

    async def admit(cluster_id: str, sender: Callable[[], str], context: Any, method: str) -> WorkHost:
        await server.admit_cluster(cluster_id, sender, context, method)
        return silo

    service = WorkService(admit, handlers)
    server.add_service(service)
    return service
