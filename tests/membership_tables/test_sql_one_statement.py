"""The one-statement reads and writes of the SQL backend: their bounds and how a read is split."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from membership_tables.sql.one_statement import (
    ONE_STATEMENT_MAX_ROWS,
    mysql_update_rows,
    postgres_update_rows,
    row_params,
    split_read,
)


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
