from __future__ import annotations

import random
from datetime import timedelta

from membership_tables import MembershipTable, SiloAddress, SiloStatus
from silo.membership.cleanup import CleanupAgent, cleanup_leader
from silo.membership.clock import FakeClock
from silo.membership.table_access import run_inline
from silo.membership.table_manager import MembershipTableManager
from tests.silo.harness import LOCAL, T0, address, async_test, memory_table, row, seed, view

OLDEST = address(9, generation=1)
YOUNGER = address(1, generation=2)
DEFUNCT = address(5, generation=0)


def test_the_leader_is_the_oldest_active_silo_by_generation_then_address() -> None:
    assert cleanup_leader(view(row(YOUNGER), row(OLDEST), row(DEFUNCT, SiloStatus.DEAD))) == OLDEST
    assert cleanup_leader(view(row(address(2, 1)), row(address(1, 1)))) == address(1, 1)
    assert cleanup_leader(view(row(DEFUNCT, SiloStatus.DEAD))) is None


def agent(table: MembershipTable, clock: FakeClock, me: SiloAddress) -> tuple[CleanupAgent, MembershipTableManager]:
    manager = MembershipTableManager(
        table=table, address=me, options=LOCAL, clock=clock, random=random.Random(0), run_blocking=run_inline
    )
    return CleanupAgent(manager=manager, address=me, options=LOCAL, clock=clock), manager


@async_test
async def test_only_the_oldest_active_silo_removes_defunct_rows() -> None:
    table = memory_table()
    clock = FakeClock(T0 + timedelta(seconds=LOCAL.defunct_silo_expiration + 1))
    seed(table, row(OLDEST), row(YOUNGER), row(DEFUNCT, SiloStatus.DEAD))
    younger, younger_tables = agent(table, clock, YOUNGER)
    await younger_tables.refresh()
    assert await younger.cleanup_once() == 0
    assert table.read_all().get(DEFUNCT) is not None
    oldest, oldest_tables = agent(table, clock, OLDEST)
    await oldest_tables.refresh()
    assert await oldest.cleanup_once() == 1
    assert table.read_all().get(DEFUNCT) is None


@async_test
async def test_cleanup_runs_at_most_once_per_period() -> None:
    table = memory_table()
    clock = FakeClock(T0)
    seed(table, row(OLDEST, when=T0), row(DEFUNCT, SiloStatus.DEAD, when=T0))
    oldest, tables = agent(table, clock, OLDEST)
    await tables.refresh()
    oldest.start()
    await clock.advance(LOCAL.defunct_silo_expiration + 1)  # defunct now, but the next round is pending
    assert table.read_all().get(DEFUNCT) is not None
    period = LOCAL.defunct_silo_cleanup_period
    await clock.advance(period - (LOCAL.defunct_silo_expiration + 1) % period)
    assert table.read_all().get(DEFUNCT) is None
    await oldest.stop()
