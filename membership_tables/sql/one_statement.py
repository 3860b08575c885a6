"""Reads and conditional writes in one statement each, so that a call costs one or two round trips.

A store call on a lossy or distant link costs its round trips (issue: a vote on PostgreSQL with
30% loss on the table's link took 1.7 s for a read and a write of a handful of round trips
each). Run as a transaction of several statements, a PostgreSQL read cost BEGIN, two SELECTs
and COMMIT, and a vote's write BEGIN, an UPDATE per row, the version's UPDATE and COMMIT. Here:

* Reads (``READ_ALL``, ``READ_ROW``) select the version row and the rows in one statement (the
  version row left-joined with its rows): one statement reads one snapshot on every database,
  so it needs no transaction around it. On PostgreSQL it runs in autocommit: one round trip.
* ``postgres_update_rows`` (``postgres_insert_row`` likewise) writes the version row and every
  row in one statement: data-modifying CTEs, the version's UPDATE conditioned on every row's
  (so only a writer that passed its row checks ever locks the version row: ``_bumped``), and a
  final check that divides by zero unless the version moved, which makes PostgreSQL roll the
  whole statement back: a lost race leaves nothing behind (``LOST_RACE_SQLSTATE``). In
  autocommit: one round trip, and the version row's lock is held for the statement only, never
  across a round trip.
* ``mysql_update_rows`` is a multi-table UPDATE of the version row and every row (MySQL and
  MariaDB have no data-modifying CTEs and no UPDATE ... RETURNING): the join has one row if every
  condition holds and none otherwise, so it changes all or nothing; then COMMIT: two round trips.

The updates take at most ``ONE_STATEMENT_MAX_ROWS`` rows (MySQL joins at most 61 tables, and a statement
is compiled once per batch size); larger batches take a statement per row, in one transaction.

SQLite runs in the process: it keeps the transactions of several statements.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from membership_tables.sql.schema import membership_table, version_table
from membership_tables.sql.statements import (
    KEY_COLUMNS,
    ROW_COLUMNS,
    row_update_condition,
    row_update_values,
)

_members = membership_table.c
_versions = version_table.c

LOST_RACE_SQLSTATE = "22012"
"""division_by_zero: what ``postgres_update_rows`` raises when the version or a row did not match."""

ONE_STATEMENT_MAX_ROWS = 60
"""Rows of one ``postgres_update_rows`` or ``mysql_update_rows``: MySQL joins at most 61 tables in
one statement (the version row's is one)."""

_VERSION_COLUMNS = 2
"""The columns of ``READ_ALL`` and ``READ_ROW`` before the row's (``ROW_COLUMNS``): version, etag."""

_CLUSTER: sa.BindParameter[str] = sa.bindparam("cluster")
_KEY_PARAMS = ("silo_host", "silo_port", "silo_generation")
_INSERTED = (
    ("cluster_id", "cluster"),
    *((column, f"{name}_0") for column, name in zip(KEY_COLUMNS[1:], _KEY_PARAMS, strict=True)),
    *((name, f"new_{name}_0") for name in ROW_COLUMNS if name not in (*KEY_COLUMNS, "etag", "i_am_alive_time")),
    ("etag", "new_etag_0"),
    ("i_am_alive_time", "alive_0"),
)
"""The columns ``postgres_insert_row`` writes and their parameters (``row_params(0, insert_row_params(...))``)."""

READ_ALL = (
    sa.select(_versions.version, _versions.etag, *(_members[name] for name in ROW_COLUMNS))
    .select_from(version_table.outerjoin(membership_table, _members.cluster_id == _versions.cluster_id))
    .where(_versions.cluster_id == _CLUSTER)
)
"""The version and every row of a cluster (``statements.cluster_params``); no line if no version row."""

READ_ROW = (
    sa.select(_versions.version, _versions.etag, *(_members[name] for name in ROW_COLUMNS))
    .select_from(
        version_table.outerjoin(
            membership_table,
            sa.and_(
                _members.cluster_id == _versions.cluster_id,
                *(
                    _members[column] == sa.bindparam(name)
                    for column, name in zip(KEY_COLUMNS[1:], _KEY_PARAMS, strict=True)
                ),
            ),
        )
    )
    .where(_versions.cluster_id == _CLUSTER)
)
"""The version and one row (``statements.key_params``)."""


def split_read(lines: list[Any]) -> tuple[Any, list[Any]]:
    """The version row (``None`` if there is none) and the member rows of a ``READ_ALL`` or ``READ_ROW``."""
    if not lines:
        return None, []
    version = tuple(lines[0][:_VERSION_COLUMNS])
    return version, [line[_VERSION_COLUMNS:] for line in lines if line[_VERSION_COLUMNS] is not None]


def _all_written(written: Sequence[sa.CTE], rows: int) -> sa.ColumnElement[bool]:
    """True once the row statements ``written`` (CTEs returning ``etag``) changed ``rows`` rows."""
    count = sa.select(sa.func.count()).select_from(sa.union_all(*(sa.select(cte.c.etag) for cte in written)).subquery())
    return count.scalar_subquery() == sa.literal_column(str(rows))


def _bumped(increment: bool, written: Sequence[sa.CTE], rows: int) -> sa.CTE:
    """The version's UPDATE as a CTE returning the version written (one line, none if it did not happen).

    It happens only if every row statement of ``written`` changed its row: they run first (this
    reads them), so the version row is locked only by a writer that passed its row checks and
    will commit. A writer that finds it locked loses at once (``statements.BUMP_UNLOCKED_VERSION``: its loss
    follows the holder's write); one locking it and then failing would make such a loss follow
    no write at all (not linearizable). With ``increment`` it waits for the holder instead
    (``statements.INCREMENT_VERSION``).
    """
    all_written = _all_written(written, rows)
    if increment:
        return (
            sa.update(version_table)
            .where(_versions.cluster_id == _CLUSTER, all_written)
            .values(
                version=_versions.version + sa.literal_column("1"),
                etag=sa.bindparam("new_etag"),
                updated_at=sa.bindparam("now"),
            )
            .returning(_versions.version)
            .cte("bumped")
        )
    unlocked = version_table.alias("unlocked")
    based_on: sa.BindParameter[str] = sa.bindparam("based_on")
    holder = (
        sa.select(unlocked.c.cluster_id)
        .where(unlocked.c.cluster_id == _CLUSTER, unlocked.c.etag == based_on, all_written)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        sa.update(version_table)
        .where(_versions.cluster_id == holder, _versions.etag == based_on)
        .values(version=sa.bindparam("new_version"), etag=sa.bindparam("new_etag"), updated_at=sa.bindparam("now"))
        .returning(_versions.version)
        .cte("bumped")
    )


def _checked(bump: sa.CTE) -> sa.Select[Any]:
    """The final SELECT: the version written, and 1 divided by zero unless ``bump`` happened (which
    it does only if every row was written)."""
    bumped = sa.select(sa.func.count()).select_from(bump).scalar_subquery()
    check = sa.literal_column("1", sa.Integer).op("/")(sa.sql.expression.Grouping(bumped))
    return sa.select(sa.select(bump.c.version).scalar_subquery(), check)


@functools.cache
def postgres_update_rows(rows: int, increment: bool) -> sa.Select[Any]:
    """Update ``rows`` rows (parameters of ``row_params``) and bump the version in one statement.

    The version is bumped as ``statements.BUMP_UNLOCKED_VERSION`` does (parameters of
    ``statements.bump_params``), or with ``increment`` as ``INCREMENT_VERSION`` (of
    ``increment_params``), once every row was updated (``_bumped``). Returns one line, the
    version written; raises division_by_zero (``LOST_RACE_SQLSTATE``), changing nothing, if the
    version or any row did not match.
    """
    updated = [
        sa.update(membership_table)
        .where(row_update_condition(_members, f"_{index}"))
        .values(row_update_values(_members, f"_{index}"))
        .returning(_members.etag)
        .cte(f"row_{index}")
        for index in range(rows)
    ]
    return _checked(_bumped(increment, updated, rows))


@functools.cache
def postgres_insert_row(increment: bool) -> sa.Select[Any]:
    """Insert a row (``statements.insert_row_params`` through ``row_params(0, ...)``) and bump the
    version (as ``postgres_update_rows`` does) in one statement; the same line, or division_by_zero
    if the row exists (``ON CONFLICT DO NOTHING``: then the version is left alone) or the version
    did not match."""
    columns = [column for column, _ in _INSERTED]
    source = sa.select(*(sa.bindparam(name, type_=membership_table.c[column].type) for column, name in _INSERTED))
    inserted = (
        postgresql.insert(membership_table)
        .from_select(columns, source)
        .on_conflict_do_nothing()
        .returning(_members.etag)
        .cte("inserted")
    )
    return _checked(_bumped(increment, [inserted], 1))


@functools.cache
def mysql_update_rows(rows: int) -> sa.Update:
    """Update ``rows`` rows (parameters of ``row_params``) and bump the version (``bump_params``) in one
    statement, all or nothing: its row count is ``rows + 1`` if every condition held, else 0."""
    if not 0 < rows <= ONE_STATEMENT_MAX_ROWS:
        raise ValueError(f"mysql_update_rows updates 1 to {ONE_STATEMENT_MAX_ROWS} rows, not {rows}")
    aliases = [membership_table.alias(f"row_{index}") for index in range(rows)]
    values: dict[Any, Any] = {
        _versions.version: sa.bindparam("new_version"),
        _versions.etag: sa.bindparam("new_etag"),
        _versions.updated_at: sa.bindparam("now"),
    }
    conditions = [_versions.cluster_id == _CLUSTER, _versions.etag == sa.bindparam("based_on")]
    for index, alias in enumerate(aliases):
        values.update(row_update_values(alias.c, f"_{index}"))
        conditions.append(row_update_condition(alias.c, f"_{index}"))
    return sa.update(version_table).where(*conditions).values(values)


def row_params(index: int, params: dict[str, Any]) -> dict[str, Any]:
    """``statements.update_row_params`` of the ``index``-th row of one statement (``cluster`` is shared)."""
    return {name if name == "cluster" else f"{name}_{index}": value for name, value in params.items()}
