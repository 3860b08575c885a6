"""Test doubles for the silo runtime: function-backed fakes, a flaky table, a fake network.

Everything runs on a ``FakeClock`` and the inline table runner, so scenarios are
deterministic and never sleep.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ParamSpec

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from silo.membership.clock import FakeClock
from silo.membership.lease import MembershipConfirmation
from silo.membership.options import SiloOptions
from silo.membership.probing import (
    GossipMessage,
    GossipSender,
    IndirectProbeResult,
    MembershipRpcHandler,
    ProbeOutcome,
    Prober,
)
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import BlockingRunner, run_inline
from silo.runtime.silo import Silo

P = ParamSpec("P")
CLUSTER = "test-cluster"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class HandClock:
    """A monotonic clock (``Callable[[], float]``) the test moves by hand: ``clock.now += seconds``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def async_test(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an ``async def`` test in a fresh event loop (no pytest plugin needed)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def stop_cancelled_at_its_first_wait(stop: Coroutine[Any, Any, None]) -> None:
    """Run ``stop`` up to its first wait, then cancel it: what a caller being stopped itself does."""
    stopping = asyncio.create_task(stop)
    await asyncio.sleep(0)
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)


def memory_table(cluster_id: str = CLUSTER) -> MembershipTable:
    return open_table(f"memory://silo-test-{uuid.uuid4().hex}", cluster_id)


def address(port: int, generation: int = 1, host: str = "127.0.0.1") -> SiloAddress:
    return SiloAddress(host, port, generation)


def row(silo: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, when: datetime = T0) -> MembershipEntry:
    return MembershipEntry(silo, status, start_time=when, i_am_alive_time=when)


def view(*entries: MembershipEntry, version: int = 1) -> MembershipSnapshot:
    """A snapshot of ``entries`` at ``version`` (no table involved)."""
    rows = tuple((entry, f"etag-{index}") for index, entry in enumerate(entries))
    return MembershipSnapshot(MembershipTableData(rows, TableVersion(version, "v")))


def seed(table: MembershipTable, *entries: MembershipEntry) -> None:
    """Initialize ``table`` and insert ``entries`` directly (as other silos would have)."""
    table.initialize()
    for entry in entries:
        assert table.insert_row(entry, table.read_all().version.next())


class FlakyTable(MembershipTable):
    """A ``MembershipTable`` that raises ``TableUnavailableError`` while ``down`` is True."""

    def __init__(self, inner: MembershipTable) -> None:
        super().__init__(inner.cluster_id)
        self.inner = inner
        self.reads_changes = inner.reads_changes
        self.max_rows_per_update = inner.max_rows_per_update
        self.down = False
        self.failed_calls = 0
        self.calls: list[str] = []

    def _check(self) -> None:
        self.calls.append(inspect.stack()[1].function)
        if self.down:
            self.failed_calls += 1
            raise TableUnavailableError("the test switched the table off") from ConnectionError("refused")

    def initialize(self, try_init_version: bool = True) -> None:
        self._check()
        self.inner.initialize(try_init_version)

    def read_all(self) -> MembershipTableData:
        self._check()
        return self.inner.read_all()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        self._check()
        return self.inner.read_row(silo_address)

    def read_rows(self, silos: Sequence[SiloAddress]) -> MembershipTableData:
        self._check()
        return self.inner.read_rows(silos)

    def read_version(self) -> TableVersion:
        self._check()
        return self.inner.read_version()

    def read_changes(self, since: int) -> MembershipTableData:
        self._check()
        return self.inner.read_changes(since)

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        self._check()
        return self.inner.insert_row(entry, version)

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        self._check()
        return self.inner.update_row(entry, etag, version)

    def update_rows(self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion) -> bool:
        self._check()
        return self.inner.update_rows(updates, version)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        self._check()
        return self.inner.insert_row_with_etags(entry, version)

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        self._check()
        return self.inner.insert_row_at_next_version(entry)

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        self._check()
        return self.inner.update_row_at_next_version(entry, etag)

    def update_rows_with_etags(
        self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion
    ) -> CommittedWrite | None:
        self._check()
        return self.inner.update_rows_with_etags(updates, version)

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self._check()
        self.inner.update_i_am_alive(silo_address, when)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        self._check()
        return self.inner.cleanup_defunct_entries(before)

    def delete_cluster_entries(self) -> None:
        self._check()
        self.inner.delete_cluster_entries()


def table_call_name(call: Callable[..., Any]) -> str:
    """The table method a blocking call handed to a runner runs (through ``functools.partial`` and
    ``TableAccess.call_timed``'s wrapper), e.g. ``"read_row"``; "" for another callable."""
    call = inspect.unwrap(call)
    return str(getattr(getattr(call, "func", call), "__name__", ""))


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


Reachability = Callable[[SiloAddress], bool | ProbeOutcome | Awaitable[bool | ProbeOutcome]]
"""How a scripted ping of a target ends: True answered, False timed out, or a ``ProbeOutcome``."""


@dataclass
class FunctionProber:
    """A ``Prober`` backed by plain functions; records every call."""

    reachable: Reachability = lambda target: True
    """True: answered; False: timed out (silence); or a ``ProbeOutcome``."""
    indirect: Callable[[SiloAddress, SiloAddress], IndirectProbeResult | Awaitable[IndirectProbeResult]] | None = None
    """How an intermediary's report comes (or raises: it cannot be asked); None: it reports that it did not reach."""
    pings: list[SiloAddress] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)
    indirect_calls: list[tuple[SiloAddress, SiloAddress]] = field(default_factory=list)
    indirect_timeouts: list[float] = field(default_factory=list)
    """How long each indirect probe asked its intermediary to watch the target."""
    reachable_on_new_connection: Reachability | None = None
    """How pings on a new connection end (``Prober.ping_on_new_connection``); None: as ``reachable``."""
    new_connection_pings: list[SiloAddress] = field(default_factory=list)
    connects: Reachability = lambda target: True
    """How bare TCP connects end (``Prober.connect``): the path to the target's host."""
    connects_made: list[SiloAddress] = field(default_factory=list)
    tell: Callable[[SiloAddress, int], None] | None = None
    """Hands a ping's ``known_version`` to its target before the target answers (``hear_of``)."""
    known_versions: list[int] = field(default_factory=list)
    """The ``known_version`` of every ping."""

    async def ping(self, target: SiloAddress, timeout: float, known_version: int = 0) -> ProbeOutcome:
        self.pings.append(target)
        self.timeouts.append(timeout)
        self.known_versions.append(known_version)
        result = await _maybe_await(self.reachable(target))
        if isinstance(result, ProbeOutcome):
            return result
        if result and known_version and self.tell is not None:
            self.tell(target, known_version)
        return ProbeOutcome.ANSWERED if result else ProbeOutcome.TIMED_OUT

    async def ping_on_new_connection(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """Answered as ``reachable`` says, unless ``reachable_on_new_connection`` says otherwise."""
        self.new_connection_pings.append(target)
        decide = self.reachable if self.reachable_on_new_connection is None else self.reachable_on_new_connection
        result = await _maybe_await(decide(target))
        if isinstance(result, ProbeOutcome):
            return result
        return ProbeOutcome.ANSWERED if result else ProbeOutcome.TIMED_OUT

    async def connect(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """Connected unless ``connects`` says otherwise (a stopped process's kernel still accepts)."""
        self.connects_made.append(target)
        result = await _maybe_await(self.connects(target))
        if isinstance(result, ProbeOutcome):
            return result
        return ProbeOutcome.ANSWERED if result else ProbeOutcome.TIMED_OUT

    async def probe_indirectly(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> IndirectProbeResult:
        self.indirect_calls.append((intermediary, target))
        self.indirect_timeouts.append(timeout)
        if self.indirect is None:  # an intermediary that reaches nobody, and says so
            return IndirectProbeResult(False, 0, 0.0, f"{intermediary} reaches nobody in this test")
        result: IndirectProbeResult = await _maybe_await(self.indirect(intermediary, target))
        return result


@dataclass
class RecordingGossip:
    """A ``GossipSender`` that records (target, version) and optionally delivers the message."""

    deliver: Callable[[SiloAddress, GossipMessage], Awaitable[None]] | None = None
    fetch: Callable[[SiloAddress], MembershipTableData] | None = None
    confirm: Callable[[SiloAddress, int], Awaitable[MembershipConfirmation]] | None = None
    """Answers ``confirm_membership(target, timeout, known_version)`` as ``confirm(target, known_version)``."""
    sent: list[tuple[SiloAddress, int]] = field(default_factory=list)
    messages: list[tuple[SiloAddress, GossipMessage]] = field(default_factory=list)
    fetched: list[SiloAddress] = field(default_factory=list)

    async def send(self, target: SiloAddress, message: GossipMessage) -> None:
        self.sent.append((target, message.version))
        self.messages.append((target, message))
        if self.deliver is not None:
            await self.deliver(target, message)

    async def fetch_membership(self, target: SiloAddress, timeout: float) -> MembershipTableData:
        self.fetched.append(target)
        if self.fetch is None:
            raise ConnectionError(f"no views to fetch in this test ({target})")
        return self.fetch(target)

    async def confirm_membership(
        self, target: SiloAddress, timeout: float, known_version: int = 0
    ) -> MembershipConfirmation:
        if self.confirm is None:
            raise ConnectionError(f"no peer confirms anyone in this test ({target})")
        return await self.confirm(target, known_version)


@dataclass
class FakeNetwork:
    """In-process silos reach each other unless one side is in ``partitioned``, or ``sides`` puts
    them on different sides of a cut (a silo not in ``sides`` is on every side)."""

    nodes: dict[SiloAddress, MembershipRpcHandler] = field(default_factory=dict)
    partitioned: set[SiloAddress] = field(default_factory=set)
    sides: dict[SiloAddress, int] = field(default_factory=dict)

    def connected(self, source: SiloAddress, target: SiloAddress) -> bool:
        side, other = self.sides.get(source), self.sides.get(target)
        if side is not None and other is not None and side != other:
            return False
        return target in self.nodes and source not in self.partitioned and target not in self.partitioned

    def prober(self, source: SiloAddress) -> FunctionProber:
        prober = FunctionProber(
            reachable=lambda target: self.connected(source, target),
            tell=lambda target, version: self.nodes[target].hear_of(version),
        )

        async def indirect(intermediary: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
            watch = prober.indirect_timeouts[-1]  # this call's: recorded just before it was made
            if not self.connected(source, intermediary):
                raise ConnectionError(f"{intermediary} is unreachable from {source}")
            return await self.nodes[intermediary].probe_for_peer(target, watch)

        prober.indirect = indirect
        return prober

    def gossip(self, source: SiloAddress) -> RecordingGossip:
        async def deliver(target: SiloAddress, message: GossipMessage) -> None:
            if not self.connected(source, target):
                raise ConnectionError(f"{target} is unreachable from {source}")
            await self.nodes[target].on_gossip(message, source)

        def fetch(target: SiloAddress) -> MembershipTableData:
            if not self.connected(source, target):
                raise ConnectionError(f"{target} is unreachable from {source}")
            return self.nodes[target].membership_snapshot()

        async def confirm(target: SiloAddress, known_version: int) -> MembershipConfirmation:
            if not self.connected(source, target):
                raise ConnectionError(f"{target} is unreachable from {source}")
            return await self.nodes[target].confirm_membership(source, known_version)

        return RecordingGossip(deliver=deliver, fetch=fetch, confirm=confirm)


LOCAL = SiloOptions.local()


def make_silo(
    table: MembershipTable,
    silo: SiloAddress,
    clock: FakeClock,
    *,
    prober: Prober | None = None,
    gossip: GossipSender | None = None,
    options: SiloOptions = LOCAL,
    run_blocking: BlockingRunner = run_inline,
    **fields: Any,
) -> Silo:
    """A ``Silo`` on the fake clock with the inline table runner (unless given) and a fixed random seed."""
    return Silo(
        table=table,
        address=silo,
        options=options,
        prober=prober or FunctionProber(),
        gossip=gossip or RecordingGossip(),
        clock=clock,
        random=random.Random(silo.port),
        run_blocking=run_blocking,
        **fields,
    )


def network_silo(table: MembershipTable, port: int, clock: FakeClock, network: FakeNetwork, **fields: Any) -> Silo:
    """A silo at ``address(port)`` wired to ``network`` and registered in it, not started
    (``fields``: more ``make_silo`` arguments)."""
    silo_address = address(port)
    silo = make_silo(
        table, silo_address, clock, prober=network.prober(silo_address), gossip=network.gossip(silo_address), **fields
    )
    network.nodes[silo.silo_address] = silo
    return silo


def cluster_silos(
    table: MembershipTable,
    clock: FakeClock,
    network: FakeNetwork,
    ports: Iterable[int],
    run_blocking: BlockingRunner = run_inline,
) -> list[Silo]:
    """Silos wired to ``network`` (registered in it), not started."""
    return [network_silo(table, port, clock, network, run_blocking=run_blocking) for port in ports]
