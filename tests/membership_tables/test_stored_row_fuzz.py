"""Hostile stored rows, fuzzed with hypothesis: a read parses a row or reports it, and never raises.

The parsers of every store are fed mutations of a valid row (any field replaced by a value of
any type, fields dropped, raw bytes), and a real SQLite table holds hand-written rows of any
column types (SQLite stores whatever it is given).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import example, given
from hypothesis import strategies as st

from membership_tables import InvalidEntryError, MalformedRow, MembershipTable, TableVersion, open_table
from membership_tables.codec import bytes_to_entry, entry_to_document
from membership_tables.sql.rows import RowParser, entry_to_values, key_of
from membership_tables.sql.schema import membership_table
from membership_tables.sql.statements import ROW_COLUMNS
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0

GOOD = make_entry(1001, suspect_times=((make_entry(1002).silo_address, T0),), properties={"k": "v"})

OFFSETS = st.timedeltas(min_value=-timedelta(hours=23), max_value=timedelta(hours=23)).map(timezone)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.datetimes(),
    st.datetimes(timezones=OFFSETS),
    st.sampled_from(["ACTIVE", "DEAD", "10.0.0.1:1@1", "2026-01-01T00:00:00+00:00", "0001-01-01T00:00:00+01:00"]),
)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)


def _good_document() -> dict[str, Any]:
    return entry_to_document(GOOD)


@given(
    changes=st.dictionaries(st.sampled_from(sorted(_good_document())), JSON_VALUES, max_size=4),
    dropped=st.sets(st.sampled_from(sorted(_good_document())), max_size=3),
)
def test_a_document_row_parses_or_is_invalid(changes: dict[str, Any], dropped: set[str]) -> None:
    """ZooKeeper, Consul (and DynamoDB, through the same document) rows: parsed, or InvalidEntryError."""
    document = {**_good_document(), **changes}
    for name in dropped:
        document.pop(name, None)
    try:
        entry = bytes_to_entry(json.dumps(document).encode())
    except InvalidEntryError:
        return
    assert entry.silo_address.port > 0


@given(st.binary(max_size=200))
def test_raw_bytes_parse_or_are_invalid(data: bytes) -> None:
    with pytest.raises(InvalidEntryError):
        bytes_to_entry(data)


def test_json_nested_too_deep_is_invalid() -> None:
    with pytest.raises(InvalidEntryError, match="not valid JSON"):
        bytes_to_entry(b"[" * 100_000)


def _row(entry: Any, etag: str, alive: datetime) -> tuple[object, ...]:
    values = {**key_of(entry.silo_address), **entry_to_values(entry), "etag": etag, "i_am_alive_time": alive}
    return tuple(values[name] for name in ROW_COLUMNS)


@given(
    st.lists(
        st.dictionaries(st.sampled_from(ROW_COLUMNS), SCALARS, max_size=3),
        min_size=1,
        max_size=4,
    )
)
@example(mutations=[{"i_am_alive_time": "0001-01-01T00:00:00+01:00"}])  # before datetime.min in UTC
def test_the_sql_row_parser_never_raises(mutations: list[dict[str, Any]]) -> None:
    """Each row is parsed or reported; reusing a parser gives what a fresh one gives."""
    parser = RowParser("cluster-a")
    rows = []
    for position, changes in enumerate(mutations):
        row = dict(zip(ROW_COLUMNS, _row(make_entry(2000 + position), f"e{position}", T0), strict=True))
        row.update(changes)
        rows.append(tuple(row[name] for name in ROW_COLUMNS))
    good = _row(GOOD, "good", T0)
    for version, batch in enumerate(([good], [good, *rows], [*rows, good], [good]), start=1):
        data = parser.table_data(TableVersion(version, "v"), batch, full=True)
        assert len(data.rows) + len(data.malformed) == len(batch)
        assert all(isinstance(row, MalformedRow) and row.reason for row in data.malformed)
        assert all(isinstance(etag, str) for _, etag in data.rows)
        assert data.get(GOOD.silo_address) == (GOOD, "good")
        assert data == RowParser("cluster-a").table_data(data.version, batch, full=True)


@pytest.fixture(scope="module")
def sqlite_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MembershipTable, sa.Engine]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('stored-row-fuzz') / 'membership.db'}"
    with open_table(url, "fuzz") as table:
        table.initialize()
        assert table.insert_row(GOOD, table.read_version().next())
        engine = sa.create_engine(url)
        yield table, engine
        engine.dispose()


COLUMN_NAMES = [column.name for column in membership_table.columns if column.name != "cluster_id"]


@given(st.dictionaries(st.sampled_from(COLUMN_NAMES), SCALARS.filter(lambda v: not isinstance(v, bool)), max_size=5))
def test_a_hand_written_sqlite_row_of_any_types_never_breaks_a_read(
    sqlite_table: tuple[MembershipTable, sa.Engine], changes: dict[str, Any]
) -> None:
    table, engine = sqlite_table
    stored = {"cluster_id": "fuzz", **key_of(make_entry(3000).silo_address), **entry_to_values(make_entry(3000))}
    stored.update({"etag": "hand", "i_am_alive_time": T0})
    stored.update(changes)
    stored["status"] = "ACTIVE"  # a CHECK constraint: any other value is refused by the database
    columns = membership_table.c
    good_key = sa.and_(*(columns[name] == value for name, value in key_of(GOOD.silo_address).items()))
    with engine.begin() as connection:
        connection.execute(sa.delete(membership_table).where(sa.not_(good_key)))
        try:
            connection.execute(sa.insert(membership_table).values(**stored))
        except (sa.exc.StatementError, OverflowError, TypeError, ValueError):
            return  # a value the driver cannot bind: nothing was written
    data = table.read_all()
    assert data.get(GOOD.silo_address) is not None
    assert len(data.rows) + len(data.malformed) == 2, data
    with open_table(str(engine.url), "fuzz") as fresh:  # nothing cached: parses every row afresh
        assert fresh.read_all() == data
