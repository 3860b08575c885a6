"""The membership lease and self-fencing, in-process on a fake clock (``silo.membership.lease``).

Each silo reaches the shared memory table through a ``FlakyTable`` of its own, so one silo can
lose the table while the others keep it, and the network (``FakeNetwork``) cuts it off from
its peers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from membership_tables import MembershipTable, SiloAddress, SiloStatus
from silo.exit_codes import ExitCode
from silo.membership.clock import FakeClock
from silo.membership.lease import (
    MembershipConfirmation,
    MembershipLease,
    PeerVerdict,
    judge_confirmations,
    outage_vouch_possible,
    takeover_wait,
)
from silo.membership.lease_keeper import FIRST_ASKED, WIDER_ASKED
from silo.membership.options import OptionsError, SiloOptions
from silo.membership.ring import successors
from silo.membership.votes import VoteOutcome
from silo.runtime.silo import Silo
from tests.silo.harness import (
    LOCAL,
    T0,
    FakeNetwork,
    FlakyTable,
    FunctionProber,
    RecordingGossip,
    address,
    async_test,
    make_silo,
    memory_table,
    network_silo,
    table_call_name,
)

STEP = LOCAL.lease_renew_interval / 5
T = TypeVar("T")


class Cluster:
    """Started silos, each with its own switchable view of one table."""

    def __init__(self, size: int, options: SiloOptions = LOCAL) -> None:
        self.clock, self.network, self.store = FakeClock(T0), FakeNetwork(), memory_table()
        self.tables = [FlakyTable(self.store) for _ in range(size)]
        self.silos = [
            network_silo(table, port, self.clock, self.network, options=options)
            for port, table in enumerate(self.tables, 1)
        ]
        self.fencing: dict[int, list[bool]] = {index: [] for index in range(size)}
        for index, silo in enumerate(self.silos):
            silo.on_fencing(self._recorder(index))

    def _recorder(self, index: int) -> Callable[[bool], Awaitable[None]]:
        async def record(fenced: bool) -> None:
            self.fencing[index].append(fenced)

        return record

    async def start(self) -> None:
        starting = [asyncio.create_task(silo.start()) for silo in self.silos]
        while not all(start.done() for start in starting):
            await self.clock.advance(STEP)
        await asyncio.gather(*starting)
        await self.clock.advance(LOCAL.probe_timeout)

    def cut_off(self, index: int, *, table: bool = True, peers: bool = True) -> None:
        if table:
            self.tables[index].down = True
        if peers:
            self.network.partitioned.add(self.silos[index].silo_address)

    async def advance_until(self, condition: Callable[[], bool], limit: float) -> float:
        """Advance in small steps until ``condition()``; the seconds it took (fails past ``limit``)."""
        elapsed = 0.0
        while not condition():
            assert elapsed <= limit, f"not within {limit}s"
            await self.clock.advance(STEP)
            elapsed += STEP
        return elapsed

    def status_in_table(self, index: int) -> SiloStatus:
        entry = self.store.read_row(self.silos[index].silo_address).get(self.silos[index].silo_address)
        assert entry is not None
        return entry[0].status

    async def stop(self) -> None:
        for table in self.tables:
            table.down = False
        self.network.partitioned.clear()
        for silo in self.silos:
            await silo.stop()


async def started(size: int, options: SiloOptions = LOCAL) -> Cluster:
    cluster = Cluster(size, options)
    await cluster.start()
    return cluster


# --- the lease itself -------------------------------------------------------------------


def test_a_lease_runs_out_lease_timeout_after_the_start_of_its_last_confirmation() -> None:
    now = [100.0]
    lease = MembershipLease(1.0, lambda: now[0])
    assert not lease.valid()
    assert lease.anchor is None
    assert lease.confirm(99.5)
    now[0] = 100.5
    assert lease.valid()
    assert lease.remaining() == pytest.approx(0.0)
    assert not lease.confirm(99.0), "an older call's confirmation must not move the anchor back"
    now[0] = 100.6
    assert not lease.valid()
    assert lease.confirm(100.2)
    assert lease.valid()


def test_a_lease_held_since_a_mark_means_it_never_ran_out_in_between() -> None:
    now = [100.0]
    lease = MembershipLease(1.0, lambda: now[0])
    assert not lease.held_since(100.0), "no lease before the first confirmation"
    lease.confirm(100.0)
    now[0] = 100.8
    assert lease.confirm(100.7)
    now[0] = 101.5
    assert lease.held_since(100.0), "renewed in time: unbroken since the first confirmation"
    now[0] = 101.8
    assert not lease.held_since(100.0), "ran out and not renewed"
    assert lease.confirm(101.6)
    assert lease.valid()
    assert not lease.held_since(100.0), "valid again, but it ran out between the mark and now"
    assert lease.held_since(101.8), "unbroken since its renewal"


def test_the_takeover_wait_outlasts_the_lease_on_any_two_clocks_within_the_drift() -> None:
    lease, drift = 10.0, 0.01
    wait = takeover_wait(lease, drift)
    # the dead silo's clock runs slow by `drift`: its lease lasts lease / (1 - drift) of real time;
    # the new owner's clock runs fast by `drift`: its wait lasts wait * (1 - drift) of real time
    assert wait * (1 - drift) >= lease / (1 - drift)
    assert SiloOptions.production().takeover_wait == pytest.approx(wait)
    assert SiloOptions.local().takeover_wait == pytest.approx(takeover_wait(1.0, drift))


def test_clock_drift_must_be_a_small_fraction() -> None:
    with pytest.raises(OptionsError, match="max_clock_drift"):
        SiloOptions(max_clock_drift=0.6)
    assert SiloOptions.local().with_overrides({"lease_timeout": "2s"}).lease_renew_interval == 0.5


def answer(port: int, version: int = 7, *, heard: int = 7, unsure: bool = False) -> MembershipConfirmation:
    return MembershipConfirmation(address(port), False, SiloStatus.NONE, version, heard, unsure)


def read_answer(port: int, status: SiloStatus, version: int = 7) -> MembershipConfirmation:
    return MembershipConfirmation(address(port), True, status, version, version, False)


def test_peers_confirm_a_lease_only_by_reading_the_row_or_by_all_being_in_the_same_outage() -> None:
    members = [address(2), address(3)]
    same = {member.port: answer(member.port) for member in members}

    def judge(answers: dict[int, MembershipConfirmation], version: int = 7, heard: int = 7) -> PeerVerdict:
        return judge_confirmations(version, heard, members, {address(port): a for port, a in answers.items()})

    assert judge({2: read_answer(2, SiloStatus.ACTIVE)}) is PeerVerdict.CONFIRMED
    assert judge({2: read_answer(2, SiloStatus.ACTIVE, 8)}) is PeerVerdict.UNKNOWN, "our view missed a change"
    assert judge({2: read_answer(2, SiloStatus.DEAD), 3: answer(3)}) is PeerVerdict.NOT_ACTIVE
    assert judge(same) is PeerVerdict.OUTAGE
    assert judge({2: answer(2)}) is PeerVerdict.UNKNOWN, "a silent member may be the side with the table"
    assert judge({**same, 3: answer(3, 8, heard=8)}) is PeerVerdict.UNKNOWN, "a newer view: someone wrote"
    assert judge({**same, 3: answer(3, heard=9)}) is PeerVerdict.UNKNOWN, "someone announced a newer version"
    assert judge({**same, 3: answer(3, unsure=True)}) is PeerVerdict.UNKNOWN, "a write in doubt may have committed"
    assert judge(same, heard=8) is PeerVerdict.UNKNOWN, "the asker itself heard of a newer version"


def test_everyone_is_asked_only_while_the_first_answers_leave_an_outage_vouch_possible() -> None:
    first = [address(2), address(3)]

    def possible(answers: list[MembershipConfirmation], version: int = 7, heard: int = 7) -> bool:
        return outage_vouch_possible(version, heard, first, {a.responder: a for a in answers})

    assert possible([answer(2), answer(3)])
    assert possible([answer(2, 8, heard=8), answer(3, 8, heard=8)]), "a newer view we would take from them"
    assert not possible([answer(2)]), "a neighbour that did not answer: the vouch needs everyone"
    assert not possible([answer(2), answer(3, 8, heard=8)]), "views that differ (a join storm)"
    assert not possible([answer(2, 6, heard=6), answer(3, 6, heard=6)]), "views older than ours"
    assert not possible([answer(2), answer(3, heard=8)]), "a newer version heard of"
    assert not possible([answer(2), answer(3)], heard=8), "we heard of a newer version"
    assert not possible([answer(2), answer(3, unsure=True)]), "a write in doubt"
    assert not possible([answer(2), read_answer(3, SiloStatus.ACTIVE)]), "a reader settles it without the rest"


# --- fencing in a cluster ----------------------------------------------------------------


@async_test
async def test_a_silo_cut_off_from_peers_and_table_fences_before_the_others_declare_it_dead() -> None:
    cluster = await started(5)
    victim = cluster.silos[2]
    assert not victim.fenced
    assert victim.work_refusal() is None
    cluster.cut_off(2)
    fenced_after = await cluster.advance_until(lambda: victim.fenced, LOCAL.lease_timeout + STEP)
    assert cluster.status_in_table(2) is SiloStatus.ACTIVE, "fenced only after the others declared it Dead"
    assert "fenced" in (victim.work_refusal() or "")
    assert not victim.is_leader()
    await cluster.advance_until(lambda: cluster.fencing[2] == [True], LOCAL.lease_renew_interval)
    assert fenced_after <= LOCAL.lease_timeout + STEP

    # the others declare it Dead; it cannot know, and stays fenced (and votes against nobody)
    await cluster.advance_until(lambda: cluster.status_in_table(2) is SiloStatus.DEAD, 4 * LOCAL.detection_time)
    for _ in range(10):
        await cluster.clock.advance(LOCAL.probe_timeout)
        assert victim.fenced
    assert all(cluster.status_in_table(index) is SiloStatus.ACTIVE for index in (0, 1, 3, 4)), "it voted"

    # the cut heals: it reads itself Dead and exits with DECLARED_DEAD, never having unfenced
    ending = asyncio.create_task(victim.wait_terminated())
    cluster.tables[2].down = False
    cluster.network.partitioned.clear()
    await cluster.advance_until(ending.done, 2 * LOCAL.table_refresh_timeout)
    assert ending.result() is ExitCode.DECLARED_DEAD
    assert cluster.fencing[2] == [True]
    await cluster.stop()


@async_test
async def test_a_fenced_silo_casts_no_vote_even_when_its_peers_look_silent() -> None:
    cluster = await started(3)
    victim = cluster.silos[0]
    cluster.cut_off(0, table=True, peers=True)
    await cluster.advance_until(lambda: victim.fenced, LOCAL.lease_timeout + STEP)
    cluster.tables[0].down = False  # the table is back, the lease not yet: a vote must still be refused
    assert victim.fenced
    outcome = await victim._roles.vote_against(victim._roles.cluster, cluster.silos[1].silo_address)
    assert outcome is VoteOutcome.NOT_ALLOWED
    await cluster.stop()


@async_test
async def test_a_fenced_silo_still_votes_on_refusals() -> None:
    """Fencing and the majority rule guard against silence that is a cut's; a refusal is no cut's
    (nothing listens at the target's endpoint), so a vote on refusals needs neither."""
    cluster = await started(3)
    victim = cluster.silos[0]
    cluster.cut_off(0, table=True, peers=True)
    await cluster.advance_until(lambda: victim.fenced, LOCAL.lease_timeout + STEP)
    cluster.tables[0].down = False
    view = victim._roles.manager.view
    await view.access.attempt(cluster.tables[0].read_version)  # the table is back (a read that confirms nothing)
    assert victim.fenced
    target = cluster.silos[1].silo_address
    outcome = await victim._roles.vote_against(victim._roles.cluster, target, refused=True)
    assert outcome is VoteOutcome.VOTED
    assert [voter for voter, _ in cluster.store.read_row(target).get(target)[0].suspect_times] == [victim.silo_address]
    await cluster.stop()


@async_test
async def test_a_silo_that_loses_only_the_table_is_confirmed_by_its_peers_and_never_fences_nor_dies() -> None:
    cluster = await started(5)
    lonely = cluster.silos[1]
    cluster.cut_off(1, table=True, peers=False)
    for _ in range(int(4 * LOCAL.detection_time / STEP)):
        await cluster.clock.advance(STEP)
        assert not lonely.fenced, "its peers read its row for it"
    assert cluster.status_in_table(1) is SiloStatus.ACTIVE, "its peers still reach it: no death"
    assert cluster.fencing[1] == []
    await cluster.stop()


@async_test
async def test_a_table_outage_for_everyone_fences_nobody_and_declares_nobody_dead() -> None:
    cluster = await started(5)
    for table in cluster.tables:
        table.down = True
    for _ in range(int(20.0 / STEP)):  # 20 s of the local preset: 20 lease timeouts
        await cluster.clock.advance(STEP)
        assert not any(silo.fenced for silo in cluster.silos)
    for table in cluster.tables:
        table.down = False
    await cluster.clock.advance(2 * LOCAL.table_refresh_timeout)
    assert all(cluster.status_in_table(index) is SiloStatus.ACTIVE for index in range(5))
    assert all(records == [] for records in cluster.fencing.values())
    await cluster.stop()


@async_test
async def test_a_view_left_behind_when_the_table_goes_down_catches_up_from_the_peers_and_nobody_fences() -> None:
    """A change's gossip missed one member just before the table went down for everyone. Its
    view is older than the others', so no vouch holds at first; it takes the newer view from a
    peer during the outage and from then on they all vouch for it: nobody fences."""
    cluster = await started(3)
    behind = cluster.silos[2]
    cluster.network.partitioned.add(behind.silo_address)  # the change's gossip cannot reach it
    assert await cluster.silos[0].set_properties({"zone": "b"})
    await cluster.clock.advance(STEP)
    cluster.network.partitioned.clear()
    for table in cluster.tables:
        table.down = True
    newer = cluster.silos[0].snapshot.version
    assert behind.snapshot.version < newer, "the lagging member must miss the change"
    for _ in range(int(10 * LOCAL.lease_timeout / STEP)):
        await cluster.clock.advance(STEP)
        assert not any(silo.fenced for silo in cluster.silos)
    assert behind.snapshot.version == newer, "it took the newer view from a peer"
    assert all(records == [] for records in cluster.fencing.values())
    await cluster.stop()


class DeafToGossip:
    """A silo as the network reaches it, minus gossip: what a join storm is to an Active silo
    (joins are not gossiped then), so its view is behind the table at every lease renewal."""

    def __init__(self, silo: Silo) -> None:
        self._silo = silo

    async def on_gossip(self, message: object, sender: object) -> None:
        return None

    def __getattr__(self, name: str) -> object:
        return getattr(self._silo, name)


@async_test
async def test_a_silo_whose_view_is_always_behind_renews_with_one_catch_up_read_per_lease_and_never_fences() -> None:
    """The table moves all the time and no gossip reaches the silo (a join storm): every own-row
    read shows a newer version. It catches up only when its lease is about to run out, by
    reading the rows written since its view (the whole table only on the periodic refresh's
    cadence), and that read (which brings the newer view) renews the lease: it never fences. A
    full read that brought a newer view used to renew nothing, so in a storm every Active silo
    fenced; and a full read per lease per silo was most of a 1,000-silo storm's CPU."""
    cluster = await started(3)
    behind = cluster.silos[2]
    cluster.network.nodes[behind.silo_address] = DeafToGossip(behind)  # type: ignore[assignment]
    writer, table = cluster.silos[0], cluster.tables[2]
    table.calls.clear()
    for round_ in range(int(4 * LOCAL.lease_timeout / STEP)):
        if round_ % 2 == 0:
            assert await writer.set_properties({"round": str(round_)})
        await cluster.clock.advance(STEP)
        assert not behind.fenced, f"fenced after {round_ * STEP:.2f}s"
    catch_ups, full_reads = table.calls.count("read_changes"), table.calls.count("read_all")
    assert 3 <= catch_ups <= 6, f"{catch_ups} catch-up reads in four leases: {table.calls}"
    periods = 4 * LOCAL.lease_timeout / LOCAL.table_refresh_timeout
    assert full_reads <= periods / LOCAL.full_refresh_every + 1, f"{full_reads} full reads: {table.calls}"
    assert all(records == [] for records in cluster.fencing.values())
    await cluster.stop()


class SlowCatchUpReads:
    """A blocking-call runner whose catch-up reads (of the whole table, or of the rows written
    since a version) take ``seconds`` on the fake clock and, like a worker thread, run on when
    their caller stops waiting; counts how many run at once."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self._clock, self._seconds = clock, seconds
        self.running = self.most_at_once = 0

    async def __call__(self, call: Callable[[], T]) -> T:
        if table_call_name(call) not in ("read_all", "read_changes"):
            return call()

        async def read() -> T:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            try:
                await self._clock.sleep(self._seconds)
                return call()
            finally:
                self.running -= 1

        return await asyncio.shield(asyncio.ensure_future(read()))


@async_test
async def test_a_fenced_silo_whose_view_is_behind_never_runs_two_catch_up_reads_at_once() -> None:
    """Catch-up reads take three renewal intervals (an overloaded store) and the table moves all
    the time without gossip reaching the silo, so at every renewal its view is behind and it
    catches up with a read. A read its renewal stopped waiting for runs on (a worker thread); the
    next renewal waits for that one again instead of starting another, so at most one runs for
    the lease (and one for the periodic refresh) however long the lease stays out."""
    clock, network, store = FakeClock(T0), FakeNetwork(), memory_table()
    slow = SlowCatchUpReads(clock, 3 * LOCAL.lease_renew_interval)
    writer = network_silo(store, 1, clock, network)
    other = network_silo(store, 2, clock, network)
    behind = network_silo(store, 3, clock, network, run_blocking=slow)
    starting = [asyncio.create_task(silo.start()) for silo in (writer, other, behind)]
    while not all(start.done() for start in starting):
        await clock.advance(STEP)
    network.nodes[behind.silo_address] = DeafToGossip(behind)  # type: ignore[assignment]
    for round_ in range(int(6 * LOCAL.lease_timeout / STEP)):
        if round_ % 2 == 0:
            assert await writer.set_properties({"round": str(round_)})
        await clock.advance(STEP)
    assert slow.most_at_once <= 2, f"{slow.most_at_once} catch-up reads at once"
    stopping = [asyncio.create_task(silo.stop()) for silo in (writer, other, behind)]
    while not all(stop.done() for stop in stopping):  # a leave may wait on a slow read
        await clock.advance(STEP)
    await asyncio.gather(*stopping)


class CountedAsks:
    """A silo as the network reaches it, counting the ``ConfirmMembership`` asks it gets."""

    def __init__(self, silo: Silo) -> None:
        self._silo = silo
        self.asks = 0

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        self.asks += 1
        return await self._silo.confirm_membership(asker, known_version)

    def __getattr__(self, name: str) -> object:
        return getattr(self._silo, name)


@async_test
async def test_a_silo_that_loses_the_table_asks_a_few_neighbours_first_and_everyone_only_in_an_outage() -> None:
    """Of eight members, one loses the table: its three probe targets read its row for it, and
    nobody else is asked. Then the table goes down for everyone: the neighbours cannot read it,
    so each silo asks every member, they all vouch, and nobody fences."""
    cluster = await started(8)
    counted = [CountedAsks(silo) for silo in cluster.silos]
    for silo, proxy in zip(cluster.silos, counted, strict=True):
        cluster.network.nodes[silo.silo_address] = proxy  # type: ignore[assignment]
    cluster.tables[0].down = True
    await cluster.clock.advance(2 * LOCAL.lease_timeout)
    assert not cluster.silos[0].fenced
    asked = [index for index, proxy in enumerate(counted) if proxy.asks]
    assert len(asked) == 3, f"asked: {asked}"
    for table in cluster.tables:
        table.down = True
    for _ in range(int(3 * LOCAL.lease_timeout / STEP)):
        await cluster.clock.advance(STEP)
        assert not any(silo.fenced for silo in cluster.silos)
    assert all(proxy.asks for proxy in counted), "in an outage for everyone every member is asked"
    await cluster.stop()


class CountedAskers(CountedAsks):
    """``CountedAsks`` that also records who asked."""

    def __init__(self, silo: Silo) -> None:
        super().__init__(silo)
        self.askers: set[SiloAddress] = set()

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        self.askers.add(asker)
        return await super().confirm_membership(asker, known_version)


class SlowToConfirm(CountedAskers):
    """A silo whose answers to ``ConfirmMembership`` never come in time: its own reads are slow (an
    overloaded host in a join storm)."""

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        self.askers.add(asker)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@async_test
async def test_a_silo_whose_neighbours_cannot_vouch_for_an_outage_asks_a_few_more_not_everyone() -> None:
    """A silo loses the table and its three neighbours do not answer its asks in time (their own
    reads are slow: a join storm). Without their answers no outage vouch is possible, so asking
    all fifteen others would be wasted (at 1,000 silos, a million calls per renewal): it asks the
    next successors on ring 0 instead, one of which reads the table. It never fences, and the
    members beyond those successors are never asked."""
    cluster = await started(16)
    silo = cluster.silos[0]
    others = [other.silo_address for other in cluster.silos[1:]]
    neighbours = successors(silo.silo_address, others, FIRST_ASKED)
    wider = successors(silo.silo_address, others, FIRST_ASKED + WIDER_ASKED)
    proxies: dict[SiloAddress, CountedAskers] = {}
    for other in cluster.silos:
        kind = SlowToConfirm if other.silo_address in neighbours else CountedAskers
        proxies[other.silo_address] = cluster.network.nodes[other.silo_address] = kind(other)  # type: ignore[assignment]
    cluster.tables[0].down = True
    for _ in range(int(3 * LOCAL.lease_timeout / STEP)):
        await cluster.clock.advance(STEP)
        assert not silo.fenced
    asked = {member for member, proxy in proxies.items() if silo.silo_address in proxy.askers}
    assert set(neighbours) <= asked
    assert asked <= set(wider), f"asked beyond its {len(wider)} ring successors: {sorted(map(str, asked - set(wider)))}"
    assert len(others) > len(wider)
    await cluster.stop()


class HeldReads:
    """A blocking-call runner whose calls wait, while ``held``, until ``release()``: a slow store."""

    def __init__(self) -> None:
        self.held = False
        self._gate = asyncio.Event()

    async def __call__(self, call: Callable[[], T]) -> T:
        if self.held:
            await self._gate.wait()
        return call()

    def release(self) -> None:
        self.held = False
        self._gate.set()


@async_test
async def test_a_peer_vouches_only_with_a_read_that_started_after_the_ask() -> None:
    """On a slow store a peer's read of the asker's row outlives the ask it was started for. A
    later ask must not be answered with it (the read may be linearized before that ask was sent,
    where the asker anchors its lease): the peer says at once that it cannot read, and answers
    from the table again only with a read started after the ask."""
    clock, network, store = FakeClock(T0), FakeNetwork(), memory_table()
    reads = HeldReads()
    asker = network_silo(store, 1, clock, network)
    peer = network_silo(store, 2, clock, network, run_blocking=reads)
    starting = [asyncio.create_task(silo.start()) for silo in (asker, peer)]
    while not all(start.done() for start in starting):
        await clock.advance(STEP)
    reads.held = True
    first = asyncio.create_task(peer.confirm_membership(asker.silo_address))
    await clock.advance(LOCAL.lease_renew_interval)  # its read hangs: after half the asker's wait, "cannot read"
    assert not (await first).table_read
    second = asyncio.create_task(peer.confirm_membership(asker.silo_address))
    await asyncio.sleep(0)
    reads.release()  # the first ask's read completes now, before the second ask is answered
    answer = await second
    assert not answer.table_read, "answered with a read that started before the ask"
    third = asyncio.create_task(peer.confirm_membership(asker.silo_address))
    await clock.advance(STEP)
    answer = await third
    assert (answer.table_read, answer.asker_status) == (True, SiloStatus.ACTIVE)
    for silo in (asker, peer):
        await silo.stop()


@pytest.mark.parametrize("lagging", [True, False], ids=["its loop lags", "its loop keeps time"])
@async_test
async def test_a_silo_whose_reads_are_slow_while_its_loop_lags_asks_no_peer_and_waits_for_its_read(
    lagging: bool,
) -> None:
    """One silo's table calls stall. While its own event loop lags (an overloaded machine, where
    the peers' reads would queue behind the same cores) it asks no peer to read its row: its lease
    runs out, it fences, and the read it kept waiting for confirms it once it comes. While its loop
    keeps time the stall may be its own path to the store: its peers read its row for it and it
    never fences."""
    clock, network, store = FakeClock(T0), FakeNetwork(), memory_table()
    reads = HeldReads()
    silos = [network_silo(store, port, clock, network) for port in (1, 2, 3)]
    slow = network_silo(store, 4, clock, network, run_blocking=reads)
    silos.append(slow)
    starting = [asyncio.create_task(silo.start()) for silo in silos]
    while not all(start.done() for start in starting):
        await clock.advance(STEP)
    counted = [CountedAsks(silo) for silo in silos]
    for silo, proxy in zip(silos, counted, strict=True):
        network.nodes[silo.silo_address] = proxy  # type: ignore[assignment]
    slow._roles.health.lagging = lambda: lagging  # type: ignore[method-assign]
    reads.held = True
    for _ in range(int(2 * LOCAL.lease_timeout / STEP)):
        await clock.advance(STEP)
    asks = sum(proxy.asks for proxy in counted)
    if lagging:
        assert slow.fenced
        assert asks == 0, f"{asks} peers asked to read its row"
        reads.release()
        for _ in range(int(LOCAL.lease_renew_interval / STEP) + 1):
            await clock.advance(STEP)
        assert not slow.fenced
    else:
        assert not slow.fenced
        assert asks >= 1
        reads.release()
    for silo in silos:
        await silo.stop()


@async_test
async def test_in_a_table_outage_a_silent_member_makes_everyone_fence() -> None:
    """One member does not answer: it may be the side that still has the table."""
    cluster = await started(4)
    for table in cluster.tables:
        table.down = True
    cluster.network.partitioned.add(cluster.silos[3].silo_address)
    await cluster.advance_until(lambda: all(silo.fenced for silo in cluster.silos), LOCAL.lease_timeout + STEP)
    await cluster.stop()


@async_test
async def test_in_a_table_outage_a_newer_version_one_asker_knows_reaches_every_member_and_nobody_vouches() -> None:
    """A joiner whose insert's gossip reached nobody asks the members to confirm it: its ask
    carries the version it knows of, which they take as heard, so they no longer vouch for
    views without it (they cannot tell whether the joiner took keys), and they pass it on in
    their own asks."""
    cluster = await started(3)
    version = cluster.silos[0].snapshot.version
    for table in cluster.tables:
        table.down = True
    joiner = address(9)  # in nobody's view
    answer = await cluster.silos[1].confirm_membership(joiner, version + 2)
    assert (answer.table_read, answer.newest_version_heard) == (False, version + 2)
    await cluster.advance_until(lambda: all(silo.fenced for silo in cluster.silos), LOCAL.lease_timeout + STEP)
    # silo 0 heard of it only through silo 1's asks
    passed_on = await cluster.silos[0].confirm_membership(cluster.silos[2].silo_address)
    assert passed_on.newest_version_heard == version + 2
    await cluster.stop()


@async_test
async def test_a_joiner_whose_gossip_is_lost_stops_the_members_it_validated_with_vouching_for_older_views() -> None:
    """The members lost the table and vouch for one another (an outage for all, as far as they
    can tell); a joiner that still has the table joins, and its gossip reaches none of them. Its
    validation pings carry its insert's version, which they take as heard: they no longer vouch
    for their older view, and each one fences before the joiner serves the keys it took from them."""
    cluster = await started(3)
    for table in cluster.tables:
        table.down = True
    await cluster.clock.advance(2 * LOCAL.lease_timeout)
    assert not any(silo.fenced for silo in cluster.silos), "they vouch for one another"
    joiner_address = address(9)
    pings = cluster.network.prober(joiner_address)
    joiner = make_silo(FlakyTable(cluster.store), joiner_address, cluster.clock, prober=pings, gossip=RecordingGossip())
    cluster.network.nodes[joiner_address] = joiner  # pings reach it; its gossip and asks reach nobody
    joining = asyncio.create_task(joiner.start())
    await cluster.advance_until(joining.done, LOCAL.max_join_attempt_time)
    await joining
    assert joiner.status is SiloStatus.ACTIVE
    validation = [version for version in pings.known_versions if version]  # its probes since say nothing
    assert validation == 3 * [joiner.snapshot.version - 1], "each member was told of its insert (then Active)"
    serving_in = joiner.ownership().own_hold
    assert serving_in > 0, "the joiner waits before serving the keys it took"
    await cluster.advance_until(lambda: all(silo.fenced for silo in cluster.silos), serving_in)
    await joiner.stop()
    await cluster.stop()


@async_test
async def test_members_cut_off_from_the_table_and_a_joiner_stop_vouching_before_the_joiner_serves() -> None:
    """The hole an unbounded outage vouch left: the members lose the table *and* every link to a
    joiner that has the table. They vouch for one another (an outage for all, as far as they
    can tell), and the joiner, whose pings they never answered, gives up on their standing
    heartbeats and turns Active. The vouch is bounded (``max_outage_vouch`` after the table last
    confirmed them) and the joiner, which knows it did not reach them, holds the keys it took
    for ``outage_takeover_wait``: every member fences before it serves any."""
    options = LOCAL.with_overrides({"max_outage_vouch": "4s"})
    cluster = await started(3, options)
    for table in cluster.tables:
        table.down = True
    await cluster.clock.advance(2 * LOCAL.lease_timeout)
    assert not any(silo.fenced for silo in cluster.silos), "they vouch for one another"
    joiner = make_silo(
        FlakyTable(cluster.store),
        address(9),
        cluster.clock,
        options=options,
        prober=FunctionProber(reachable=lambda _: False),
    )
    joining = asyncio.create_task(joiner.start())
    await cluster.advance_until(joining.done, LOCAL.max_join_attempt_time)
    await joining
    assert joiner.status is SiloStatus.ACTIVE
    hold = joiner.ownership().own_hold
    assert hold > options.max_outage_vouch, "it holds the keys it took past the members' vouch"
    await cluster.advance_until(lambda: all(silo.fenced for silo in cluster.silos), hold)
    assert joiner.ownership().own_hold > 0, "the members fenced before the joiner serves"
    await joiner.stop()
    await cluster.stop()


@async_test
async def test_a_joiner_that_reached_every_member_waits_only_the_takeover_wait() -> None:
    cluster = await started(3)
    joiner = network_silo(FlakyTable(cluster.store), 9, cluster.clock, cluster.network)
    joining = asyncio.create_task(joiner.start())
    await cluster.advance_until(joining.done, LOCAL.max_join_attempt_time)
    await joining
    assert 0 < joiner.ownership().own_hold <= LOCAL.takeover_wait
    await joiner.stop()
    await cluster.stop()


@async_test
async def test_a_silo_resuming_from_a_pause_longer_than_its_lease_is_fenced_before_anything_runs() -> None:
    cluster = await started(3)
    sleeper = cluster.silos[0]
    assert sleeper.work_refusal() is None
    cluster.clock.jump(LOCAL.lease_timeout + STEP)  # resumed: no timer of it has fired yet
    assert sleeper.fenced
    assert "fenced" in (sleeper.work_refusal() or "")
    assert not sleeper.is_leader()
    await cluster.advance_until(lambda: not sleeper.fenced, 2 * LOCAL.lease_renew_interval)  # the table confirms it
    assert sleeper.is_leader(), "the oldest Active silo leads again once confirmed"
    await cluster.stop()


@async_test
async def test_work_during_which_the_lease_ran_out_returns_no_results_even_if_renewed_since() -> None:
    cluster = await started(3)
    worker = cluster.silos[0]
    short = worker.results_guard()
    await cluster.clock.advance(3 * LOCAL.lease_timeout)  # renewed all along: results may go out
    assert short() is None
    paused = worker.results_guard()
    cluster.clock.jump(LOCAL.lease_timeout + STEP)  # the handler's thread (or the silo) stalled
    assert "lost its membership lease while the handler ran" in (paused() or "")
    await cluster.advance_until(lambda: not worker.fenced, 2 * LOCAL.lease_renew_interval)  # the table confirms it
    assert "lost its membership lease" in (paused() or ""), "a renewal does not undo the gap"
    assert worker.results_guard()() is None, "work started after the renewal is fine"
    await cluster.stop()


@async_test
async def test_a_healthy_cluster_never_fences() -> None:
    cluster = await started(4)
    for _ in range(200):
        await cluster.clock.advance(STEP * 3)
        assert not any(silo.fenced for silo in cluster.silos)
    assert all(records == [] for records in cluster.fencing.values())
    assert sum(silo.is_leader() for silo in cluster.silos) == 1
    await cluster.stop()


@async_test
async def test_a_silo_that_is_not_active_yet_is_not_fenced_and_refuses_work_for_its_status() -> None:
    table: MembershipTable = memory_table()
    clock, network = FakeClock(T0), FakeNetwork()
    silo = network_silo(table, 1, clock, network)
    assert not silo.fenced
    assert "CREATED" in (silo.work_refusal() or "")
    assert not silo.is_leader()


@async_test
async def test_never_two_leaders_when_the_leader_is_cut_off_from_its_peers_or_from_everything() -> None:
    for table in (False, True):
        cluster = await started(5)
        leader = cluster.silos[0]
        assert [silo.is_leader() for silo in cluster.silos] == [True, False, False, False, False]
        cluster.cut_off(0, table=table, peers=True)
        successors = []
        for _ in range(int(4 * (LOCAL.detection_time + LOCAL.takeover_wait) / STEP)):
            await cluster.clock.advance(STEP)
            leaders = [silo for silo in cluster.silos if silo.is_leader()]
            assert len(leaders) <= 1, f"two leaders at once (table cut: {table})"
            successors += [silo for silo in leaders if silo is not leader]
        assert successors, "a new leader took over"
        assert cluster.status_in_table(0) is SiloStatus.DEAD
        await cluster.stop()
