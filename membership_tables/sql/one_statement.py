"""Reads and conditional writes in one statement each, so that a call costs one or two round trips.

A store call on a lossy or distant link costs its round trips (issue: a vote on PostgreSQL with
30% loss on the table's link took 1.7 s for a read and a write of a handful of round trips
each). Run as a transaction of several statements, a PostgreSQL read cost BEGIN, two SELECTs
and COMMIT, and a vote's write BEGIN, an UPDATE per row, the version's UPDATE and COMMIT. Here:

* Reads (``READ_ALL``, ``READ_ROW``, ``read_rows``, ``READ_CHANGES``) select the version row and the rows in one
  statement (the version row left-joined with its rows): one statement reads one snapshot on
  every database, so it needs no transaction around it. On PostgreSQL it runs in autocommit: one
  round trip.
* ``postgres_update_rows`` (``postgres_insert_row`` likewise) writes the version row and every
  row in one statement: data-modifying CTEs, the version's UPDATE conditioned on every row's
  (so only a writer that passed its row checks ever locks the version row: ``_bumped``), and a
  final check that divides by zero unless the version moved, which makes PostgreSQL roll the
  whole statement back: a lost race leaves nothing behind (``LOST_RACE_SQLSTATE``). In
  autocommit: one round trip, and the version row's lock is held for the statement only, never
  across a round trip. A write at the next version is that statement and a second one that
  records the version in the rows, sent together (``postgres_at_next_version``): still one round
  trip, and the lock is held for the second statement too, never across a round trip.
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
from sqlalchemy.sql.selectable import NamedFromClause

from membership_tables.sql.schema import membership_table, version_table
from membership_tables.sql.statements import (
    KEY_COLUMNS,
    ROW_COLUMNS,
    record_written_version,
    row_update_condition,
    row_update_values,
    written_row,
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
    ("written_version", "at_version_0"),
    ("written_etag", "new_etag_0"),
)
"""The columns ``postgres_insert_row`` writes and their parameters (``row_params(0, insert_row_params(...))``)."""

READ_ALL = (
    sa.select(_versions.version, _versions.etag, *(_members[name] for name in ROW_COLUMNS))
    .select_from(version_table.outerjoin(membership_table, _members.cluster_id == _versions.cluster_id))
    .where(_versions.cluster_id == _CLUSTER)
    .order_by(*(_members[name] for name in KEY_COLUMNS[1:]))
)
"""The version and every row of a cluster (``statements.cluster_params``); no line if no version row.

In key order: ``rows.RowParser`` compares a full read with the last one position by position (in
C) and keeps the entries of rows that did not change but for their heartbeat. PostgreSQL returns
a table's rows in the order they lie in its heap, and every heartbeat writes a new version of its
row elsewhere, so unordered reads of a 2,000-row table seldom matched by position: each one fell
back to a lookup by the whole row and a sort of the addresses in Python: over a quarter of a silo
host's samples in a 2,000-silo join. The sort on the server is of the primary key's columns."""

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

READ_ROWS_MAX = 100
"""Rows one ``read_rows`` statement selects at most (its condition has three parameters per row)."""


@functools.lru_cache(maxsize=READ_ROWS_MAX)
def read_rows(count: int) -> sa.Select[Any]:
    """The version and the rows of ``count`` silos: ``READ_ROW`` for several keys (the parameters:
    ``row_params(i, statements.key_params(...))`` of the ``i``-th silo)."""
    keys = sa.or_(
        *(
            sa.and_(
                *(
                    _members[column] == sa.bindparam(f"{name}_{index}")
                    for column, name in zip(KEY_COLUMNS[1:], _KEY_PARAMS, strict=True)
                )
            )
            for index in range(count)
        )
    )
    return (
        sa.select(_versions.version, _versions.etag, *(_members[name] for name in ROW_COLUMNS))
        .select_from(
            version_table.outerjoin(membership_table, sa.and_(_members.cluster_id == _versions.cluster_id, keys))
        )
        .where(_versions.cluster_id == _CLUSTER)
    )


_since: sa.BindParameter[int] = sa.bindparam("since", type_=sa.BigInteger())
CHANGED_SINCE = sa.or_(
    _members.written_version.is_(None),
    _members.written_etag.is_(None),
    _members.written_etag != _members.etag,
    _members.written_version > _since,
)
"""A row that a versioned write changed after version ``since``, or whose version is unknown: a
row no write of this release wrote (NULL), or one whose etag is not the one its last recorded
write left, so a writer since (a silo of release 0.1.0, which knows neither column; a person
following docs/sql.md) changed it without saying at which version."""

READ_CHANGES = (
    sa.select(_versions.version, _versions.etag, *(_members[name] for name in ROW_COLUMNS))
    .select_from(
        version_table.outerjoin(membership_table, sa.and_(_members.cluster_id == _versions.cluster_id, CHANGED_SINCE))
    )
    .where(_versions.cluster_id == _CLUSTER)
)
"""``READ_ALL`` of the rows ``CHANGED_SINCE`` (``statements.cluster_params`` and ``since``)."""


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
def postgres_at_next_version(rows: int, *, insert: bool) -> tuple[sa.Select[Any], sa.Update]:
    """A write at the next version on PostgreSQL: ``postgres_insert_row(True)`` (``insert``, one
    row) or ``postgres_update_rows(rows, True)``, which leave ``written_version`` NULL, and then
    ``statements.record_written_version(rows)``, sent as one request: one round trip.

    The version is known only once the version row's UPDATE has run, after the rows' (which it is
    conditioned on), and a statement cannot write a row twice; so the rows' ``written_version`` is
    set by a second statement. PostgreSQL runs the statements of one simple-protocol request as
    one implicit transaction, one after the other without waiting for the client: the second sees
    the version the first set (it holds the version row's lock until the transaction ends), and
    if the first fails (a lost race) the second is skipped and the whole request rolled back. So
    the first keeps every property above (only a writer that passed its row checks locks the
    version row, and waits for it and wins), and the lock is held for one more statement on a
    row this writer holds already, never across a round trip. The parameters are bound on the
    client (``_dbapi.Transaction.execute_script``): the extended protocol takes one statement.
    """
    if insert and rows != 1:
        raise ValueError(f"an insert writes one row, not {rows}")
    statement = postgres_insert_row(True) if insert else postgres_update_rows(rows, True)
    return statement, record_written_version(rows)


def _mysql_version_bump(rows: int) -> tuple[list[NamedFromClause], dict[Any, Any], list[sa.ColumnElement[bool]]]:
    """The parts of a MySQL multi-table UPDATE of the version row (``bump_params``) and ``rows``
    rows: an alias per row, the version's new values and its condition, for the rows' to join."""
    values: dict[Any, Any] = {
        _versions.version: sa.bindparam("new_version"),
        _versions.etag: sa.bindparam("new_etag"),
        _versions.updated_at: sa.bindparam("now"),
    }
    conditions = [_versions.cluster_id == _CLUSTER, _versions.etag == sa.bindparam("based_on")]
    return [membership_table.alias(f"row_{index}") for index in range(rows)], values, conditions


@functools.cache
def mysql_bump_version_and_rows(rows: int) -> sa.Update:
    """``statements.BUMP_VERSION`` (``bump_params``) that also sets ``written_version`` to the new
    version on ``rows`` rows just written at the next version (``row_params``: their key and new
    etag), in one multi-table UPDATE: a write at the next version on MySQL/MariaDB, after
    ``LOCK_VERSION`` told it which version that is. Its row count is ``rows + 1``."""
    aliases, values, conditions = _mysql_version_bump(rows)
    for index, alias in enumerate(aliases):
        values[alias.c.written_version] = sa.bindparam("new_version")
        conditions.extend((alias.c.cluster_id == _CLUSTER, written_row(alias.c, index)))
    return sa.update(version_table).where(*conditions).values(values)


@functools.cache
def mysql_update_rows(rows: int) -> sa.Update:
    """Update ``rows`` rows (parameters of ``row_params``) and bump the version (``bump_params``) in one
    statement, all or nothing: its row count is ``rows + 1`` if every condition held, else 0."""
    if not 0 < rows <= ONE_STATEMENT_MAX_ROWS:
        raise ValueError(f"mysql_update_rows updates 1 to {ONE_STATEMENT_MAX_ROWS} rows, not {rows}")
    aliases, values, conditions = _mysql_version_bump(rows)
    for index, alias in enumerate(aliases):
        values.update(row_update_values(alias.c, f"_{index}"))
        conditions.append(row_update_condition(alias.c, f"_{index}"))
    return sa.update(version_table).where(*conditions).values(values)


def row_params(index: int, params: dict[str, Any]) -> dict[str, Any]:
    """``statements.update_row_params`` of the ``index``-th row of one statement (``cluster`` is shared)."""
    return {name if name == "cluster" else f"{name}_{index}": value for name, value in params.items()}
