from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Sequence
from datetime import timedelta

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
from silo.membership.observer import NULL_OBSERVER, MembershipObserver, NullObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import LARGE_VIEW, MembershipDelta, MembershipSnapshot
from silo.membership.table_access import backoff_bounds, run_inline
from silo.membership.table_manager import MembershipTableManager
from silo.membership.vote_caster import VIEW_VOTE_GOSSIP_WAIT, VOTE_ATTEMPTS
from silo.membership.votes import VoteOutcome
from tests.membership_tables.malformed_rows import store_in_memory
from tests.silo.harness import T0, FlakyTable, address, async_test, memory_table, row, seed

ME, PEER, OTHER = address(1), address(2), address(3)
OPTIONS = SiloOptions.local()


def manager(
    table: MembershipTable,
    clock: FakeClock,
    writes: list[int] | None = None,
    me: SiloAddress = ME,
    declared: list[SiloAddress] | None = None,
    options: SiloOptions = OPTIONS,
    trusted_gossip: bool = False,
) -> MembershipTableManager:
    def on_write(message: GossipMessage, snapshot: MembershipSnapshot, declared_dead: tuple[SiloAddress, ...]) -> None:
        if writes is not None:
            writes.append(message.version)
        if declared is not None:
            declared.extend(declared_dead)

    return MembershipTableManager(
        table=table,
        address=me,
        options=options,
        clock=clock,
        random=random.Random(7),
        run_blocking=run_inline,
        on_write=on_write,
        trusted_gossip=trusted_gossip,
    )


def kill(table: MembershipTable, silo: SiloAddress, killer: SiloAddress = PEER) -> None:
    data = table.read_all()
    found = data.get(silo)
    assert found is not None
    dead = found[0].replace(status=SiloStatus.DEAD, suspect_times=((killer, T0),))
    assert table.update_row(dead, found[1], data.version.next())


@async_test
async def test_join_writes_go_through_versioned_updates_and_call_the_gossiper() -> None:
    table, clock = memory_table(), FakeClock(T0)
    writes: list[int] = []
    seed(table, row(PEER))
    tables = manager(table, clock, writes)
    await tables.insert_self(row(ME, SiloStatus.JOINING), tables.deadline_in(10))
    assert tables.snapshot.status_of(ME) is SiloStatus.JOINING
    assert await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))
    assert tables.snapshot.status_of(ME) is SiloStatus.ACTIVE
    assert writes == [2, 3]
    assert tables.snapshot.version == 3


def others_write_after_each_read_row(flaky: FlakyTable, write: Callable[[], None], times: int) -> None:
    """Make another writer write right after each of the next ``times`` reads of a row: between
    our read and our write, the window in which a conditional write loses."""
    original = flaky.inner.read_row
    left = times

    def read_row_then_someone_writes(silo: SiloAddress) -> MembershipTableData:
        nonlocal left
        data = original(silo)
        if left > 0:
            left -= 1
            write()
        return data

    flaky.inner.read_row = read_row_then_someone_writes  # type: ignore[method-assign]


async def joining_over_a_flaky_table() -> tuple[FlakyTable, FakeClock, MembershipTableManager]:
    """A table holding PEER, and our manager over it, having inserted our row as Joining."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    await tables.insert_self(row(ME, SiloStatus.JOINING), tables.deadline_in(10))
    return flaky, clock, tables


@async_test
async def test_writes_of_our_own_row_do_not_lose_to_writes_of_other_rows() -> None:
    """Our status depends on our row alone: it is written at the next version, whatever moved it."""
    flaky, _, tables = await joining_over_a_flaky_table()
    rivals = iter(range(10, 20))
    others_write_after_each_read_row(flaky, lambda: seed(flaky.inner, row(address(next(rivals)))), times=3)
    flaky.calls.clear()
    assert await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))
    assert flaky.calls[:2] == ["read_row", "update_row_at_next_version"]
    assert flaky.inner.read_all().get(ME) is not None
    assert flaky.inner.read_row(ME).entries[0].status is SiloStatus.ACTIVE


@async_test
async def test_a_write_of_our_own_row_loses_to_a_vote_against_it_and_keeps_the_vote() -> None:
    flaky, clock, tables = await joining_over_a_flaky_table()

    def vote_against_me() -> None:
        data = flaky.inner.read_all()
        found = data.get(ME)
        assert found is not None
        voted = found[0].replace(suspect_times=((PEER, T0),))
        assert flaky.inner.update_row(voted, found[1], data.version.next())

    others_write_after_each_read_row(flaky, vote_against_me, times=1)
    flaky.calls.clear()
    writing = asyncio.create_task(tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10)))
    while not writing.done():
        await clock.advance(0.01)
    assert await writing
    assert flaky.calls.count("update_row_at_next_version") == 2, flaky.calls
    [stored] = flaky.inner.read_row(ME).entries
    assert stored.status is SiloStatus.ACTIVE
    assert stored.suspect_times == ((PEER, T0),), "written on the row the vote left"


@async_test
async def test_an_older_generation_is_declared_dead_on_the_version_we_read() -> None:
    """Another silo's row is a decision on our view: that write is still conditioned on the version."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    old = address(1, generation=0)
    seed(flaky.inner, row(old), row(PEER))
    tables = manager(flaky, clock)
    flaky.calls.clear()
    assert await tables.update_row(old, lambda entry: entry.replace(status=SiloStatus.DEAD), tables.deadline_in(10))
    assert "update_rows_with_etags" in flaky.calls
    assert "update_row_at_next_version" not in flaky.calls


@async_test
async def test_terminates_on_reading_itself_dead() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER))
    tables = manager(table, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    kill(table, ME)
    assert not tables.terminated.is_set()
    await tables.refresh()
    assert tables.terminated.is_set()
    assert "Dead (declared by 127.0.0.1:2@1)" in tables.termination_reason
    assert not await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))


@async_test
async def test_terminates_when_a_newer_generation_of_itself_appears() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table)
    tables = manager(table, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    seed(table, row(address(1, generation=2), SiloStatus.JOINING))
    await tables.refresh()
    assert "superseded" in tables.termination_reason


@async_test
async def test_terminates_when_its_row_vanishes_after_joining() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table)
    tables = manager(table, clock)
    await tables.refresh()
    assert not tables.terminated.is_set()  # absent before joining is fine
    await tables.insert_self(row(ME), tables.deadline_in(10))
    kill(table, ME)
    table.cleanup_defunct_entries(T0 + timedelta(days=1))
    seed(table, row(OTHER))  # bumps the version past our join
    await tables.refresh()
    assert "gone" in tables.termination_reason


@async_test
async def test_refresh_backs_off_while_the_table_is_down_and_recovers() -> None:
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    flaky.down = True
    reading = asyncio.create_task(tables.refresh(tables.deadline_in(60)))
    first_wait, longest_wait = backoff_bounds(OPTIONS)
    await clock.advance(first_wait * 8)
    assert not reading.done()
    assert flaky.failed_calls > 2
    assert flaky.failed_calls < 8  # exponential, not one retry per first_wait
    assert not tables.table_available
    flaky.down = False
    await clock.advance(longest_wait * 2)
    assert reading.done()
    assert reading.result().status_of(PEER) is SiloStatus.ACTIVE
    assert tables.table_available


async def joined_with_three_peers() -> tuple[FlakyTable, FakeClock, MembershipTableManager]:
    """Our silo joined beside PEER, OTHER and a fourth silo, on a table the test can switch off."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER), row(OTHER), row(address(4)))
    tables = manager(flaky, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    return flaky, clock, tables


@async_test
async def test_a_silo_that_cannot_read_the_table_does_not_vote() -> None:
    flaky, _clock, tables = await joined_with_three_peers()
    flaky.down = True
    assert await tables.try_vote(PEER) is VoteOutcome.NOT_ALLOWED
    peer_row = flaky.inner.read_all().get(PEER)
    assert peer_row is not None
    assert peer_row[0].suspect_times == ()


@async_test
async def test_one_failed_table_call_is_a_hiccup_not_an_outage() -> None:
    flaky, _clock, tables = await joined_with_three_peers()
    flaky.down = True
    with contextlib.suppress(TableUnavailableError):
        await tables.refresh()
    assert not tables.table_down
    flaky.down = False
    assert tables.can_vote()
    assert await tables.try_vote(PEER) is VoteOutcome.VOTED  # at once, not a stale period later


@async_test
async def test_a_sustained_outage_suspends_voting_until_a_call_succeeds() -> None:
    flaky, clock, tables = await joined_with_three_peers()
    flaky.down = True
    with contextlib.suppress(TableUnavailableError):
        await tables.refresh()
    await clock.advance(OPTIONS.probe_timeout)
    assert tables.table_down
    calls = len(flaky.calls)
    assert await tables.try_vote(PEER) is VoteOutcome.NOT_ALLOWED
    assert len(flaky.calls) == calls  # not even attempted
    flaky.down = False
    await tables.refresh()
    assert tables.can_vote()


@async_test
async def test_heartbeats_that_lapsed_during_an_outage_do_not_shrink_the_quorum() -> None:
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    peers = [PEER, OTHER, address(4), address(5)]
    seed(flaky.inner, *(row(peer) for peer in peers))
    tables = manager(flaky, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    flaky.down = True
    await clock.advance(10 * tables.liveness.limit)  # nobody (us included) could read or heartbeat
    flaky.down = False
    await tables.refresh()
    assert all(tables.liveness.is_fresh(peer) for peer in peers)
    assert await tables.try_vote(PEER) is VoteOutcome.VOTED  # 5 fresh silos: 2 votes needed, not 1


@async_test
async def test_silos_whose_heartbeat_stopped_leave_the_quorum_on_our_own_clock() -> None:
    table, clock = memory_table(), FakeClock(T0)
    crashed = [OTHER, address(4), address(5)]
    seed(table, row(PEER), *(row(silo) for silo in crashed))
    tables = manager(table, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    for _ in range(int(tables.liveness.limit / OPTIONS.table_refresh_timeout) + 2):
        await clock.advance(OPTIONS.table_refresh_timeout)
        table.update_i_am_alive(ME, clock.now())
        table.update_i_am_alive(PEER, clock.now())
        await tables.refresh()
    assert [tables.liveness.is_fresh(silo) for silo in crashed] == [False] * 3
    # 2 fresh Active silos (us and PEER): one vote is a majority of them
    assert await tables.try_vote(PEER) is VoteOutcome.DECLARED_DEAD


@async_test
async def test_a_vote_reads_the_table_when_a_silo_its_view_holds_stale_may_have_come_back() -> None:
    """Under mutual TLS a vote may be decided on the view, but not here: on the view it would
    need one vote (2 fresh silos); the table shows OTHER heartbeating again (paused, then
    resumed), so a read counts 3 fresh silos and needs 2."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER), row(OTHER))
    tables = manager(flaky, clock, trusted_gossip=True)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    for _ in range(int(tables.liveness.limit / OPTIONS.table_refresh_timeout) + 2):
        await clock.advance(OPTIONS.table_refresh_timeout)
        flaky.inner.update_i_am_alive(ME, clock.now())
        flaky.inner.update_i_am_alive(PEER, clock.now())
        await tables.refresh()
    assert not tables.liveness.is_fresh(OTHER)
    flaky.inner.update_i_am_alive(OTHER, clock.now())  # back: in the table, not in our view
    flaky.calls.clear()
    assert await tables.try_vote(PEER) is VoteOutcome.VOTED
    assert flaky.calls == ["read_all", "update_rows_with_etags"]
    assert tables.liveness.is_fresh(OTHER)


@async_test
async def test_a_declaration_names_the_dead_silo_for_the_gossip() -> None:
    table, clock = memory_table(), FakeClock(T0)
    declared: list[SiloAddress] = []
    seed(table, row(PEER).replace(suspect_times=((OTHER, T0),)), row(OTHER), row(address(4)))
    tables = manager(table, clock, declared=declared)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    assert await tables.try_vote(PEER) is VoteOutcome.DECLARED_DEAD
    assert declared == [PEER]


@async_test
async def test_votes_accumulate_until_the_last_voter_declares_death() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER), row(OTHER), row(address(4)), row(address(5)))
    mine, theirs = manager(table, clock), manager(table, clock, me=OTHER)
    await mine.insert_self(row(ME), mine.deadline_in(10))
    await theirs.refresh()
    assert await mine.try_vote(PEER) is VoteOutcome.VOTED
    assert await mine.try_vote(PEER) is VoteOutcome.VOTED  # a repeat replaces, never double counts
    entry = mine.snapshot.entry(PEER)
    assert entry is not None
    assert [voter for voter, _ in entry.suspect_times] == [ME]
    assert await theirs.try_vote(PEER) is VoteOutcome.DECLARED_DEAD
    dead = theirs.snapshot.entry(PEER)
    assert dead is not None
    assert dead.status is SiloStatus.DEAD
    assert dead.suspect_times[-1][0] == OTHER
    assert await mine.try_vote(PEER) is VoteOutcome.ALREADY_GONE


class RacingTable(FlakyTable):
    """Another writer slips in between our read and our first update."""

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        if not self.calls.count("update_rows_with_etags"):
            seed(self.inner, row(address(9)))
        return super().update_rows_with_etags(updates, version)


async def lost_the_race(racing: FlakyTable, clock: FakeClock, vote: asyncio.Task[VoteOutcome]) -> None:
    """Run ``vote`` until its first write lost and it waits for the winner's gossip."""
    while not ("update_rows_with_etags" in racing.calls and clock.pending_sleepers):
        assert not vote.done(), vote
        await asyncio.sleep(0)


@async_test
async def test_a_lost_race_is_retried_on_a_fresh_read_when_the_winners_gossip_does_not_come() -> None:
    racing, clock = RacingTable(memory_table()), FakeClock(T0)
    seed(racing.inner, row(ME), row(PEER), row(OTHER))
    tables = manager(racing, clock)
    vote = asyncio.create_task(tables.try_vote(PEER))
    await lost_the_race(racing, clock, vote)
    assert racing.calls == ["read_all", "update_rows_with_etags"]
    await clock.advance(VIEW_VOTE_GOSSIP_WAIT * OPTIONS.probe_timeout)
    assert await vote is VoteOutcome.VOTED
    # and no re-read after the write that stuck: the vote's read was at its base version
    assert racing.calls == ["read_all", "update_rows_with_etags", "read_all", "update_rows_with_etags"]


class DeathRacingTable(FlakyTable):
    """Another monitor completes PEER's quorum between our read and our write."""

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        if not self.calls.count("update_rows_with_etags"):
            kill(self.inner, PEER, killer=OTHER)
        return super().update_rows_with_etags(updates, version)


@async_test
async def test_a_vote_that_lost_to_the_targets_death_takes_the_winners_gossip_instead_of_a_read() -> None:
    """Without TLS a vote is decided on a read; when it loses, the winner is usually another
    monitor declaring the same silo Dead, whose gossip says so within moments: retrying at once
    read the whole table to find that (a third of the reads per death at N = 20)."""
    racing, clock = DeathRacingTable(memory_table()), FakeClock(T0)
    seed(racing.inner, row(ME), row(PEER), row(OTHER))
    tables = manager(racing, clock)
    vote = asyncio.create_task(tables.try_vote(PEER))
    await lost_the_race(racing, clock, vote)
    data = racing.inner.read_all()
    found = data.get(PEER)
    assert found is not None
    death = MembershipDelta(data.version.version - 1, data.version, (found,))
    await tables.on_gossip(GossipMessage(data.version.version, death), OTHER)
    assert await vote is VoteOutcome.ALREADY_GONE
    assert racing.calls == ["read_all", "update_rows_with_etags"]


class AlwaysRacedTable(FlakyTable):
    """Another writer wins every time."""

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        seed(self.inner, row(SiloAddress("10.9.9.9", len(self.calls), 1)))
        return super().update_rows_with_etags(updates, version)


@async_test
async def test_a_vote_gives_up_after_losing_every_attempt() -> None:
    racing, clock = AlwaysRacedTable(memory_table()), FakeClock(T0)
    seed(racing.inner, row(ME), row(PEER), row(OTHER))
    tables = manager(racing, clock)
    vote = asyncio.create_task(tables.try_vote(PEER))
    while not vote.done():  # each loss waits for the winner's gossip, in vain
        await clock.advance(VIEW_VOTE_GOSSIP_WAIT * OPTIONS.probe_timeout)
    assert vote.result() is VoteOutcome.LOST_RACE
    assert racing.calls.count("update_rows_with_etags") == VOTE_ATTEMPTS


@async_test
async def test_gossip_triggers_a_reread_only_for_newer_versions() -> None:
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    await tables.refresh()
    version = tables.snapshot.version
    flaky.calls.clear()
    await tables.on_gossip(GossipMessage(version))
    await tables.on_gossip(GossipMessage(version - 1))
    assert flaky.calls == []
    seed(flaky.inner, row(OTHER))
    await tables.on_gossip(GossipMessage(version + 1))
    assert flaky.calls == ["read_changes"]
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE


@async_test
async def test_gossip_of_a_version_far_ahead_does_not_cause_repeated_reads() -> None:
    """Hostile gossip (a huge version) costs one read, then at most one per probe_timeout."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    await tables.refresh()
    version = tables.snapshot.version
    flaky.calls.clear()
    await asyncio.gather(*(tables.on_gossip(GossipMessage(2**62)) for _ in range(50)))
    assert flaky.calls == ["read_changes"], "fifty gossips at once: one read in flight, the rest wait for it"
    for _ in range(50):
        await tables.on_gossip(GossipMessage(2**62 + 1))
    await tables.on_gossip(GossipMessage(version + 1))
    assert flaky.calls == ["read_changes"], "no second catch-up before probe_timeout"
    await clock.advance(OPTIONS.probe_timeout)
    seed(flaky.inner, row(OTHER))
    await tables.on_gossip(GossipMessage(version + 1))
    assert flaky.calls == ["read_changes", "read_changes"]
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    seed(flaky.inner, row(address(4)))
    await tables.on_gossip(GossipMessage(version + 2))
    assert flaky.calls == ["read_changes"] * 2, "even a catch-up that met its version is the last for probe_timeout"
    await clock.advance(OPTIONS.probe_timeout)
    await tables.on_gossip(GossipMessage(version + 2))
    assert flaky.calls == ["read_changes"] * 3


@async_test
async def test_a_malformed_row_is_logged_once_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(ME), row(PEER))
    store_in_memory(table, OTHER)
    tables = manager(table, clock)
    with caplog.at_level(logging.ERROR, logger="silo.membership.table_manager"):
        for _ in range(3):
            await tables.refresh()
    assert [entry.silo_address for entry in tables.snapshot.data.entries] == [ME, PEER]
    (record,) = caplog.records
    assert f"row {OTHER}" in record.getMessage()
    assert "Repair or delete it by hand" in record.getMessage()
    assert await tables.try_vote(OTHER) is VoteOutcome.ALREADY_GONE  # a row nobody can parse gets no votes
    assert await tables.try_vote(PEER) is VoteOutcome.DECLARED_DEAD  # quorum of the 2 well-formed silos: 1
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == [record], "still logged once"


@async_test
async def test_periodic_refresh_picks_up_changes_without_gossip() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER))
    tables = manager(table, clock)
    tables.start()
    await clock.advance(OPTIONS.table_refresh_timeout)  # the randomized first tick is within one period
    assert tables.snapshot.status_of(PEER) is SiloStatus.ACTIVE
    seed(table, row(OTHER))
    await clock.advance(OPTIONS.table_refresh_timeout)
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    await tables.stop()


@async_test
async def test_a_requested_look_at_our_row_runs_in_the_background_at_most_once_per_probe_timeout() -> None:
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(ME), row(PEER))
    tables = manager(flaky, clock)
    for _ in range(5):
        tables.request_refresh()
        await clock.advance(0)
    assert flaky.calls == ["read_row"], "our own row only: not the whole table"
    assert not tables.terminated.is_set()
    kill(flaky.inner, ME)  # the majority declared us Dead while its gossip could not reach us
    await clock.advance(OPTIONS.probe_timeout)
    tables.request_refresh()
    await clock.advance(0)
    assert flaky.calls == ["read_row", "read_row", "read_all"], "the verdict: then the view that says so"
    assert tables.terminated.is_set()
    assert tables.snapshot.status_of(ME) is SiloStatus.DEAD
    await tables.stop()


# --- ring sampling: the table arbitrates ------------------------------------------------------

RING = OPTIONS.with_overrides({"num_probed_silos": 2})
"""Seven silos that each monitor two: ring sampling (7 > 2 + 1)."""
SIX_PEERS = [PEER, OTHER, *(address(port) for port in range(4, 8))]


async def ring_of_seven(
    *entries: MembershipEntry, options: SiloOptions = RING
) -> tuple[MembershipTableManager, FakeClock]:
    """Our silo joined beside six peers; ``entries`` replace the plain rows of the same silos."""
    table, clock = memory_table(), FakeClock(T0)
    given = {entry.silo_address: entry for entry in entries}
    seed(table, *(given.get(peer, row(peer)) for peer in SIX_PEERS))
    tables = manager(table, clock, options=options)
    await tables.insert_self(given.get(ME, row(ME)), tables.deadline_in(10))
    return tables, clock


def voted(silo: SiloAddress, *voters: SiloAddress) -> MembershipEntry:
    return row(silo).replace(suspect_times=tuple((voter, T0) for voter in voters))


@async_test
async def test_with_ring_sampling_a_lone_suspect_is_declared_at_once() -> None:
    """One silo accused, nobody else: a crash or a hang, not a cut. No settling, no delay."""
    tables, _clock = await ring_of_seven(voted(PEER, OTHER))
    assert await tables.try_vote(PEER) is VoteOutcome.DECLARED_DEAD


@async_test
async def test_with_ring_sampling_a_death_amid_correlated_suspicions_settles_first() -> None:
    tables, clock = await ring_of_seven(voted(PEER, OTHER), voted(address(5), address(6)))
    vote = asyncio.create_task(tables.try_vote(PEER))
    await clock.advance(tables.settle_time / 2)
    assert not vote.done()
    entry = tables.snapshot.entry(PEER)
    assert entry is not None
    assert entry.status is SiloStatus.ACTIVE  # our vote is in the row for everyone to see, the death waits
    assert {voter for voter, _ in entry.suspect_times} == {OTHER, ME}
    await clock.advance(tables.settle_time / 2)
    assert await vote is VoteOutcome.DECLARED_DEAD  # the accusations draw no cut around PEER


@async_test
async def test_a_settling_death_whose_target_answers_meanwhile_is_withdrawn() -> None:
    """The target answered its voter while the death settled (``still_holds`` turned false): the
    vote recorded before the settling stays in the row, no death is written."""
    tables, clock = await ring_of_seven(voted(PEER, OTHER), voted(address(5), address(6)))
    holds = True
    vote = asyncio.create_task(tables.try_vote(PEER, still_holds=lambda: holds))
    await clock.advance(tables.settle_time / 2)
    version = tables.snapshot.version
    holds = False
    await clock.advance(tables.settle_time / 2)
    assert await vote is VoteOutcome.WITHDRAWN
    assert tables.snapshot.version == version
    assert tables.snapshot.status_of(PEER) is SiloStatus.ACTIVE


@pytest.mark.parametrize("holds_at_first", [False, True], ids=["from the start", "when it is decided"])
@pytest.mark.parametrize("refused", [False, True], ids=["silence", "refusals"])
@async_test
async def test_a_vote_whose_evidence_no_longer_holds_writes_nothing(refused: bool, holds_at_first: bool) -> None:
    tables, _clock = await ring_of_seven(voted(PEER, OTHER))
    version = tables.snapshot.version
    answers = iter([holds_at_first, False])
    assert await tables.try_vote(PEER, refused=refused, still_holds=lambda: next(answers)) is VoteOutcome.WITHDRAWN
    await tables.refresh()
    assert tables.snapshot.version == version
    assert tables.snapshot.entry(PEER) == voted(PEER, OTHER)


@async_test
async def test_with_ring_sampling_a_death_on_refusals_neither_settles_nor_writes_a_vote_first() -> None:
    """Correlated suspicions as above, but our vote stands on refusals (the target's port said
    nothing of it listens there): a crash, whatever else is suspected. Dead in one write."""
    tables, _clock = await ring_of_seven(voted(PEER, OTHER), voted(address(5), address(6)))
    before = tables.snapshot.version
    assert await tables.try_vote(PEER, refused=True) is VoteOutcome.DECLARED_DEAD
    assert tables.snapshot.version == before + 1


@async_test
async def test_with_ring_sampling_a_refused_target_is_declared_even_where_silence_would_be_withheld() -> None:
    """The accusations put PEER on the larger side of a cut, but its port refused us: its process
    is gone, whichever side of a cut we are on."""
    four = SIX_PEERS[2:]
    tables, _ = await ring_of_seven(voted(PEER, OTHER), voted(ME, four[0], four[1]), voted(OTHER, four[2], four[3]))
    assert await tables.try_vote(PEER, refused=True) is VoteOutcome.DECLARED_DEAD


@pytest.mark.parametrize("first_voter", [False, True], ids=["completes the quorum", "first vote"])
@async_test
async def test_a_vote_on_refusals_reads_and_writes_its_targets_row_alone_and_loses_to_no_other_write(
    first_voter: bool,
) -> None:
    """Refusals prove the target gone whatever the rest of the table says: the vote reads its row
    (not the table) and writes it at the next version, so the writes of other rows that moved the
    version since (a join storm's, a version a second) do not make it lose its race."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, *(row(peer) if first_voter else voted(peer, OTHER) for peer in SIX_PEERS))
    tables = manager(flaky, clock, options=RING)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    kill(flaky.inner, address(7), killer=address(6))  # another write: our view is a version behind
    flaky.calls.clear()
    expected = VoteOutcome.VOTED if first_voter else VoteOutcome.DECLARED_DEAD
    assert await tables.try_vote(PEER, refused=True) is expected
    assert flaky.calls[:2] == ["read_row", "update_row_at_next_version"]
    assert "read_all" not in flaky.calls[:2]
    stored = flaky.inner.read_row(PEER).get(PEER)
    assert stored is not None
    assert [voter for voter, _ in stored[0].suspect_times] == ([ME] if first_voter else [OTHER, ME])


@async_test
async def test_a_vote_on_refusals_in_a_cluster_of_a_few_silos_reads_the_table_for_its_quorum() -> None:
    """With fewer than ``2 * num_votes_for_death_declaration - 1`` fresh silos the quorum is a
    count of the table's fresh silos, which the target's row does not tell."""
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    await tables.insert_self(row(ME), tables.deadline_in(10))
    flaky.calls.clear()
    assert await tables.try_vote(PEER, refused=True) is VoteOutcome.DECLARED_DEAD
    assert flaky.calls[0] == "read_all"


@async_test
async def test_with_ring_sampling_minority_voters_cannot_kill_a_silo_of_the_larger_side() -> None:
    """ME and OTHER (the minority) accuse PEER; the other four accuse ME and OTHER: withheld."""
    four = SIX_PEERS[2:]
    tables, clock = await ring_of_seven(voted(PEER, OTHER), voted(ME, four[0], four[1]), voted(OTHER, four[2], four[3]))
    vote = asyncio.create_task(tables.try_vote(PEER))
    await clock.advance(tables.settle_time)
    assert await vote is VoteOutcome.WITHHELD
    entry = tables.snapshot.entry(PEER)
    assert entry is not None
    assert entry.status is SiloStatus.ACTIVE
    assert {voter for voter, _ in entry.suspect_times} == {OTHER, ME}


@async_test
async def test_when_every_silo_monitors_all_others_the_majority_rule_alone_decides() -> None:
    """No ring sampling (7 <= 10 + 1): correlated suspicions do not delay a death."""
    tables, _clock = await ring_of_seven(voted(PEER, OTHER), voted(address(5), address(6)), options=OPTIONS)
    assert await tables.try_vote(PEER) is VoteOutcome.DECLARED_DEAD


# --- cheap refresh: version reads between full reads ---------------------------------------

EVERY_THIRD = dataclasses.replace(OPTIONS, full_refresh_every=3)
PERIOD = EVERY_THIRD.table_refresh_timeout


class SkipCounter(NullObserver):
    def __init__(self) -> None:
        self.skipped = 0

    def refresh_skipped(self) -> None:
        self.skipped += 1


async def refreshing_every_third(
    *peers: SiloAddress, observer: MembershipObserver = NULL_OBSERVER
) -> tuple[FlakyTable, FakeClock, MembershipTableManager]:
    """Our silo joined beside ``peers`` and refreshing periodically, a full read every third period.

    The join was a full read at time 0; the periodic rounds fall at d, d + PERIOD, ... (0 < d < PERIOD).
    """
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, *(row(peer) for peer in peers))
    tables = MembershipTableManager(
        table=flaky,
        address=ME,
        options=EVERY_THIRD,
        clock=clock,
        random=random.Random(7),
        run_blocking=run_inline,
        observer=observer,
    )
    await tables.insert_self(row(ME), tables.deadline_in(10))
    tables.start()
    flaky.calls.clear()
    return flaky, clock, tables


@async_test
async def test_periodic_refresh_reads_only_the_version_while_it_is_unchanged() -> None:
    observer = SkipCounter()
    flaky, clock, tables = await refreshing_every_third(PEER, observer=observer)
    for _ in range(9):
        await clock.advance(PERIOD)
        flaky.inner.update_i_am_alive(PEER, clock.now())  # heartbeats do not move the version
    assert flaky.calls.count("read_version") == 6
    assert flaky.calls.count("read_all") == 3  # every third period, for the heartbeats
    assert observer.skipped == 6
    await tables.stop()


@async_test
async def test_periodic_refresh_reads_the_changed_rows_as_soon_as_the_version_moved() -> None:
    flaky, clock, tables = await refreshing_every_third(PEER)
    await clock.advance(PERIOD)
    assert flaky.calls == ["read_version"]
    seed(flaky.inner, row(OTHER))
    await clock.advance(PERIOD)
    assert flaky.calls == ["read_version", "read_version", "read_changes"]
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    await tables.stop()


@async_test
async def test_in_a_join_storm_of_a_large_view_a_moved_version_waits_for_the_heartbeat_cadence() -> None:
    """Each silo of a 1,000-silo storm read the whole table every period (the version always moved)."""
    peers = [address(port) for port in range(10, 10 + LARGE_VIEW)]
    flaky, clock, tables = await refreshing_every_third(*peers)
    joiners = [address(port) for port in range(200, 200 + EVERY_THIRD.gossip_fanout + 1)]
    seed(flaky.inner, *(row(joiner, SiloStatus.JOINING) for joiner in joiners))
    await tables.refresh()  # our view: a join storm
    flaky.calls.clear()
    for port in range(300, 306):  # the storm goes on: the version moves every period
        await clock.advance(PERIOD)
        seed(flaky.inner, row(address(port), SiloStatus.JOINING))
    assert flaky.calls == ["read_all"] * 2  # every third period, as for heartbeats; no version read between
    await tables.stop()


@async_test
async def test_a_silo_joining_a_large_view_reads_nothing_periodically_until_it_is_active() -> None:
    """Its join re-reads what it waits for; 1,649 joiners of a stalled 2,000-silo join made four
    fifths of the table's full reads."""
    peers = [address(port) for port in range(10, 10 + LARGE_VIEW)]
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, *(row(peer) for peer in peers))
    tables = MembershipTableManager(
        table=flaky, address=ME, options=EVERY_THIRD, clock=clock, random=random.Random(7), run_blocking=run_inline
    )
    await tables.refresh()
    await tables.insert_self(row(ME, SiloStatus.JOINING), tables.deadline_in(10))
    tables.start()
    flaky.calls.clear()
    for port in range(300, 306):  # others' changes, and heartbeat periods, go by
        await clock.advance(PERIOD)
        seed(flaky.inner, row(address(port)))
    assert flaky.calls == []
    assert await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))
    flaky.calls.clear()
    await clock.advance(PERIOD)
    assert flaky.calls == ["read_all"], "the join outlasted the heartbeat cadence: in full at once"
    assert tables.snapshot.status_of(address(305)) is SiloStatus.ACTIVE
    await clock.advance(PERIOD)
    assert flaky.calls == ["read_all", "read_version"]
    await tables.stop()


@async_test
async def test_a_small_view_in_a_join_storm_still_reads_the_changes_when_the_version_moved() -> None:
    flaky, clock, tables = await refreshing_every_third(PEER)
    seed(flaky.inner, *(row(address(port), SiloStatus.JOINING) for port in range(200, 210)))
    await tables.refresh()
    flaky.calls.clear()
    await clock.advance(PERIOD)
    seed(flaky.inner, row(OTHER, SiloStatus.JOINING))
    await clock.advance(PERIOD)
    assert flaky.calls == ["read_version", "read_version", "read_changes"]
    await tables.stop()


@async_test
async def test_with_one_full_read_every_period_no_version_is_read() -> None:
    flaky, clock = FlakyTable(memory_table()), FakeClock(T0)
    seed(flaky.inner, row(PEER))
    tables = manager(flaky, clock)
    tables.start()
    for _ in range(4):
        await clock.advance(OPTIONS.table_refresh_timeout)
    assert flaky.calls == ["read_all"] * 4
    await tables.stop()


@async_test
async def test_a_failed_version_read_is_retried_and_counts_as_a_failed_call() -> None:
    flaky, clock, tables = await refreshing_every_third(PEER)
    flaky.down = True
    await clock.advance(PERIOD)
    assert flaky.calls.count("read_version") > 1  # retried with backoff
    assert not tables.table_available
    flaky.down = False
    await clock.advance(PERIOD)
    assert tables.table_available
    assert flaky.calls[-1] == "read_all"  # after a failure: full reads while recovering
    await tables.stop()


async def heartbeat_and_watch(
    flaky: FlakyTable,
    clock: FakeClock,
    tables: MembershipTableManager,
    beating: list[SiloAddress],
    *,
    seconds: float,
    beat_every: float,
    first_beat_after: float = 0.0,
    must_stay_fresh: bool = True,
) -> None:
    """Advance ``seconds`` in small steps; ``beating`` silos heartbeat every ``beat_every`` while the
    table is up (a beat due during an outage is missed); with ``must_stay_fresh``, check each step
    that we judge them all fresh."""
    step = PERIOD / 20
    next_beat = clock.monotonic() + first_beat_after
    for _ in range(round(seconds / step)):
        if clock.monotonic() >= next_beat:
            next_beat += beat_every
            if not flaky.down:
                for silo in beating:
                    flaky.inner.update_i_am_alive(silo, clock.now())
        await clock.advance(step)
        if must_stay_fresh:
            stale = [silo for silo in beating if not tables.liveness.is_fresh(silo)]
            assert stale == [], f"{stale} judged stale at {clock.monotonic():.2f}s"


@async_test
async def test_a_live_peer_stays_fresh_although_its_heartbeats_are_read_every_third_period() -> None:
    flaky, clock, tables = await refreshing_every_third(PEER)
    # The slowest heartbeat that is still not stale: just under stale_after between beats.
    await heartbeat_and_watch(
        flaky, clock, tables, [PEER], seconds=10 * EVERY_THIRD.full_refresh_interval,
        beat_every=0.95 * EVERY_THIRD.stale_after,
    )  # fmt: skip
    assert flaky.calls.count("read_version") > flaky.calls.count("read_all")  # the saving is real
    await tables.stop()


@async_test
async def test_a_crashed_peer_goes_stale_within_stale_after_plus_two_full_read_intervals() -> None:
    flaky, clock, tables = await refreshing_every_third(PEER)
    await heartbeat_and_watch(flaky, clock, tables, [PEER], seconds=2 * PERIOD, beat_every=EVERY_THIRD.stale_after / 3)
    flaky.inner.update_i_am_alive(PEER, clock.now())  # its last heartbeat
    crashed_at = clock.monotonic()
    bound = EVERY_THIRD.stale_after + 2 * EVERY_THIRD.full_refresh_interval
    while tables.liveness.is_fresh(PEER):
        assert clock.monotonic() - crashed_at <= bound
        await clock.advance(PERIOD / 20)
    assert clock.monotonic() - crashed_at > EVERY_THIRD.stale_after  # not before its heartbeats lapsed
    await tables.stop()


@async_test
async def test_an_outage_does_not_shrink_the_quorum_when_heartbeats_are_read_every_third_period() -> None:
    peers = [PEER, OTHER, address(4), address(5)]
    flaky, clock, tables = await refreshing_every_third(*peers)
    beat = EVERY_THIRD.i_am_alive_table_publish_timeout
    await heartbeat_and_watch(
        flaky, clock, tables, peers, seconds=2 * EVERY_THIRD.full_refresh_interval, beat_every=beat
    )
    flaky.down = True  # nobody (us included) can read or heartbeat
    await heartbeat_and_watch(
        flaky, clock, tables, peers, seconds=10 * tables.liveness.limit, beat_every=beat, must_stay_fresh=False
    )
    flaky.down = False
    # The worst case: our first read after the outage comes before any peer could heartbeat again.
    # (Until that read the outage is not credited, but no vote happens before it: a vote reads first.)
    await tables.refresh()
    await heartbeat_and_watch(
        flaky, clock, tables, peers, seconds=3 * EVERY_THIRD.full_refresh_interval, beat_every=beat,
        first_beat_after=beat,
    )  # fmt: skip
    assert await tables.try_vote(PEER) is VoteOutcome.VOTED  # 5 fresh silos: 2 votes needed, not 1
    await tables.stop()


@async_test
async def test_a_writer_behind_the_table_gossips_its_write_before_it_re_reads() -> None:
    """Another write landed between our view and our own (its gossip still on the way): receivers at
    our write's base version need nothing from our re-read, so the gossip must not wait for it."""
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER))
    announced: list[tuple[int, int]] = []

    def on_write(message: GossipMessage, snapshot: MembershipSnapshot, declared_dead: tuple[SiloAddress, ...]) -> None:
        announced.append((message.version, tables.snapshot.version))

    tables = MembershipTableManager(
        table=table, address=ME, options=OPTIONS, clock=clock, random=random.Random(7), run_blocking=run_inline,
        on_write=on_write,
    )  # fmt: skip
    await tables.refresh()
    await tables.insert_self(row(ME), tables.deadline_in(10))
    assert announced == [(2, 1)]  # at the base: announced, then applied (the sends go first)
    assert tables.snapshot.version == 2
    seed(table, row(OTHER))  # version 3, unseen by us
    assert await tables.update_own_status(SiloStatus.SHUTTING_DOWN, tables.deadline_in(10))
    assert announced[1] == (4, 2)  # announced while our view was still at 2 ...
    assert tables.snapshot.version == 4  # ... then re-read
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE


@async_test
async def test_own_row_writes_read_and_write_in_one_blocking_call() -> None:
    """No event-loop turn between an attempt's read and its write: on a busy loop that gap is where
    contenders' writes land and make ours lose its race (a join storm)."""
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER))
    calls: list[str] = []

    async def counting(call: Callable[[], object]) -> object:
        calls.append("call")
        return call()

    tables = MembershipTableManager(
        table=table, address=ME, options=OPTIONS, clock=clock, random=random.Random(7),
        run_blocking=counting,  # type: ignore[arg-type]
    )  # fmt: skip
    await tables.refresh()
    calls.clear()
    await tables.insert_self(row(ME, SiloStatus.JOINING), tables.deadline_in(10))
    assert await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))
    assert calls == ["call", "call"]  # one per write: its read, its write, and no re-read after it
    assert tables.snapshot.status_of(ME) is SiloStatus.ACTIVE
