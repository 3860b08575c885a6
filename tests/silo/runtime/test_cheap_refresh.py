"""The cheap periodic refresh on a real SQLite table under a whole silo stack (fake clock, in process).

In steady state (nothing changes but heartbeats) a silo reads the whole table once every
``full_refresh_every`` periods and only the version in between.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from membership_tables import SiloStatus, open_table
from silo.membership.clock import FakeClock
from silo.runtime.silo import Silo
from tests.silo.harness import CLUSTER, LOCAL, T0, FakeNetwork, FlakyTable, async_test, network_silo

PERIODS = 9


async def steady_cluster(path: Path, full_refresh_every: int) -> tuple[list[FlakyTable], FakeClock, list[Silo]]:
    """Three Active silos, each with its own connection to one SQLite file, counting their table calls."""
    options = dataclasses.replace(LOCAL, full_refresh_every=full_refresh_every)
    clock, network = FakeClock(T0), FakeNetwork()
    tables, silos = [], []
    for port in (1, 2, 3):
        table = FlakyTable(open_table(f"sqlite:///{path}", CLUSTER))
        silo = network_silo(table, port, clock, network, options=options)
        await silo.start()
        tables.append(table)
        silos.append(silo)
    await clock.advance(LOCAL.table_refresh_timeout)  # past everyone's randomized first refresh
    for table in tables:
        table.calls.clear()
    return tables, clock, silos


@pytest.mark.parametrize("full_refresh_every", [1, 3])
@async_test
async def test_in_steady_state_a_silo_reads_the_whole_table_once_every_full_refresh_every_periods(
    tmp_path: Path, full_refresh_every: int
) -> None:
    tables, clock, silos = await steady_cluster(tmp_path / "members.db", full_refresh_every)
    for _ in range(PERIODS):
        await clock.advance(LOCAL.table_refresh_timeout)
    full_reads = PERIODS // full_refresh_every
    assert [table.calls.count("read_all") for table in tables] == [full_reads] * 3
    assert [table.calls.count("read_version") for table in tables] == [PERIODS - full_reads] * 3
    assert all(table.calls.count("update_i_am_alive") > 0 for table in tables)  # heartbeats went on
    assert [silo.status for silo in silos] == [SiloStatus.ACTIVE] * 3
    for silo in silos:
        await silo.stop()
