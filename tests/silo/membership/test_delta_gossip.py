"""Delta gossip: a writer builds the next snapshot from its own write, receivers apply it without reading.

Deterministic: in-memory tables wrapped in ``FlakyTable`` (which records every call), a fake clock,
and table managers wired to each other by plain functions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TypeVar

import pytest

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
)
from membership_tables.contract import RowUpdate
from silo.membership.clock import FakeClock
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import LARGE_VIEW, MembershipDelta, MembershipSnapshot
from silo.membership.table_access import BlockingRunner, run_inline
from silo.membership.table_manager import MembershipTableManager
from silo.membership.table_view import ViewStep
from silo.membership.vote_caster import VIEW_VOTE_GOSSIP_WAIT
from silo.membership.votes import VoteOutcome
from tests.silo.harness import (
    T0,
    FlakyTable,
    address,
    async_test,
    memory_table,
    row,
    seed,
    stop_cancelled_at_its_first_wait,
    view,
)

ME, PEER, OTHER, FOURTH = address(1), address(2), address(3), address(4)
OPTIONS = SiloOptions.local()
T = TypeVar("T")


class Node:
    """One table manager with its own recording handle on the shared store, and what it gossiped."""

    def __init__(
        self,
        store: MembershipTable,
        me: SiloAddress,
        clock: FakeClock,
        peers: dict[SiloAddress, Node],
        run_blocking: BlockingRunner = run_inline,
        options: SiloOptions = OPTIONS,
        *,
        trusted: bool = False,
        deliver: bool = False,
    ) -> None:
        """``trusted``: gossip comes from members only (mutual TLS), so votes may be cast on the
        view. ``deliver``: hand each write's gossip to every other node at once (a task each),
        as the gossiper would; otherwise a test hands it over itself."""
        self.table = FlakyTable(store)
        self.gossiped: list[tuple[GossipMessage, tuple[SiloAddress, ...]]] = []
        self.view_at_gossip: list[int] = []
        """Our own view's version when each write of ours went to the gossiper."""
        self.pulls: list[SiloAddress] = []
        self.peers = peers
        self.deliveries: list[asyncio.Task[None]] = []

        def on_write(message: GossipMessage, snapshot: MembershipSnapshot, dead: tuple[SiloAddress, ...]) -> None:
            self.gossiped.append((message, dead))
            self.view_at_gossip.append(self.manager.snapshot.version)
            if deliver:
                self.deliveries.extend(
                    asyncio.create_task(node.manager.on_gossip(message, me))
                    for node in peers.values()
                    if node is not self
                )

        async def fetch_view(peer: SiloAddress, timeout: float) -> MembershipTableData:
            self.pulls.append(peer)
            if peer not in self.peers:
                raise ConnectionError(f"{peer} does not answer")
            return self.peers[peer].manager.snapshot.data

        self.manager = MembershipTableManager(
            table=self.table,
            address=me,
            options=options,
            clock=clock,
            random=random.Random(5),
            run_blocking=run_blocking,
            on_write=on_write,
            fetch_view=fetch_view,
            trusted_gossip=trusted,
        )
        peers[me] = self

    def table_calls(self) -> list[str]:
        calls = list(self.table.calls)
        self.table.calls.clear()
        return calls


async def run_after_a_yield(call: Callable[[], T]) -> T:
    """A table runner that suspends once, like a worker thread: votes queue behind one in flight."""
    await asyncio.sleep(0)
    return call()


def rows_without_heartbeats(data: MembershipTableData) -> list[tuple[object, ...]]:
    return [(entry.replace(i_am_alive_time=T0), etag) for entry, etag in data.rows]


async def cluster_of_three(*, trusted: bool = False) -> tuple[MembershipTable, FakeClock, dict[SiloAddress, Node]]:
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(ME), row(PEER), row(OTHER))
    nodes: dict[SiloAddress, Node] = {}
    for silo in (ME, PEER, OTHER):
        node = Node(store, silo, clock, nodes, trusted=trusted)
        await node.manager.refresh()
        node.table_calls()
    return store, clock, nodes


EVERY_THIRD = dataclasses.replace(OPTIONS, full_refresh_every=3)


async def refreshing_cluster_of_three() -> tuple[MembershipTable, FakeClock, dict[SiloAddress, Node]]:
    """ME, PEER and OTHER, each reading the version every period and the whole table every third."""
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(ME), row(PEER), row(OTHER))
    nodes: dict[SiloAddress, Node] = {}
    for silo in (ME, PEER, OTHER):
        node = Node(store, silo, clock, nodes, options=EVERY_THIRD)
        await node.manager.refresh()
        node.table_calls()
    return store, clock, nodes


@async_test
async def test_a_silo_that_missed_a_change_takes_it_from_a_peer_at_its_refresh_not_from_the_table() -> None:
    """The table is what the whole cluster shares: at 1,000 silos ~60 read it in full per death."""
    store, clock, nodes = await refreshing_cluster_of_three()
    seed(store, row(FOURTH, SiloStatus.JOINING))  # a change whose gossip never reached ME
    await nodes[PEER].manager.refresh()
    await nodes[OTHER].manager.refresh()
    me = nodes[ME]
    me.table_calls()
    me.manager.start()
    await clock.advance(EVERY_THIRD.table_refresh_timeout)
    assert me.table_calls() == ["read_version"]
    assert len(me.pulls) == 1
    assert me.manager.snapshot.version == store.read_all().version.version
    assert me.manager.snapshot.status_of(FOURTH) is SiloStatus.JOINING
    await me.manager.stop()


@async_test
async def test_a_version_read_that_races_the_gossip_of_the_change_waits_for_the_gossip() -> None:
    """In one 1,000-silo kill 42 silos asked a peer too early and read the whole table."""
    store, clock, nodes = await refreshing_cluster_of_three()
    peer = nodes[PEER]
    assert await peer.manager.update_own_status(SiloStatus.SHUTTING_DOWN, peer.manager.deadline_in(10))
    [(message, _)] = peer.gossiped  # on its way to ME, not there yet
    me = nodes[ME]
    me.manager.start()
    while "read_version" not in me.table.calls:
        await clock.advance(0.01)
    assert me.manager.snapshot.version < store.read_version().version
    await clock.advance(EVERY_THIRD.probe_timeout / 2)
    await me.manager.on_gossip(message, PEER)
    await clock.advance(EVERY_THIRD.probe_timeout)
    assert me.table_calls() == ["read_version"]
    assert me.pulls == []
    assert me.manager.snapshot.status_of(PEER) is SiloStatus.SHUTTING_DOWN
    await me.manager.stop()


@async_test
async def test_a_silo_whose_peer_cannot_give_the_change_reads_the_table() -> None:
    store, clock, nodes = await refreshing_cluster_of_three()
    seed(store, row(FOURTH, SiloStatus.JOINING))  # nobody has seen it but the table
    me = nodes[ME]
    me.manager.start()
    await clock.advance(EVERY_THIRD.table_refresh_timeout)
    assert me.table_calls() == ["read_version", "read_changes"]  # the peer asked was behind too
    assert len(me.pulls) == 1
    assert me.manager.snapshot.status_of(FOURTH) is SiloStatus.JOINING
    await me.manager.stop()


def test_a_delta_applies_only_at_its_base_version_and_keeps_the_later_heartbeat() -> None:
    later = T0 + timedelta(seconds=30)
    base = view(row(ME, when=later), row(PEER), version=4)
    suspected = row(ME).replace(suspect_times=((PEER, T0),))
    joiner = row(OTHER, SiloStatus.JOINING)
    delta = MembershipDelta(4, TableVersion(5, "v5"), ((suspected, "e1"), (joiner, "e2")))
    applied = base.apply(delta)
    assert applied is not None
    assert applied.version == 5
    assert applied.table_version.etag == "v5"
    assert [entry.silo_address for entry in applied.entries] == [ME, PEER, OTHER]
    assert applied.data.get(ME) == (suspected.replace(i_am_alive_time=later), "e1")
    assert applied.data.get(PEER) == base.data.get(PEER)
    assert applied.data.get(OTHER) == (joiner, "e2")
    assert view(row(ME), version=3).apply(delta) is None
    assert view(row(ME), version=5).apply(delta) is None


@async_test
async def test_a_vote_costs_one_read_and_one_write_and_the_writer_does_not_reread() -> None:
    store, _, nodes = await cluster_of_three()
    voter = nodes[ME]
    assert await voter.manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert voter.table_calls() == ["read_all", "update_rows_with_etags"]
    assert rows_without_heartbeats(voter.manager.snapshot.data) == rows_without_heartbeats(store.read_all())
    assert voter.manager.snapshot.table_version == store.read_all().version
    [(message, dead)] = voter.gossiped
    assert message.delta is not None
    assert dead == ()
    assert message.delta.base_version == message.version - 1
    [(entry, etag)] = message.delta.rows
    assert entry.silo_address == OTHER
    assert [voter for voter, _ in entry.suspect_times] == [ME]
    assert store.read_all().get(OTHER) is not None
    assert store.read_all().get(OTHER)[1] == etag


@async_test
async def test_a_write_goes_to_the_gossiper_before_the_writers_own_view_takes_it_in() -> None:
    """So the sends start before the writer's own subscribers (health monitor, event log) run."""
    _, _, nodes = await cluster_of_three()
    voter = nodes[ME]
    before = voter.manager.snapshot.version
    subscription = aiter(voter.manager.publisher.subscribe())
    assert (await anext(subscription)).version == before
    assert await voter.manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert voter.view_at_gossip == [before]
    assert voter.manager.snapshot.version == before + 1
    assert (await anext(subscription)).version == before + 1


@async_test
async def test_a_receiver_at_the_base_version_applies_the_delta_without_touching_the_table() -> None:
    store, _, nodes = await cluster_of_three()
    assert await nodes[ME].manager.try_vote(OTHER) is VoteOutcome.VOTED
    [(message, _)] = nodes[ME].gossiped
    receiver = nodes[PEER]
    await receiver.manager.on_gossip(message, ME)
    assert receiver.table_calls() == []
    assert receiver.pulls == []
    assert receiver.manager.snapshot.data == nodes[ME].manager.snapshot.data
    assert rows_without_heartbeats(receiver.manager.snapshot.data) == rows_without_heartbeats(store.read_all())


async def two_votes_the_receiver_missed_the_first_of() -> tuple[dict[SiloAddress, Node], GossipMessage]:
    """ME votes against OTHER, then against PEER; PEER never got the first delta: it holds the
    version before both votes, and the second is about itself (urgent)."""
    _, _, nodes = await cluster_of_three()
    assert await nodes[ME].manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert await nodes[ME].manager.try_vote(PEER) is VoteOutcome.VOTED
    return nodes, nodes[ME].gossiped[-1][0]


@async_test
async def test_a_receiver_that_missed_a_write_pulls_the_senders_view_instead_of_reading_the_table() -> None:
    nodes, second = await two_votes_the_receiver_missed_the_first_of()
    receiver = nodes[PEER]
    await receiver.manager.on_gossip(second, ME)
    assert receiver.pulls == [ME]
    assert receiver.table_calls() == []
    assert receiver.manager.snapshot.version == second.version


@async_test
async def test_a_receiver_reads_the_table_when_the_sender_cannot_be_asked() -> None:
    nodes, second = await two_votes_the_receiver_missed_the_first_of()
    receiver = nodes[PEER]
    stranger = address(9)
    await receiver.manager.on_gossip(second, stranger)
    assert receiver.pulls == [stranger]
    assert receiver.table_calls() == ["read_changes"]
    assert receiver.manager.snapshot.version == second.version


@async_test
async def test_the_silo_a_delta_declares_dead_terminates_on_receiving_it() -> None:
    store, _clock, nodes = await cluster_of_three()
    for voter in (ME, PEER):
        assert await nodes[voter].manager.try_vote(OTHER) in (VoteOutcome.VOTED, VoteOutcome.DECLARED_DEAD)
    message, dead = nodes[PEER].gossiped[-1]
    assert dead == (OTHER,)
    assert store.read_all().get(OTHER)[0].status is SiloStatus.DEAD
    victim = nodes[OTHER]
    await victim.manager.on_gossip(nodes[ME].gossiped[-1][0], ME)
    await victim.manager.on_gossip(message, PEER)
    assert victim.table_calls() == ["read_all"], "a verdict against itself is checked with the table first"
    assert victim.manager.terminated.is_set()
    assert "the table says this silo is Dead" in victim.manager.termination_reason


@async_test
async def test_a_forged_delta_against_the_receiver_is_checked_with_the_table_and_dropped() -> None:
    _, _, nodes = await cluster_of_three()
    receiver = nodes[OTHER].manager
    base = receiver.snapshot
    forged = [(entry.replace(status=SiloStatus.DEAD), "forged") for entry in base.entries]
    delta = MembershipDelta(base.version, TableVersion(base.version + 1, "forged"), tuple(forged))
    await receiver.on_gossip(GossipMessage(base.version + 1, delta), ME)
    assert not receiver.terminated.is_set()
    assert receiver.snapshot.version == base.version
    assert receiver.snapshot.status_of(ME) is SiloStatus.ACTIVE
    assert nodes[OTHER].table_calls() == ["read_all"]


@async_test
async def test_a_verdict_from_a_peer_is_trusted_when_the_table_cannot_be_read() -> None:
    _store, _, nodes = await cluster_of_three()
    for voter in (ME, PEER):
        await nodes[voter].manager.try_vote(OTHER)
    victim = nodes[OTHER]
    victim.table.down = True
    await victim.manager.on_gossip(GossipMessage(nodes[PEER].manager.snapshot.version), PEER)
    assert victim.pulls == [PEER]
    assert victim.manager.terminated.is_set()


@async_test
async def test_a_delta_from_a_write_of_a_row_never_seen_makes_the_new_silo_watched_and_fresh() -> None:
    store, clock, nodes = await cluster_of_three()
    joiner = Node(store, address(4), clock, nodes)
    await joiner.manager.refresh()
    await joiner.manager.insert_self(row(address(4), SiloStatus.JOINING), joiner.manager.deadline_in(5))
    [(message, _)] = joiner.gossiped
    receiver = nodes[ME]
    assert not receiver.manager.liveness.is_fresh(address(4))
    await receiver.manager.on_gossip(message, address(4))
    assert receiver.table_calls() == []
    assert receiver.manager.snapshot.status_of(address(4)) is SiloStatus.JOINING
    assert receiver.manager.liveness.is_fresh(address(4))


@async_test
async def test_a_joiner_inserts_in_one_call_whatever_others_wrote_since_its_view() -> None:
    """No version token to go stale: the rivals' inserts since our read cannot make ours lose."""
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(PEER))
    joiner = Node(store, ME, clock, {})
    await joiner.manager.refresh()
    for port in range(10, 14):  # four other silos join between our read and our insert
        seed(store, row(address(port)))
    joiner.table_calls()
    slept: list[float] = []
    sleep = clock.sleep

    async def recording_sleep(seconds: float) -> None:
        slept.append(seconds)
        await sleep(seconds)

    clock.sleep = recording_sleep  # type: ignore[method-assign]
    await joiner.manager.insert_self(row(ME, SiloStatus.JOINING), joiner.manager.deadline_in(60))
    assert joiner.table_calls() == ["insert_row_at_next_version", "read_changes"]  # it missed the rivals' rows
    assert slept == []
    assert joiner.manager.snapshot.status_of(ME) is SiloStatus.JOINING
    assert joiner.manager.snapshot.version == store.read_version().version == 6
    assert rows_without_heartbeats(joiner.manager.snapshot.data) == rows_without_heartbeats(store.read_all())


@async_test
async def test_a_joiner_whose_insert_committed_unseen_finds_its_row_and_joins_on_it() -> None:
    """The store applied the insert but the reply was lost: the retry finds our row, which counts."""
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(PEER))
    joiner = Node(store, ME, clock, {})
    original = joiner.table.inner.insert_row_at_next_version

    def commit_then_fail(entry: MembershipEntry) -> CommittedWrite | None:
        joiner.table.inner.insert_row_at_next_version = original  # type: ignore[method-assign]
        original(entry)
        raise TableUnavailableError("the reply was lost")

    joiner.table.inner.insert_row_at_next_version = commit_then_fail  # type: ignore[method-assign]
    joining = asyncio.create_task(
        joiner.manager.insert_self(row(ME, SiloStatus.JOINING), joiner.manager.deadline_in(60))
    )
    while not joining.done():
        await clock.advance(0.1)
    await joining
    assert joiner.manager.snapshot.status_of(ME) is SiloStatus.JOINING
    assert store.read_version().version == 2, "inserted once"
    assert not joiner.manager.terminated.is_set()


@async_test
async def test_a_joiner_of_a_cluster_without_a_version_row_says_how_to_fix_it() -> None:
    store, clock = memory_table(), FakeClock(T0)
    store.delete_cluster_entries()
    joiner = Node(store, ME, clock, {})
    with pytest.raises(TableUnavailableError, match="silo table init"):
        await joiner.manager.insert_self(row(ME, SiloStatus.JOINING), joiner.manager.deadline_in(60))
    assert store.read_all().rows == ()


@async_test
async def test_a_joiner_that_keeps_losing_waits_at_most_a_probe_timeout_between_tries() -> None:
    """The silos that lost most often in the bulk of a storm must not wait out the tail."""
    store, clock = memory_table(), FakeClock(T0)
    joiner = Node(store, ME, clock, {})
    pauses = [joiner.manager.writer.lost_race_pause(lost) for lost in range(1, 40) for _ in range(20)]
    assert max(pauses) <= OPTIONS.probe_timeout
    assert max(pauses[-100:]) > OPTIONS.probe_timeout / 2  # still spread over the whole range


@pytest.mark.parametrize("storm", [False, True], ids=["few joining", "join storm"])
@async_test
async def test_in_a_join_storm_a_joiner_behind_its_insert_keeps_its_view_until_it_is_active(storm: bool) -> None:
    """The insert's re-read (N rows) is skipped in a storm; becoming Active reads the table then."""
    store, clock = memory_table(), FakeClock(T0)
    joining = [address(port) for port in range(10, 11 + (OPTIONS.gossip_fanout if storm else 1))]
    seed(store, row(PEER), *(row(silo, SiloStatus.JOINING) for silo in joining))
    joiner = Node(store, ME, clock, {})
    await joiner.manager.refresh()
    seen = joiner.manager.snapshot.version
    seed(store, row(OTHER))  # another silo joins between our read and our insert
    joiner.table_calls()
    await joiner.manager.insert_self(row(ME, SiloStatus.JOINING), joiner.manager.deadline_in(10))
    assert joiner.table_calls().count("read_changes") == (0 if storm else 1)
    if storm:
        assert joiner.manager.snapshot.version == seen
        assert joiner.manager.snapshot.entry(ME) is None
        assert not joiner.manager.terminated.is_set(), "an older view without our row is no reason to stop"
    else:
        assert joiner.manager.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    assert [message.delta.silos for message, _ in joiner.gossiped if message.delta] == [frozenset({ME})]
    assert await joiner.manager.update_own_status(SiloStatus.ACTIVE, joiner.manager.deadline_in(10))
    assert joiner.table_calls().count("read_changes") == (1 if storm else 0)  # else: our write applied as a delta
    assert joiner.manager.snapshot.status_of(ME) is SiloStatus.ACTIVE
    assert joiner.manager.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    assert rows_without_heartbeats(joiner.manager.snapshot.data) == rows_without_heartbeats(store.read_all())


@async_test
async def test_votes_of_one_moment_are_cast_in_one_write_and_several_deaths_take_one_version() -> None:
    """A lost rack: our monitors of two silos vote together; each vote completes a quorum; one update_rows."""
    store, clock = memory_table(), FakeClock(T0)
    lost = (address(4), address(5))
    seed(store, row(ME), row(PEER), row(OTHER), *(row(silo).replace(suspect_times=((PEER, T0),)) for silo in lost))
    nodes: dict[SiloAddress, Node] = {}
    voter = Node(store, ME, clock, nodes, run_blocking=run_after_a_yield)
    await voter.manager.refresh()
    voter.table_calls()
    version = store.read_version().version
    first = asyncio.create_task(voter.manager.try_vote(OTHER))  # in flight: the rack's votes queue behind it
    await asyncio.sleep(0)
    outcomes = await asyncio.gather(*(voter.manager.try_vote(silo) for silo in lost))
    assert await first is VoteOutcome.VOTED
    assert outcomes == [VoteOutcome.DECLARED_DEAD, VoteOutcome.DECLARED_DEAD]
    assert voter.table_calls() == ["read_all", "update_rows_with_etags"] * 2
    assert store.read_version().version == version + 2
    assert [store.read_all().get(silo)[0].status for silo in lost] == [SiloStatus.DEAD] * 2  # type: ignore[index]
    [_, (message, declared)] = voter.gossiped
    assert declared == lost
    assert message.delta is not None
    assert sorted(entry.silo_address for entry, _ in message.delta.rows) == list(lost)


@async_test
async def test_a_stop_cancelled_while_it_waits_leaves_no_queued_votes_to_be_written() -> None:
    """The votes queued behind one in flight are cast by a background batch; a stop cancelled
    while it waits for the refresher must still have cancelled that batch."""
    store, clock = memory_table(), FakeClock(T0)
    lost = (address(4), address(5))
    seed(store, row(ME), row(PEER), row(OTHER), *(row(silo) for silo in lost))
    voter = Node(store, ME, clock, {}, run_blocking=run_after_a_yield)
    await voter.manager.refresh()
    voter.manager.start()
    first = asyncio.create_task(voter.manager.try_vote(OTHER))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(voter.manager.try_vote(silo)) for silo in lost]
    while not first.done():
        await asyncio.sleep(0)
    await stop_cancelled_at_its_first_wait(voter.manager.stop())
    await asyncio.gather(*queued, return_exceptions=True)
    await clock.advance(OPTIONS.probe_timeout)
    assert first.result() is VoteOutcome.VOTED
    assert [store.read_all().get(silo)[0].suspect_times for silo in lost] == [(), ()]  # type: ignore[index]


@async_test
async def test_a_batch_that_loses_the_race_is_retried_by_each_vote() -> None:
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(ME), row(PEER), row(OTHER), row(address(4)))
    nodes: dict[SiloAddress, Node] = {}
    voter = Node(store, ME, clock, nodes, run_blocking=run_after_a_yield)
    await voter.manager.refresh()
    original = voter.table.inner.update_rows_with_etags
    raced = False

    def someone_writes_first(updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        nonlocal raced
        if not raced:
            raced = True
            store.insert_row(row(address(9)), store.read_version().next())
        return original(updates, version)

    voter.table.inner.update_rows_with_etags = someone_writes_first  # type: ignore[method-assign]
    voter.table_calls()
    first = asyncio.create_task(voter.manager.try_vote(PEER))
    await asyncio.sleep(0)
    queued = asyncio.gather(voter.manager.try_vote(OTHER), voter.manager.try_vote(address(4)))
    while not queued.done():  # the lost write waits for the winner's gossip, which nobody sends here
        await clock.advance(VIEW_VOTE_GOSSIP_WAIT * OPTIONS.probe_timeout)
    assert await first is VoteOutcome.VOTED
    assert queued.result() == [VoteOutcome.VOTED, VoteOutcome.VOTED]
    # PEER's vote alone, lost; then the two queued behind it and PEER's retry, together, won
    assert voter.table_calls() == ["read_all", "update_rows_with_etags"] * 2
    for silo in (PEER, OTHER, address(4)):
        assert [by for by, _ in store.read_all().get(silo)[0].suspect_times] == [ME]  # type: ignore[index]


@async_test
async def test_a_monitor_that_learned_the_death_from_gossip_does_not_read_to_vote() -> None:
    _, _, nodes = await cluster_of_three()
    for voter in (ME, PEER):
        await nodes[voter].manager.try_vote(OTHER)
    late = Node(nodes[ME].table.inner, address(4), FakeClock(T0), nodes)
    await late.manager.refresh()
    late.table_calls()
    assert late.manager.snapshot.status_of(OTHER) is SiloStatus.DEAD
    assert await late.manager.try_vote(OTHER) is VoteOutcome.ALREADY_GONE
    assert late.table_calls() == []


def test_a_delta_with_an_older_since_version_applies_to_every_view_from_it_to_its_base() -> None:
    voted = row(OTHER).replace(suspect_times=((ME, T0),))
    dead = voted.replace(status=SiloStatus.DEAD, suspect_times=((ME, T0), (PEER, T0)))
    delta = MembershipDelta(5, TableVersion(6, "v6"), ((dead, "e6"),), since_version=4)
    before_the_vote = view(row(ME), row(OTHER), version=4)
    after_the_vote = view(row(ME), voted, version=5)
    for held in (before_the_vote, after_the_vote):
        applied = held.apply(delta)
        assert applied is not None
        assert applied.version == 6
        assert applied.data.get(OTHER) == (dead, "e6")
    assert view(row(ME), version=3).apply(delta) is None
    assert view(row(ME), version=6).apply(delta) is None


def test_a_step_between_views_compares_their_rows_only_when_asked_and_a_removed_row_ends_every_span() -> None:
    voted = row(OTHER).replace(suspect_times=((ME, T0),))
    older = view(row(ME), row(OTHER), row(PEER), version=4)
    newer = MembershipSnapshot(
        dataclasses.replace(older.data, rows=(*older.data.rows[:2], (voted, "e5")),
                            version=TableVersion(5, "v5"))
    )  # fmt: skip
    step = ViewStep(older, newer, None)
    assert (step.start, step.end) == (4, 5)
    assert step.written() == frozenset({OTHER})
    assert ViewStep(older, newer, frozenset({OTHER, PEER})).written() == frozenset({OTHER, PEER}), "a delta's rows"
    without_peer = view(row(ME), row(OTHER), version=6)
    assert ViewStep(newer, without_peer, None).written() is None, "a row was removed"


@pytest.mark.parametrize("killer_heard_the_vote", [True, False], ids=["by gossip", "by its vote's read"])
@async_test
async def test_a_death_after_a_vote_reaches_a_silo_that_missed_the_vote_without_a_pull(
    killer_heard_the_vote: bool,
) -> None:
    """Vote and death write the same row, so the killer's delta applies to views from before the
    vote: a silo whose copy of the vote's gossip is late (or lost) applies the death at once."""
    store, clock = memory_table(), FakeClock(T0)
    seed(store, row(ME), row(PEER), row(OTHER), row(FOURTH))
    nodes: dict[SiloAddress, Node] = {}
    for silo in (ME, PEER, OTHER, FOURTH):
        node = Node(store, silo, clock, nodes)
        await node.manager.refresh()
        node.table_calls()
    before_the_vote = nodes[FOURTH].manager.snapshot.version
    assert await nodes[ME].manager.try_vote(OTHER) is VoteOutcome.VOTED
    if killer_heard_the_vote:
        await nodes[PEER].manager.on_gossip(nodes[ME].gossiped[-1][0], ME)
    assert await nodes[PEER].manager.try_vote(OTHER) is VoteOutcome.DECLARED_DEAD
    message, _ = nodes[PEER].gossiped[-1]
    assert message.delta is not None
    assert message.delta.applies_from == before_the_vote
    receiver = nodes[FOURTH]
    await receiver.manager.on_gossip(message, PEER)
    assert receiver.pulls == []
    assert receiver.table_calls() == []
    assert receiver.manager.snapshot.status_of(OTHER) is SiloStatus.DEAD
    assert rows_without_heartbeats(receiver.manager.snapshot.data) == rows_without_heartbeats(store.read_all())
    assert receiver.manager.snapshot.table_version == store.read_all().version


@pytest.mark.parametrize("case", ["few joining", "join storm", "large cluster"])
@async_test
async def test_a_join_off_the_receivers_base_is_left_to_the_refresh_in_a_join_storm(case: str) -> None:
    """In a join storm nearly every write reaches silos off its base: a pull of a whole view each
    (N rows, for each of N writes) was most of the storm's CPU; in a large cluster (``LARGE_VIEW``)
    a pull of N rows for a change that can wait costs more than it is worth. Otherwise a pull is
    cheap and keeps views current."""
    store, clock, nodes = await cluster_of_three()
    storm = case != "few joining"
    if case == "join storm":
        seed(store, *(row(address(port), SiloStatus.JOINING) for port in range(10, 11 + OPTIONS.gossip_fanout)))
    if case == "large cluster":
        seed(store, *(row(address(port)) for port in range(10, 10 + LARGE_VIEW)))
    if storm:
        await nodes[OTHER].manager.refresh()
        assert nodes[OTHER].manager.snapshot.in_join_storm(OPTIONS) is (case == "join storm")
        assert nodes[OTHER].manager.snapshot.large is (case == "large cluster")
    assert await nodes[ME].manager.try_vote(PEER) is VoteOutcome.VOTED  # OTHER misses this one
    joiner = Node(store, FOURTH, clock, nodes)
    await joiner.manager.refresh()
    await joiner.manager.insert_self(row(FOURTH, SiloStatus.JOINING), joiner.manager.deadline_in(10))
    [(join, _)] = joiner.gossiped
    assert join.delta is not None
    assert not join.delta.is_urgent_for(OTHER)
    receiver = nodes[OTHER]
    receiver.table_calls()
    await receiver.manager.on_gossip(join, FOURTH)
    assert receiver.pulls == ([] if storm else [FOURTH])
    assert receiver.table_calls() == []
    if storm:
        await receiver.manager.refresh()
    assert receiver.manager.snapshot.status_of(FOURTH) is SiloStatus.JOINING
    vote = nodes[ME].gossiped[-1][0].delta
    assert vote is not None
    assert not vote.is_urgent_for(OTHER), "a vote against another silo can wait for the refresh"
    assert vote.is_urgent_for(PEER), "a vote against us cannot"


@async_test
async def test_in_a_large_cluster_only_a_change_about_the_receiver_is_caught_up_at_once() -> None:
    """After a join storm most views are off the base of the next change: a death gossiped to
    1,000 silos then made each of them pull a peer's 1,000 rows at once."""
    store, _, nodes = await cluster_of_three()
    seed(store, *(row(address(port)) for port in range(10, 10 + LARGE_VIEW)))
    for node in nodes.values():
        await node.manager.refresh()
        node.table_calls()
    receiver = nodes[OTHER]
    version = receiver.manager.snapshot.table_version
    skipped = version.next()  # a write the receiver missed
    death = MembershipDelta(skipped.version, skipped.next(), ((row(address(10), SiloStatus.DEAD), "dead-etag"),))
    await receiver.manager.on_gossip(GossipMessage(death.version.version, death), ME)
    assert (receiver.pulls, receiver.table_calls()) == ([], [])
    assert receiver.manager.snapshot.table_version == version  # left to the periodic refresh
    assert await nodes[ME].manager.try_vote(PEER) is VoteOutcome.VOTED  # OTHER misses this one too
    assert await nodes[ME].manager.try_vote(OTHER) is VoteOutcome.VOTED
    (against_receiver, _) = nodes[ME].gossiped[-1]
    await receiver.manager.on_gossip(against_receiver, ME)
    assert receiver.pulls == [ME]  # about the receiver: caught up at once
    assert receiver.manager.snapshot.entry(OTHER) is not None
    assert receiver.manager.snapshot.version == store.read_version().version


# --- votes on the view, under mutual TLS (trusted gossip) ------------------------------------------


@async_test
async def test_under_mutual_tls_a_vote_on_a_current_view_costs_one_write_and_no_read() -> None:
    store, _, nodes = await cluster_of_three(trusted=True)
    voter = nodes[ME]
    assert await voter.manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert voter.table_calls() == ["update_rows_with_etags"]
    assert rows_without_heartbeats(voter.manager.snapshot.data) == rows_without_heartbeats(store.read_all())
    [(message, _)] = voter.gossiped
    assert message.delta is not None
    assert [by for by, _ in message.delta.rows[0][0].suspect_times] == [ME]


@async_test
async def test_without_tls_a_vote_reads_the_table_although_its_view_is_current() -> None:
    """Anyone may send gossip then: a delta forged with real etags (GetMembership shows them)
    must not be what a vote is decided on."""
    _, _, nodes = await cluster_of_three(trusted=False)
    assert await nodes[ME].manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert nodes[ME].table_calls() == ["read_all", "update_rows_with_etags"]


@async_test
async def test_monitors_voting_together_decide_on_their_views_and_read_nothing() -> None:
    """A dead silo's monitors vote within moments of each other: the first write wins, the losers
    decide again on the winner's gossip, and the death costs two writes and no read (each monitor
    reads the whole table without TLS)."""
    store, clock = memory_table(), FakeClock(T0)
    target, monitors = address(5), (ME, PEER, OTHER, FOURTH)
    seed(store, *(row(silo) for silo in (*monitors, target)))
    nodes: dict[SiloAddress, Node] = {}
    for silo in monitors:
        node = Node(store, silo, clock, nodes, run_blocking=run_after_a_yield, trusted=True, deliver=True)
        await node.manager.refresh()
        node.table_calls()
    version = store.read_version().version
    outcomes = await asyncio.gather(*(nodes[silo].manager.try_vote(target) for silo in monitors))
    expected = (VoteOutcome.VOTED, VoteOutcome.DECLARED_DEAD, VoteOutcome.ALREADY_GONE, VoteOutcome.ALREADY_GONE)
    assert sorted(outcome.value for outcome in outcomes) == sorted(outcome.value for outcome in expected)
    calls = [call for silo in monitors for call in nodes[silo].table_calls()]
    assert set(calls) == {"update_rows_with_etags"}  # lost writes too, but no read
    assert store.read_version().version == version + 2
    dead = store.read_all().get(target)
    assert dead is not None
    assert dead[0].status is SiloStatus.DEAD
    assert len(dead[0].suspect_times) == 2
    for node in nodes.values():
        await asyncio.gather(*node.deliveries)
        assert node.manager.snapshot.status_of(target) is SiloStatus.DEAD


async def waiting_on_the_clock(clock: FakeClock) -> None:
    """Let the tasks run until one of them sleeps on ``clock``."""
    while not clock.pending_sleepers:
        await asyncio.sleep(0)


@async_test
async def test_a_vote_lost_on_a_view_that_missed_a_write_reads_the_table_when_no_gossip_comes() -> None:
    store, clock, nodes = await cluster_of_three(trusted=True)
    seed(store, row(FOURTH, SiloStatus.JOINING))  # a write whose gossip never comes
    voter = nodes[ME]
    vote = asyncio.create_task(voter.manager.try_vote(OTHER))
    await waiting_on_the_clock(clock)
    assert voter.table_calls() == ["update_rows_with_etags"]  # lost: the table moved on
    await clock.advance(VIEW_VOTE_GOSSIP_WAIT * OPTIONS.probe_timeout)
    assert await vote is VoteOutcome.VOTED
    assert voter.table_calls() == ["read_all", "update_rows_with_etags"]
    assert voter.manager.snapshot.status_of(FOURTH) is SiloStatus.JOINING
    voted = store.read_all().get(OTHER)
    assert voted is not None
    assert [by for by, _ in voted[0].suspect_times] == [ME]


@async_test
async def test_a_vote_lost_on_a_view_decides_again_on_the_winners_gossip() -> None:
    store, clock, nodes = await cluster_of_three(trusted=True)
    first, second = nodes[ME], nodes[PEER]
    assert await first.manager.try_vote(OTHER) is VoteOutcome.VOTED  # its gossip is on its way to PEER
    [(message, _)] = first.gossiped
    vote = asyncio.create_task(second.manager.try_vote(OTHER))
    await waiting_on_the_clock(clock)
    await second.manager.on_gossip(message, ME)
    assert await vote is VoteOutcome.DECLARED_DEAD
    assert second.table_calls() == ["update_rows_with_etags"] * 2  # lost, then won on the gossiped view
    dead = store.read_all().get(OTHER)
    assert dead is not None
    assert [by for by, _ in dead[0].suspect_times] == [ME, PEER]


@async_test
async def test_a_vote_reads_the_table_first_when_gossip_told_of_a_version_it_could_not_get() -> None:
    store, _, nodes = await cluster_of_three(trusted=True)
    voter = nodes[ME]
    seed(store, row(FOURTH, SiloStatus.JOINING))
    voter.table.down = True
    await voter.manager.on_gossip(GossipMessage(store.read_version().version))  # no sender, table down
    voter.table.down = False
    voter.table_calls()
    assert await voter.manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert voter.table_calls() == ["read_all", "update_rows_with_etags"]


@async_test
async def test_gossip_of_a_version_the_table_does_not_have_is_forgotten_at_the_next_read() -> None:
    store, _, nodes = await cluster_of_three(trusted=True)
    voter = nodes[ME]
    await voter.manager.on_gossip(GossipMessage(store.read_version().version + 100))  # its read finds no such version
    voter.table_calls()
    assert await voter.manager.try_vote(OTHER) is VoteOutcome.VOTED
    assert voter.table_calls() == ["update_rows_with_etags"]
