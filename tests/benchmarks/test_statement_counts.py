"""How ``benchmarks.propagation.statement_counts`` tells the table's statements apart (``counted_as``),
on the statements the SQL table sends, as ``pg_stat_statements`` shows them."""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg

from benchmarks.propagation import counted_as
from membership_tables.sql.one_statement import READ_ALL, READ_CHANGES, READ_ROW


def as_postgres_shows_it(statement: sa.Executable) -> str:
    """``statement`` compiled for psycopg, its named parameters numbered as the server sees them."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", numbered, str(statement.compile(dialect=psycopg.dialect())))


def test_a_full_read_a_row_read_and_a_read_of_changes_are_counted_apart() -> None:
    assert counted_as(as_postgres_shows_it(READ_ALL)) == ("all_reads", "full_reads")
    assert counted_as(as_postgres_shows_it(READ_ROW)) == ("all_reads",)
    assert counted_as(as_postgres_shows_it(READ_CHANGES)) == ("all_reads", "changes_reads")
    heartbeat = "UPDATE silo_membership SET i_am_alive_time=$1::TIMESTAMP WITH TIME ZONE WHERE cluster_id = $2"
    assert counted_as(heartbeat) == ("heartbeats",)
