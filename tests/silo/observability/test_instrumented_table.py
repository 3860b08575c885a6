"""``InstrumentedTable`` forwards the ``*_with_etags`` writes and counts their lost races."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from membership_tables import CommittedWrite, MembershipTable, open_table
from membership_tables.memory import InMemoryMembershipTable
from membership_tables.testing import make_entry
from silo.observability.prometheus import InstrumentedTable, SiloMetrics


@pytest.fixture
def inner() -> Iterator[MembershipTable]:
    name = f"instrumented-{uuid.uuid4().hex}"
    table = open_table(f"memory://{name}", "c")
    table.initialize()
    yield table
    InMemoryMembershipTable.reset(name)


def sample(metrics: SiloMetrics, name: str, operation: str) -> float:
    value = metrics.registry.get_sample_value(name, {"backend": "memory", "operation": operation})
    return 0.0 if value is None else value


def test_the_with_etags_writes_return_the_inner_result_and_count_lost_races(inner: MembershipTable) -> None:
    metrics = SiloMetrics("memory")
    table = InstrumentedTable(inner, metrics)
    entry = make_entry()
    start = inner.read_all().version

    inserted = table.insert_row_with_etags(entry, start.next())
    assert isinstance(inserted, CommittedWrite)
    read = inner.read_all()
    assert (inserted.version, inserted.rows) == (read.version, read.rows)
    assert table.insert_row_with_etags(entry, read.version.next()) is None, "the row exists"

    updated = table.update_rows_with_etags([(entry, inserted.rows[0][1])], inserted.version.next())
    assert updated is not None
    assert updated.version == inner.read_all().version
    assert table.update_rows_with_etags([(entry, "stale")], updated.version.next()) is None

    for operation in ("insert_row_with_etags", "update_rows_with_etags"):
        assert sample(metrics, "silo_table_operations_total", operation) == 2
        assert sample(metrics, "silo_table_lost_races_total", operation) == 1
        assert sample(metrics, "silo_table_errors_total", operation) == 0


def test_an_insert_at_the_next_version_returns_the_inner_result_and_counts_a_refusal(inner: MembershipTable) -> None:
    metrics = SiloMetrics("memory")
    table = InstrumentedTable(inner, metrics)
    entry = make_entry()
    inserted = table.insert_row_at_next_version(entry)
    assert isinstance(inserted, CommittedWrite)
    read = inner.read_all()
    assert (inserted.version, inserted.rows) == (read.version, read.rows)
    assert table.insert_row_at_next_version(entry) is None, "the row exists"
    assert sample(metrics, "silo_table_operations_total", "insert_row_at_next_version") == 2
    assert sample(metrics, "silo_table_lost_races_total", "insert_row_at_next_version") == 1


def test_a_heartbeat_returning_none_is_no_lost_race(inner: MembershipTable) -> None:
    metrics = SiloMetrics("memory")
    table = InstrumentedTable(inner, metrics)
    entry = make_entry()
    assert table.insert_row(entry, inner.read_all().version.next())
    table.update_i_am_alive(entry.silo_address, entry.i_am_alive_time)
    assert sample(metrics, "silo_table_operations_total", "update_i_am_alive") == 1
    assert sample(metrics, "silo_table_lost_races_total", "update_i_am_alive") == 0
    assert sample(metrics, "silo_table_lost_races_total", "insert_row") == 0
