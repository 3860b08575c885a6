"""The one-statement reads and writes of the SQL backend: their bounds and how a read is split."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from membership_tables.sql.one_statement import (
    ONE_STATEMENT_MAX_ROWS,
    READ_CHANGES,
    mysql_bump_version_and_rows,
    mysql_update_rows,
    postgres_at_next_version,
    postgres_insert_row,
    postgres_update_rows,
    row_params,
    split_read,
)
from membership_tables.sql.schema import WRITTEN_COLUMNS
from membership_tables.sql.statements import INSERT_ROW, ROW_COLUMNS, UPDATE_I_AM_ALIVE, UPDATE_ROW

POSTGRES = sa.create_engine("postgresql+psycopg://db/x").dialect
MYSQL = sa.create_engine("mysql+pymysql://db/x").dialect


def test_a_read_without_a_version_row_has_neither_version_nor_rows() -> None:
    assert split_read([]) == (None, [])


def test_a_read_splits_the_version_from_the_rows_and_drops_the_empty_join() -> None:
    assert split_read([(3, "v3", None, None)]) == ((3, "v3"), [])
    assert split_read([(3, "v3", "10.0.0.1", 1), (3, "v3", "10.0.0.2", 2)]) == (
        (3, "v3"),
        [("10.0.0.1", 1), ("10.0.0.2", 2)],
    )


@pytest.mark.parametrize("rows", [0, ONE_STATEMENT_MAX_ROWS + 1])
def test_mysql_joins_at_most_sixty_rows(rows: int) -> None:
    with pytest.raises(ValueError, match=f"1 to {ONE_STATEMENT_MAX_ROWS} rows"):
        mysql_update_rows(rows)


def test_each_row_of_one_statement_has_its_own_parameters_but_the_cluster() -> None:
    assert row_params(2, {"cluster": "c", "based_on": "e", "silo_port": 1}) == {
        "cluster": "c",
        "based_on_2": "e",
        "silo_port_2": 1,
    }
    names = set(
        postgres_update_rows(2, False).compile(dialect=sa.create_engine("postgresql+psycopg://db/x").dialect).binds
    )
    assert {"cluster", "based_on", "based_on_0", "based_on_1", "new_etag_1"} <= names
    assert "based_on_2" not in names
    joined = set(mysql_update_rows(2).compile(dialect=sa.create_engine("mysql+pymysql://db/x").dialect).binds)
    assert {"cluster", "based_on", "based_on_0", "based_on_1"} <= joined


def binds(statement: sa.ClauseElement, dialect: sa.Dialect = POSTGRES) -> set[str]:
    return set(statement.compile(dialect=dialect).binds)


def test_reads_return_no_written_column_and_heartbeats_write_none() -> None:
    assert not set(WRITTEN_COLUMNS) & set(ROW_COLUMNS)
    assert ROW_COLUMNS[-2:] == ("etag", "i_am_alive_time")
    assert "written" not in str(UPDATE_I_AM_ALIVE.compile(dialect=POSTGRES))
    assert binds(READ_CHANGES) == {"cluster", "since"}


def test_every_row_write_sets_the_written_columns_from_its_own_parameters() -> None:
    for statement in (INSERT_ROW, UPDATE_ROW):
        sql = str(statement.compile(dialect=POSTGRES))
        assert "written_version" in sql
        assert "written_etag" in sql
        assert "at_version" in binds(statement)
    assert "at_version_0" in binds(postgres_insert_row(False))
    assert {"at_version_0", "at_version_1"} <= binds(postgres_update_rows(2, False))
    assert {"at_version_0", "at_version_1"} <= binds(mysql_update_rows(2), MYSQL)


def test_a_write_at_the_next_version_records_its_version_in_the_same_request() -> None:
    first, record = postgres_at_next_version(1, insert=True)
    assert first is postgres_insert_row(True)
    assert "written_version" in str(record.compile(dialect=POSTGRES))
    assert binds(record) == {"cluster", "silo_host_0", "silo_port_0", "silo_generation_0", "new_etag_0"}
    assert postgres_at_next_version(1, insert=False)[0] is postgres_update_rows(1, True)
    with pytest.raises(ValueError, match="an insert writes one row"):
        postgres_at_next_version(2, insert=True)
    bump = mysql_bump_version_and_rows(1)
    assert {"new_version", "based_on", "new_etag", "new_etag_0", "silo_host_0"} <= binds(bump, MYSQL)
