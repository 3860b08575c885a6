from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from datetime import timedelta

import pytest

from membership_tables import CommittedWrite, MembershipEntry, MembershipTable, SiloAddress, SiloStatus, TableVersion
from membership_tables.contract import RowUpdate
from silo.errors import DeclaredDeadError, JoinError, TableUnavailableAtStartError
from silo.exit_codes import ExitCode
from silo.membership.clock import FakeClock
from silo.membership.gossiper import gossip_peers
from silo.membership.join_validation import (
    JOIN_BACKOFF_LIMIT,
    JOIN_PINGS_IN_FLIGHT,
    join_heartbeat_watch,
    validation_pause,
)
from silo.membership.probing import IndirectProbeResult
from silo.membership.ring import probe_targets
from silo.membership.snapshot import LARGE_VIEW
from silo.membership.table_refresh import ROW_READ_COST_IN_ROWS
from silo.runtime.silo import Silo
from tests.silo.harness import (
    LOCAL,
    T0,
    FlakyTable,
    FunctionProber,
    address,
    async_test,
    make_silo,
    memory_table,
    row,
    seed,
)

ME, PEER, OTHER = address(1, generation=10), address(2), address(3)


class StatusLog(FlakyTable):
    """Records every status this silo writes for ``ME``."""

    def __init__(self) -> None:
        super().__init__(memory_table())
        self.statuses: list[SiloStatus] = []

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        committed = super().insert_row_at_next_version(entry)
        if committed and entry.silo_address == ME:
            self.statuses.append(entry.status)
        return committed

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        committed = super().update_row_at_next_version(entry, etag)
        if committed and entry.silo_address == ME:
            self.statuses.append(entry.status)
        return committed

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        committed = super().update_rows_with_etags(updates, version)
        if committed:
            self.statuses.extend(entry.status for entry, _ in updates if entry.silo_address == ME)
        return committed


def no_report(via: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
    """An intermediary that cannot be asked: whether others reach the target stays unknown, so a
    silent target keeps blocking a join (``MembershipAgent._judged_by_others``)."""
    raise ConnectionError(f"{via} cannot be asked to probe {target} in this test")


def keep_heartbeating(table: MembershipTable, clock: FakeClock, *peers: SiloAddress) -> None:
    """Write a heartbeat of each of ``peers`` now: alive, whether or not we can reach them."""
    for peer in peers:
        table.update_i_am_alive(peer, clock.now())


@async_test
async def test_join_inserts_joining_then_becomes_active_with_the_silo_fields() -> None:
    table, clock = StatusLog(), FakeClock(T0)
    seed(table.inner, row(PEER, when=T0))
    silo = make_silo(
        table, ME, clock, silo_name="s1", host_name="box", proxy_port=30000, role_name="web", properties={"a": "1"}
    )
    await silo.start()
    assert silo.status is SiloStatus.ACTIVE
    assert table.statuses == [SiloStatus.JOINING, SiloStatus.ACTIVE]
    found = table.inner.read_all().get(ME)
    assert found is not None
    entry = found[0]
    assert (entry.silo_name, entry.host_name, entry.proxy_port, entry.role_name) == ("s1", "box", 30000, "web")
    assert dict(entry.properties) == {"a": "1"}
    assert entry.start_time == T0
    await silo.stop()


@async_test
async def test_graceful_stop_writes_shutting_down_then_dead() -> None:
    table, clock = StatusLog(), FakeClock(T0)
    silo = make_silo(table, ME, clock)
    await silo.start()
    await silo.stop()
    await silo.stop()  # idempotent
    assert table.statuses == [SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD]
    assert await silo.wait_terminated() is ExitCode.OK
    assert silo.status is SiloStatus.DEAD


@async_test
async def test_iamalive_is_written_every_publish_period() -> None:
    table, clock = memory_table(), FakeClock(T0)
    silo = make_silo(table, ME, clock)
    await silo.start()
    await clock.advance(LOCAL.i_am_alive_table_publish_timeout * 3)
    found = table.read_all().get(ME)
    assert found is not None
    assert found[0].i_am_alive_time == T0 + timedelta(seconds=LOCAL.i_am_alive_table_publish_timeout * 3)
    await silo.stop()


@async_test
async def test_a_joiner_writes_iamalive_while_it_waits_so_it_is_never_stale_for_the_others() -> None:
    """In a join that outlasted the freshness limit every Joining row had become a suspect, probed
    by three Active silos each (2,000 silos)."""
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0))
    silo = make_silo(table, ME, clock, prober=FunctionProber(reachable=lambda target: False, indirect=no_report))
    joining = asyncio.create_task(silo.start())
    periods = 2
    for _ in range(int(periods * LOCAL.i_am_alive_table_publish_timeout / LOCAL.probe_timeout)):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER)
    assert not joining.done()
    found = table.read_all().get(ME)
    assert found is not None
    assert found[0].status is SiloStatus.JOINING
    assert found[0].i_am_alive_time >= T0 + timedelta(seconds=periods * LOCAL.i_am_alive_table_publish_timeout)
    joining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await joining
    await silo.stop()


@async_test
async def test_join_retries_an_unreachable_active_silo_then_fails_naming_it() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0))
    prober = FunctionProber(reachable=lambda target: False)
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    # heartbeats of the peers, so they stay non-stale while we try
    for _ in range(int(LOCAL.max_join_attempt_time / LOCAL.probe_timeout) - 2):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER)
    assert not joining.done()
    assert silo.status is SiloStatus.JOINING
    await clock.advance(LOCAL.probe_timeout * 3)
    with pytest.raises(JoinError, match=str(PEER)) as failure:
        await joining
    assert failure.value.unreachable == (PEER,)
    assert prober.pings.count(PEER) > 5
    assert await silo.wait_terminated() is ExitCode.JOIN_FAILED
    found = table.read_all().get(ME)
    assert found is not None
    assert found[0].status is SiloStatus.DEAD  # no Joining row left behind


@async_test
async def test_join_succeeds_once_the_peer_answers() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0))
    reachable = {PEER: False}
    silo = make_silo(table, ME, clock, prober=FunctionProber(reachable=lambda target: reachable[target]))
    joining = asyncio.create_task(silo.start())
    await clock.advance(LOCAL.probe_timeout * 2)
    assert not joining.done()
    reachable[PEER] = True
    await clock.advance(LOCAL.probe_timeout)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    await silo.stop()


@async_test
async def test_join_pings_a_silo_that_answered_only_once() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0))
    reachable = {PEER: False, OTHER: True}
    prober = FunctionProber(reachable=lambda target: reachable[target], indirect=no_report)
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    for _ in range(4):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER)
    assert not joining.done()
    assert prober.pings.count(PEER) >= 4  # every round
    assert prober.pings.count(OTHER) == 1  # answered in the first round: not pinged again
    reachable[PEER] = True
    await clock.advance(LOCAL.probe_timeout)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    await silo.stop()


@async_test
async def test_a_silo_that_turns_active_while_a_joiner_waits_is_not_added_to_what_it_must_reach() -> None:
    """In a join storm hundreds turn Active meanwhile: each would be one more silo to wait for."""
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0))
    reachable = {PEER: False, OTHER: True}
    prober = FunctionProber(reachable=lambda target: reachable[target], indirect=no_report)
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    await clock.advance(LOCAL.probe_timeout)
    seed(table, row(OTHER, when=clock.now()))  # Active after our first round
    for _ in range(3):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER)
    assert not joining.done()
    assert OTHER in silo.snapshot.active_silos  # seen, but not pinged for the join
    assert prober.pings.count(OTHER) == 0
    reachable[PEER] = True
    await clock.advance(LOCAL.probe_timeout)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    assert prober.pings.count(PEER) >= 3
    await silo.stop()


@async_test
async def test_beyond_max_join_validation_pings_a_joiner_pings_its_targets_and_a_random_sample() -> None:
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 18)]
    seed(table, *(row(peer, when=T0) for peer in peers))
    options = LOCAL.with_overrides({"num_probed_silos": 2, "max_join_validation_pings": 3})
    prober = FunctionProber()
    silo = make_silo(table, ME, clock, prober=prober, options=options)
    await silo.start()
    validated = set(prober.pings)
    assert len(validated) == 3
    assert set(probe_targets(ME, peers, 2)) <= validated  # the silos it is about to probe, and one more
    await silo.stop()


@async_test
async def test_a_joiner_validates_first_the_silos_it_will_keep_talking_to() -> None:
    """Its probe targets and the silos it sends its gossip to: the channels opened for the join
    pings stay in use afterwards, instead of one channel per ping."""
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 40)]
    seed(table, *(row(peer, when=T0) for peer in peers))
    options = LOCAL.with_overrides({"num_probed_silos": 2, "gossip_fanout": 4, "max_join_validation_pings": 8})
    prober = FunctionProber()
    silo = make_silo(table, ME, clock, prober=prober, options=options)
    await silo.start()
    validated = set(prober.pings)
    assert len(validated) == 8
    assert set(probe_targets(ME, peers, 2)) | set(gossip_peers(ME, peers, 4)) <= validated
    await silo.stop()


@async_test
async def test_up_to_max_join_validation_pings_a_joiner_pings_every_active_silo() -> None:
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 13)]
    seed(table, *(row(peer, when=T0) for peer in peers))
    prober = FunctionProber()
    silo = make_silo(table, ME, clock, prober=prober, options=LOCAL.with_overrides({"max_join_validation_pings": 3}))
    await silo.start()
    assert set(prober.pings) == set(peers)
    await silo.stop()


@async_test
async def test_an_active_row_that_never_heartbeats_does_not_block_the_join_for_long() -> None:
    # e.g. the whole cluster crashed: nobody declared PEER Dead, and it never answers
    table, clock = memory_table(), FakeClock(T0 + timedelta(hours=1))
    seed(table, row(PEER, when=T0))
    silo = make_silo(table, ME, clock, prober=FunctionProber(reachable=lambda target: False))
    joining = asyncio.create_task(silo.start())
    waited = 0.0
    while not joining.done() and waited < LOCAL.max_join_attempt_time:
        await clock.advance(LOCAL.probe_timeout)
        waited += LOCAL.probe_timeout
    await joining
    assert silo.status is SiloStatus.ACTIVE
    assert waited <= join_heartbeat_watch(LOCAL) + 2 * LOCAL.probe_timeout  # judged on our clock, not the row's age
    await silo.stop()


@async_test
async def test_an_unreachable_silo_that_still_heartbeats_blocks_the_join() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0))
    silo = make_silo(table, ME, clock, prober=FunctionProber(reachable=lambda target: False))
    joining = asyncio.create_task(silo.start())
    for _ in range(int(join_heartbeat_watch(LOCAL) / LOCAL.probe_timeout) * 2):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER)  # alive, but we cannot reach it
    assert not joining.done()
    while not joining.done():
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER)
    with pytest.raises(JoinError):
        await joining


def large_cluster(table: MembershipTable) -> list[SiloAddress]:
    """Seed a cluster whose rows cost more to read in full than a joiner's few row reads."""
    peers = [PEER, *(address(port) for port in range(10, 10 + 2 * ROW_READ_COST_IN_ROWS))]
    seed(table, *(row(peer, when=T0) for peer in peers))
    return peers


def joining_a_large_cluster(
    table: MembershipTable,
) -> tuple[FakeClock, list[SiloAddress], Silo, asyncio.Task[None]]:
    """ME starting beside ``large_cluster`` in ``table``, unable to reach PEER (and unable to learn whether
    others reach it); the join under way."""
    clock = FakeClock(T0)
    peers = large_cluster(table)
    prober = FunctionProber(reachable=lambda target: target != PEER, indirect=no_report)
    silo = make_silo(table, ME, clock, prober=prober)
    return clock, peers, silo, asyncio.create_task(silo.start())


def write_status(table: MembershipTable, silo: SiloAddress, status: SiloStatus) -> None:
    """Another silo (or an operator) writes ``silo``'s status."""
    data = table.read_row(silo)
    found = data.get(silo)
    assert found is not None
    assert table.update_row(dataclasses.replace(found[0], status=status), found[1], data.version.next())


@async_test
async def test_a_joiner_of_a_large_cluster_rereads_only_the_rows_of_the_silos_it_has_not_reached() -> None:
    """Not the whole table each round: hundreds of joiners doing so melted 1,000-silo join storms down."""
    table = FlakyTable(memory_table())
    clock, peers, _silo, joining = joining_a_large_cluster(table)
    await clock.advance(0)
    table.calls.clear()
    rounds = 4  # within one periodic refresh (table_refresh_timeout)
    for _ in range(rounds):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    assert not joining.done()
    assert table.calls.count("read_all") <= 1  # the periodic refresh's, if its tick came
    assert table.calls.count("read_rows") == rounds  # PEER's row, each round
    assert table.calls.count("read_row") == rounds  # and our own
    joining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await joining


def test_a_joiner_of_a_large_view_waits_longer_after_each_round_in_which_nobody_new_answered() -> None:
    rng = random.Random(3)
    timeout = LOCAL.probe_timeout
    assert [validation_pause(LOCAL, idle, False, 1e6, rng) for idle in range(6)] == [timeout] * 6
    assert [validation_pause(LOCAL, idle, True, 1e6, rng) for idle in (0, 1)] == [timeout] * 2
    pauses = [[validation_pause(LOCAL, idle, True, 1e6, rng) for _ in range(200)] for idle in range(2, 8)]
    for idle, drawn in enumerate(pauses, start=2):
        assert timeout <= min(drawn)
        assert max(drawn) <= timeout * min(2 ** (idle - 1), JOIN_BACKOFF_LIMIT)
    assert max(pauses[-1]) > timeout * JOIN_BACKOFF_LIMIT * 0.9, "the cap is reached"
    assert validation_pause(LOCAL, 7, True, timeout * 3, rng) <= timeout * 2, "not past the deadline"
    assert validation_pause(LOCAL, 7, True, timeout / 2, rng) == timeout, "nor shorter than a probe timeout"


@async_test
async def test_a_joiner_of_a_large_view_that_nobody_answers_pings_less_often_and_joins_once_answered() -> None:
    """A 2,000-silo join stood still at 191 Active while 1,800 joiners re-pinged every silo they
    waited for each probe timeout, and those pings were the load that kept the answers away.
    Once answered, the pings double each round that goes well, without a pause."""
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 10 + LARGE_VIEW + 1)]
    seed(table, *(row(peer, when=T0) for peer in peers))
    answering = {"now": False}
    prober = FunctionProber(reachable=lambda target: answering["now"], indirect=no_report)
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    timeouts = 10  # half the join's time (LOCAL.max_join_attempt_time)
    for _ in range(timeouts):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    assert not joining.done()
    # a round each probe timeout pinging all 66 would be 660 pings: half as many each bad round, and fewer rounds
    assert len(set(prober.pings)) > JOIN_PINGS_IN_FLIGHT / 2
    assert len(prober.pings) <= 2 * JOIN_PINGS_IN_FLIGHT
    answering["now"] = True
    for _ in range(JOIN_BACKOFF_LIMIT + 1):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    assert set(prober.pings) == set(peers), "every silo it waited for was pinged, and answered"
    await silo.stop()


@async_test
async def test_in_a_large_cluster_an_active_row_that_never_heartbeats_does_not_block_the_join_for_long() -> None:
    table = memory_table()
    clock, peers, silo, joining = joining_a_large_cluster(table)
    waited = 0.0
    while not joining.done() and waited < LOCAL.max_join_attempt_time:
        await clock.advance(LOCAL.probe_timeout)
        waited += LOCAL.probe_timeout
        keep_heartbeating(table, clock, *(peer for peer in peers if peer != PEER))  # PEER crashed
    await joining
    assert silo.status is SiloStatus.ACTIVE
    assert waited <= join_heartbeat_watch(LOCAL) + 2 * LOCAL.probe_timeout
    await silo.stop()


@async_test
async def test_in_a_large_cluster_a_silo_that_still_heartbeats_blocks_the_join_until_it_is_declared_dead() -> None:
    table = memory_table()
    clock, peers, silo, joining = joining_a_large_cluster(table)
    for _ in range(int(join_heartbeat_watch(LOCAL) / LOCAL.probe_timeout) * 2):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    assert not joining.done()
    write_status(table, PEER, SiloStatus.DEAD)  # the cluster's verdict, read from PEER's row alone
    await clock.advance(LOCAL.probe_timeout)
    await clock.advance(LOCAL.probe_timeout)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    await silo.stop()


@async_test
async def test_a_joiner_of_a_large_cluster_declared_dead_while_it_waits_stops() -> None:
    table = memory_table()
    clock, peers, silo, joining = joining_a_large_cluster(table)
    await clock.advance(LOCAL.probe_timeout)
    write_status(table, ME, SiloStatus.DEAD)
    for _ in range(3):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    with pytest.raises(DeclaredDeadError):
        await joining
    assert await silo.wait_terminated() is ExitCode.DECLARED_DEAD


@async_test
async def test_a_silo_another_silo_reaches_for_us_counts_once_half_answered_us() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0))
    prober = FunctionProber(
        reachable=lambda target: target != PEER,
        indirect=lambda via, target: IndirectProbeResult(via == OTHER and target == PEER, 0, 0.01),
    )
    silo = make_silo(table, ME, clock, prober=prober)
    await asyncio.wait_for(silo.start(), 1)  # no round waited: OTHER answered, and reached PEER for us
    assert silo.status is SiloStatus.ACTIVE
    assert prober.indirect_calls == [(OTHER, PEER)]
    await silo.stop()


@async_test
async def test_a_silo_nobody_reaches_for_us_no_longer_blocks_the_join_and_counts_as_unreached() -> None:
    """Slow or cut off for everyone (a lagging host in a join storm): the cluster's detector judges it, not our join."""
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0))
    prober = FunctionProber(
        reachable=lambda target: target != PEER, indirect=lambda via, target: IndirectProbeResult(False, 0, 0.01)
    )
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    await clock.advance(0)
    keep_heartbeating(table, clock, PEER, OTHER)  # alive: it heartbeats, yet OTHER cannot reach it either
    await asyncio.wait_for(joining, 1)  # no round waited
    assert silo.status is SiloStatus.ACTIVE
    assert prober.indirect_calls == [(OTHER, PEER)]
    join_pings = [target for target, known in zip(prober.pings, prober.known_versions, strict=True) if known]
    assert join_pings.count(PEER) == 1  # not pinged again once judged
    assert silo.ownership().own_hold > LOCAL.takeover_wait  # unreached: it holds its keys for outage_takeover_wait
    await silo.stop()


@async_test
async def test_a_silo_whose_witness_does_not_report_is_asked_of_others_again() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0))
    reports = iter([RuntimeError("cannot ask"), RuntimeError("cannot ask"), IndirectProbeResult(False, 0, 0.01)])

    def indirect(via: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
        report = next(reports)
        if isinstance(report, Exception):
            raise report
        return report

    prober = FunctionProber(reachable=lambda target: target != PEER, indirect=indirect)
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    for _ in range(2):  # the first round's ask and the second's find nobody to report
        await clock.advance(0)
        assert not joining.done()
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER)
    await asyncio.wait_for(joining, 1)  # the third round's witness reports: it cannot reach PEER either
    assert silo.status is SiloStatus.ACTIVE
    assert prober.indirect_calls == [(OTHER, PEER)] * 3
    await silo.stop()


@async_test
async def test_a_joiner_that_reaches_fewer_than_half_directly_asks_nobody_to_reach_the_rest() -> None:
    table, clock = memory_table(), FakeClock(T0)
    third = address(4)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0), row(third, when=T0))
    prober = FunctionProber(
        reachable=lambda target: target == third, indirect=lambda via, target: IndirectProbeResult(True, 0, 0.01)
    )
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    while not joining.done():
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER, third)
    with pytest.raises(JoinError) as failure:
        await joining
    assert set(failure.value.unreachable) == {PEER, OTHER}
    assert prober.indirect_calls == []  # cut off from most of the cluster: others' word does not count


@async_test
async def test_many_silos_others_reach_for_us_block_the_join_until_only_a_few_are_left() -> None:
    """Others reach them and we do not: we may be cut off from a share of the cluster. Each is asked
    of others once, not every round: in a storm that adds load where there is too much."""
    table, clock = memory_table(), FakeClock(T0)
    reachable = {address(port): port < 14 for port in range(10, 18)}  # 4 answer, 4 do not
    seed(table, *(row(peer, when=T0) for peer in reachable))
    prober = FunctionProber(
        reachable=lambda target: reachable[target], indirect=lambda via, target: IndirectProbeResult(True, 0, 0.01)
    )
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    for _ in range(3):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *reachable)
    assert not joining.done()
    silent = [address(14), address(15), address(16), address(17)]
    assert sorted(target for _, target in prober.indirect_calls) == silent  # once each
    reachable[address(14)] = True  # three left: num_indirect_probes
    await clock.advance(LOCAL.probe_timeout)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    assert sorted(target for _, target in prober.indirect_calls) == silent  # nobody asked again
    await silo.stop()


@async_test
async def test_in_a_large_view_a_share_of_silos_others_reach_for_us_blocks_however_few_a_round_pings() -> None:
    """After bad rounds a joiner of a large view pings a few of the silos it waits for at a time
    (``ValidationPace``); a few silent ones among them must not pass for "the last few" that others
    reach: only a round of all it waits for is judged so."""
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 10 + LARGE_VIEW + 1)]
    cut = set(peers[: len(peers) // 4])  # a quarter of the cluster: others reach it, we do not
    seed(table, *(row(peer, when=T0) for peer in peers))
    prober = FunctionProber(
        reachable=lambda target: target not in cut, indirect=lambda via, target: IndirectProbeResult(True, 0, 0.01)
    )
    silo = make_silo(table, ME, clock, prober=prober)
    joining = asyncio.create_task(silo.start())
    for _ in range(int(LOCAL.max_join_attempt_time / LOCAL.probe_timeout) - 4):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    assert not joining.done(), "cut off from a quarter of the cluster: still waiting"
    cut.clear()
    for _ in range(JOIN_BACKOFF_LIMIT):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    await joining
    assert silo.status is SiloStatus.ACTIVE
    await silo.stop()


@async_test
async def test_a_joiner_down_to_one_ping_a_round_lets_others_judge_all_it_waits_for() -> None:
    """After an overload its rounds shrank to one ping (``ValidationPace``), and silos nobody
    reaches (just under half) are soon all it waits for: others judge each as it stays silent, so
    the join ends. Judged only in a round that pinged all of them, it waited until its join limit
    (in a 2,000-silo storm hundreds of joiners did, on four or five such silos each)."""
    # their heartbeats are watched longer than the test: they are not let go for standing still
    options = LOCAL.with_overrides({"max_join_attempt_time": "600s", "i_am_alive_table_publish_timeout": "300s"})
    table, clock = memory_table(), FakeClock(T0)
    peers = [address(port) for port in range(10, 10 + LARGE_VIEW + 1)]
    stuck = set(peers[1::2])  # silent to everyone (their hosts lag): just under half
    overloaded = True
    seed(table, *(row(peer, when=T0) for peer in peers))
    prober = FunctionProber(
        reachable=lambda target: not overloaded and target not in stuck,
        indirect=lambda via, target: IndirectProbeResult(target not in stuck, 0, 0.01),
    )
    silo = make_silo(table, ME, clock, prober=prober, options=options)
    joining = asyncio.create_task(silo.start())
    for _ in range(40):  # every ping times out for a while: the rounds shrink to one ping
        await clock.advance(options.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    overloaded = False
    for _ in range(int(options.max_join_attempt_time / options.probe_timeout) // 2):
        if joining.done():
            break
        await clock.advance(options.probe_timeout)
        keep_heartbeating(table, clock, *peers)
    await asyncio.wait_for(joining, 1)
    assert silo.status is SiloStatus.ACTIVE
    assert silo.ownership().own_hold > options.takeover_wait  # unreached: it holds its keys for outage_takeover_wait
    assert sorted(target for _, target in prober.indirect_calls) == sorted(stuck)  # each asked of others once
    await silo.stop()


@async_test
async def test_without_indirect_probes_a_joiner_must_reach_every_silo_itself() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER, when=T0), row(OTHER, when=T0))
    prober = FunctionProber(
        reachable=lambda target: target != PEER, indirect=lambda via, target: IndirectProbeResult(True, 0, 0.01)
    )
    options = LOCAL.with_overrides({"enable_indirect_probes": "false"})
    silo = make_silo(table, ME, clock, prober=prober, options=options)
    joining = asyncio.create_task(silo.start())
    for _ in range(4):
        await clock.advance(LOCAL.probe_timeout)
        keep_heartbeating(table, clock, PEER, OTHER)
    assert not joining.done()
    assert prober.indirect_calls == []
    joining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await joining


@async_test
async def test_a_silo_declares_its_own_older_generation_dead_on_start() -> None:
    table, clock = memory_table(), FakeClock(T0)
    older, oldest = address(1, generation=9), address(1, generation=8)
    seed(table, row(older), row(oldest, SiloStatus.DEAD), row(PEER))
    silo = make_silo(table, ME, clock)
    await silo.start()
    data = table.read_all()
    assert [data.get(silo_address)[0].status for silo_address in (older, oldest, PEER, ME)] == [  # type: ignore[index]
        SiloStatus.DEAD,
        SiloStatus.DEAD,
        SiloStatus.ACTIVE,
        SiloStatus.ACTIVE,
    ]
    await silo.stop()


@async_test
async def test_a_newer_generation_in_the_table_stops_the_start() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(address(1, generation=11)))
    silo = make_silo(table, ME, clock)
    with pytest.raises(DeclaredDeadError, match="superseded"):
        await silo.start()
    assert await silo.wait_terminated() is ExitCode.DECLARED_DEAD
    assert table.read_all().get(ME) is None


@async_test
async def test_an_unreachable_table_at_start_fails_after_the_join_time() -> None:
    table, clock = FlakyTable(memory_table()), FakeClock(T0)
    table.down = True
    silo = make_silo(table, ME, clock)
    starting = asyncio.create_task(silo.start())
    await clock.advance(LOCAL.max_join_attempt_time / 2)
    assert not starting.done()
    await clock.advance(LOCAL.max_join_attempt_time)
    with pytest.raises(TableUnavailableAtStartError, match="could not reach the membership table"):
        await starting
    assert table.failed_calls > 3
    assert await silo.wait_terminated() is ExitCode.TABLE_UNAVAILABLE_AT_START
