"""Five in-process silos on one memory table and a fake network, driven by a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from membership_tables import MembershipTable, SiloAddress, SiloStatus
from silo.exit_codes import ExitCode
from silo.membership.clock import FakeClock
from silo.membership.table_access import run_inline
from silo.runtime.silo import Silo
from tests.silo.harness import LOCAL, T0, FakeNetwork, FlakyTable, async_test, cluster_silos, memory_table, network_silo

STEP = LOCAL.probe_timeout / 5
T = TypeVar("T")


async def start_cluster(
    size: int, table: MembershipTable | None = None, round_trip: float = 0.0
) -> tuple[list[Silo], FakeNetwork, FakeClock]:
    """``size`` started silos; each table call takes ``round_trip`` seconds of the fake clock."""
    clock, network = FakeClock(T0), FakeNetwork()

    async def call_the_table(call: Callable[[], T]) -> T:
        await clock.sleep(round_trip / 2)
        result = call()
        await clock.sleep(round_trip / 2)
        return result

    runner = call_the_table if round_trip else run_inline
    silos = cluster_silos(table or memory_table(), clock, network, range(1, size + 1), runner)
    starting = [asyncio.create_task(silo.start()) for silo in silos]
    while not all(start.done() for start in starting):
        await clock.advance(STEP)  # the table calls of a start wait on the clock
    await asyncio.gather(*starting)
    await clock.advance(STEP)
    return silos, network, clock


@async_test
async def test_all_silos_become_active_and_agree() -> None:
    silos, _, clock = await start_cluster(5)
    for _ in range(10):
        await clock.advance(LOCAL.probe_timeout)
    everyone = {silo.silo_address for silo in silos}
    for silo in silos:
        assert silo.status is SiloStatus.ACTIVE
        assert set(silo.snapshot.active_silos) == everyone
    assert len({silo.snapshot.version for silo in silos}) == 1
    for silo in silos:
        await silo.stop()


@async_test
async def test_an_unreachable_silo_is_declared_dead_within_the_bound_and_terminates_itself() -> None:
    silos, network, clock = await start_cluster(5)
    victim, survivors = silos[2], [silo for silo in silos if silo is not silos[2]]
    table = survivors[0]
    network.partitioned.add(victim.silo_address)
    ending = asyncio.create_task(victim.wait_terminated())

    bound = LOCAL.num_missed_probes_limit * LOCAL.probe_timeout + 3 * STEP
    elapsed = 0.0
    while table.snapshot.status_of(victim.silo_address) is not SiloStatus.DEAD and elapsed <= bound:
        await clock.advance(STEP)
        elapsed += STEP
    dead = table.snapshot.entry(victim.silo_address)
    assert dead is not None
    assert dead.status is SiloStatus.DEAD, f"not declared dead within {bound}s"
    killer = dead.suspect_times[-1][0]
    assert killer in {silo.silo_address for silo in survivors}

    await clock.advance(LOCAL.table_refresh_timeout)  # the victim reads the table and finds itself Dead
    assert ending.done()
    assert ending.result() is ExitCode.DECLARED_DEAD
    assert "Dead" in victim.termination_reason

    for _ in range(10):
        await clock.advance(LOCAL.probe_timeout)
    for silo in survivors:
        assert silo.status is SiloStatus.ACTIVE
        assert silo.snapshot.status_of(victim.silo_address) is SiloStatus.DEAD
        assert set(silo.snapshot.active_silos) == {other.silo_address for other in survivors}
    for silo in survivors:
        await silo.stop()
        assert await silo.wait_terminated() is ExitCode.OK


@async_test
async def test_a_death_is_written_by_its_first_monitors_while_the_others_hold_their_votes() -> None:
    """All five monitors of the victim suspect it at the same instant (one fake clock, table calls
    of 4 ms); only the first ranks vote at once (``ClusterHealthMonitor.vote_delay``), and the
    death gossiped to the others before their turn spares their writes: at most one lost race.
    Voting together (no stagger), the five wrote 9 times, 7 of them lost."""
    table = FlakyTable(memory_table())
    silos, network, clock = await start_cluster(6, table, round_trip=0.004)
    for _ in range(4):
        await clock.advance(LOCAL.probe_timeout)
    victim, survivors = silos[3], [silo for silo in silos if silo is not silos[3]]
    version = survivors[0].snapshot.version
    table.calls.clear()
    network.partitioned.add(victim.silo_address)
    for _ in range(int(2 * LOCAL.detection_time / STEP)):
        await clock.advance(STEP)
    for silo in survivors:
        assert silo.snapshot.status_of(victim.silo_address) is SiloStatus.DEAD
        assert silo.snapshot.version == version + 2  # one vote, then the death
    assert table.calls.count("update_rows_with_etags") <= 3
    stopping = asyncio.gather(*(silo.stop() for silo in silos))
    while not stopping.done():
        await clock.advance(STEP)  # the table calls of a stop wait on the clock


@async_test
async def test_with_ring_sampling_a_cut_off_minority_is_declared_dead_while_its_monitors_health_is_poor() -> None:
    """A 4|3 cut of 7 silos that each probe 2. Each minority silo has one majority monitor on its
    ring, whose health (its other target is cut off too) stretches its suspicion past the 3 s vote
    expiry; the other majority silos watch the suspect after that vote. A watch stopped when the
    vote expired lost its silence and started again at the next vote: the last of them was Dead
    after 20 s. Kept until the suspect answers (``ClusterHealthMonitor``), within 10 s."""
    options = replace(LOCAL, num_probed_silos=2)
    clock, network, table = FakeClock(T0), FakeNetwork(), memory_table()
    silos = [network_silo(table, port, clock, network, options=options) for port in range(1063, 1070)]
    starting = [asyncio.create_task(silo.start()) for silo in silos]
    while not all(start.done() for start in starting):
        await clock.advance(STEP)
    for _ in range(20):
        await clock.advance(LOCAL.probe_timeout)
    majority, minority = silos[:4], silos[4:]
    network.sides.update({silo.silo_address: 0 for silo in majority} | {silo.silo_address: 1 for silo in minority})
    cut = clock.monotonic()

    def statuses() -> dict[SiloAddress, SiloStatus]:
        return {entry.silo_address: entry.status for entry in table.read_all().entries}

    while clock.monotonic() - cut < 10 and SiloStatus.ACTIVE in {statuses()[silo.silo_address] for silo in minority}:
        await clock.advance(STEP)
    after = statuses()
    assert [after[silo.silo_address] for silo in minority] == [SiloStatus.DEAD] * 3
    assert [after[silo.silo_address] for silo in majority] == [SiloStatus.ACTIVE] * 4
    stopping = asyncio.gather(*(silo.stop() for silo in silos))
    while not stopping.done():
        await clock.advance(STEP)


@async_test
async def test_graceful_stops_leave_the_others_active() -> None:
    silos, _, clock = await start_cluster(3)
    await silos[0].stop()
    for _ in range(10):
        await clock.advance(LOCAL.probe_timeout)
    for silo in silos[1:]:
        assert silo.status is SiloStatus.ACTIVE
        assert silo.snapshot.status_of(silos[0].silo_address) is SiloStatus.DEAD
        await silo.stop()
