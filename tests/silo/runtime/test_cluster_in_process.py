"""Five in-process silos on one memory table and a fake network, driven by a fake clock."""

from __future__ import annotations

import asyncio

from membership_tables import SiloStatus
from silo.exit_codes import ExitCode
from silo.membership.clock import FakeClock
from silo.runtime.silo import Silo
from tests.silo.harness import LOCAL, T0, FakeNetwork, async_test, cluster_silos, memory_table

STEP = LOCAL.probe_timeout / 5


async def start_cluster(size: int) -> tuple[list[Silo], FakeNetwork, FakeClock]:
    clock, network = FakeClock(T0), FakeNetwork()
    silos = cluster_silos(memory_table(), clock, network, range(1, size + 1))
    for silo in silos:
        await silo.start()
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
async def test_graceful_stops_leave_the_others_active() -> None:
    silos, _, clock = await start_cluster(3)
    await silos[0].stop()
    for _ in range(10):
        await clock.advance(LOCAL.probe_timeout)
    for silo in silos[1:]:
        assert silo.status is SiloStatus.ACTIVE
        assert silo.snapshot.status_of(silos[0].silo_address) is SiloStatus.DEAD
        await silo.stop()
