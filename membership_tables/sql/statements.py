"""The statements a silo runs often, built once with bind parameters.

Building a Core statement per call and deriving its cache key cost more than the database
round trip on SQLite and a large part of it elsewhere, so these are module constants,
executed with a dict of parameters: either by SQLAlchemy (``connection.execute``) or, on
the hot paths, by ``membership_tables.sql._dbapi`` as SQL compiled once per engine.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from membership_tables.model import SiloAddress, TableVersion
from membership_tables.sql.schema import WRITTEN_COLUMNS, UtcDateTime, membership_table, version_table

_members = membership_table.c
_versions = version_table.c

KEY_COLUMNS = ("cluster_id", "address", "port", "generation")
"""The primary key of a ``silo_membership`` row."""

_KEY_PARAMS = ("cluster", "silo_host", "silo_port", "silo_generation")
"""The parameters naming a row (an UPDATE cannot name a parameter after a column of its table)."""

ROW_COLUMNS = (*KEY_COLUMNS[1:], *(
    column.name for column in membership_table.columns
    if column.name not in (*KEY_COLUMNS, "etag", "i_am_alive_time", *WRITTEN_COLUMNS)
), "etag", "i_am_alive_time")  # fmt: skip
"""The columns a read selects, in this order: not the cluster id (the reader knows it), and
the heartbeat last, right after the etag. Not ``WRITTEN_COLUMNS``: they select rows
(``one_statement.READ_CHANGES``), they are no part of one."""

_KEY = sa.and_(*(_members[column] == sa.bindparam(name) for column, name in zip(KEY_COLUMNS, _KEY_PARAMS, strict=True)))
_OF_CLUSTER = _members.cluster_id == sa.bindparam("cluster")

SELECT_VERSION = sa.select(_versions.version, _versions.etag).where(_versions.cluster_id == sa.bindparam("cluster"))
SELECT_ROWS = sa.select(*(_members[name] for name in ROW_COLUMNS)).where(_OF_CLUSTER)
SELECT_ROW = sa.select(*(_members[name] for name in ROW_COLUMNS)).where(_KEY)

BUMP_VERSION = (
    sa.update(version_table)
    .where(_versions.cluster_id == sa.bindparam("cluster"), _versions.etag == sa.bindparam("based_on"))
    .values(version=sa.bindparam("new_version"), etag=sa.bindparam("new_etag"), updated_at=sa.bindparam("now"))
)
"""Lock the version row if it still carries the etag the caller read, and set the next version.

A write runs it last, right before COMMIT (``SqlMembershipTable``): the lock that serialises
every writer of a cluster is then held for one round trip, not for the whole write."""

INCREMENT_VERSION = (
    sa.update(version_table)
    .where(_versions.cluster_id == sa.bindparam("cluster"))
    .values(
        version=_versions.version + sa.literal_column("1"),
        etag=sa.bindparam("new_etag"),
        updated_at=sa.bindparam("now"),
    )
    .returning(_versions.version)
)
"""Move the version to the next, whatever it is, and say which it is (``insert_row_at_next_version``).

Unconditional: it waits for a writer holding the version row, then sees its commit, and wins
(PostgreSQL and SQLite; they have ``UPDATE ... RETURNING``)."""

LOCK_VERSION = SELECT_VERSION.with_for_update()
"""``INCREMENT_VERSION`` in two statements, for MySQL/MariaDB (no ``UPDATE ... RETURNING``): a
locking read (the latest committed version, whatever the isolation), then ``BUMP_VERSION``."""

_unlocked = version_table.alias("unlocked")
BUMP_UNLOCKED_VERSION = (
    sa.update(version_table)
    .where(
        _versions.cluster_id
        == sa.select(_unlocked.c.cluster_id)
        .where(_unlocked.c.cluster_id == sa.bindparam("cluster"), _unlocked.c.etag == sa.bindparam("based_on"))
        .with_for_update(skip_locked=True)
        .scalar_subquery(),
        _versions.etag == sa.bindparam("based_on"),
    )
    .values(version=sa.bindparam("new_version"), etag=sa.bindparam("new_etag"), updated_at=sa.bindparam("now"))
)
"""``BUMP_VERSION`` that does not wait: 0 rows (a lost race) if another writer holds the version
row (PostgreSQL: ``FOR UPDATE SKIP LOCKED``). The subquery locks the row only if it carries the
etag read: a writer whose version is stale must not hold, even for a moment, the row that the
writers with the current version need (their loss would follow no write: not linearizable).

A writer holds that row only between its last statement and COMMIT (a write at the next version
on PostgreSQL: and the statement that records the version in its own rows, sent with it), having
passed its row checks, so it commits: whoever waits for it waits to lose. In a 1,000-silo join
storm ~100 writers stood in that queue at any moment, and each commit woke them one after
another, the next winner among them."""

_CANONICAL = tuple(name for name in ROW_COLUMNS if name not in (*KEY_COLUMNS, "etag", "i_am_alive_time"))
_alive = sa.bindparam("alive", type_=UtcDateTime())


def row_update_condition(members: Any, suffix: str = "") -> sa.ColumnElement[bool]:
    """The row of ``members`` (a ``silo_membership`` table or alias's columns) that ``update_row_params``
    names, if it still carries the etag the caller read; every parameter but ``cluster`` ends in ``suffix``."""
    names = ("cluster", *(f"{name}{suffix}" for name in _KEY_PARAMS[1:]))
    return sa.and_(
        *(members[column] == sa.bindparam(name) for column, name in zip(KEY_COLUMNS, names, strict=True)),
        members.etag == sa.bindparam(f"based_on{suffix}"),
    )


def row_update_values(members: Any, suffix: str = "") -> dict[Any, Any]:
    """The new values of a row of ``members`` (see ``row_update_condition``), by column.

    ``written_version`` is the version the write sets (``at_version``), or NULL for a write at the
    next version, which learns its version only when it moves the version row and then records it
    (``record_written_version``, ``one_statement.mysql_bump_version_and_rows``) before it commits;
    ``written_etag`` is the row's new etag."""
    alive = sa.bindparam(f"alive{suffix}", type_=UtcDateTime())
    return {
        **{members[name]: sa.bindparam(f"new_{name}{suffix}") for name in _CANONICAL},
        members.etag: sa.bindparam(f"new_etag{suffix}"),
        # a heartbeat written since the caller read the row is kept, never moved back
        members.i_am_alive_time: sa.case((members.i_am_alive_time > alive, members.i_am_alive_time), else_=alive),
        members.written_version: sa.bindparam(f"at_version{suffix}", type_=sa.BigInteger()),
        members.written_etag: sa.bindparam(f"new_etag{suffix}"),
    }


UPDATE_ROW = sa.update(membership_table).where(row_update_condition(_members)).values(row_update_values(_members))
"""Rewrite a row if it still carries the etag the caller read."""

INSERT_ROW = sa.insert(membership_table).values(
    {
        **{column: sa.bindparam(param) for column, param in zip(KEY_COLUMNS, _KEY_PARAMS, strict=True)},
        **{name: sa.bindparam(f"new_{name}") for name in _CANONICAL},
        "etag": sa.bindparam("new_etag"),
        "i_am_alive_time": sa.bindparam("alive", type_=UtcDateTime()),
        "written_version": sa.bindparam("at_version", type_=sa.BigInteger()),
        "written_etag": sa.bindparam("new_etag"),
    }
)
"""Insert a row; a duplicate key (the row exists) raises the driver's ``IntegrityError``. Its
``written_version`` and ``written_etag`` as ``row_update_values`` sets them."""


@functools.cache
def record_written_version(rows: int) -> sa.Update:
    """Set ``written_version`` of ``rows`` rows just written at the next version to the version
    of their transaction, read from the version row that it moved (so it holds the row's lock).

    Each row is named by its key and its new etag, as in ``one_statement.row_params(index, ...)``
    of ``insert_row_params`` or ``update_row_params``. Run in the write's transaction, after the
    version row's UPDATE and before COMMIT: nothing else can move the version in between, and no
    reader sees the row before it (PostgreSQL: the second statement of the write,
    ``one_statement.postgres_at_next_version``; SQLite: after ``INCREMENT_VERSION``)."""
    version = sa.select(_versions.version).where(_versions.cluster_id == sa.bindparam("cluster")).scalar_subquery()
    written = [written_row(_members, index) for index in range(rows)]
    return sa.update(membership_table).where(_OF_CLUSTER, sa.or_(*written)).values(written_version=version)


def written_row(members: Any, index: int) -> sa.ColumnElement[bool]:
    """The ``index``-th row a write just wrote in ``members`` (the table or an alias), named by its
    key and its new etag (``one_statement.row_params(index, ...)``), its cluster aside."""
    return sa.and_(
        *(
            members[column] == sa.bindparam(f"{name}_{index}")
            for column, name in zip(KEY_COLUMNS[1:], _KEY_PARAMS[1:], strict=True)
        ),
        members.etag == sa.bindparam(f"new_etag_{index}"),
    )


UPDATE_I_AM_ALIVE = (
    sa.update(membership_table).where(_KEY, _members.i_am_alive_time < _alive).values(i_am_alive_time=_alive)
)
"""The blind heartbeat write: only ever moves the heartbeat forward."""


def cluster_params(cluster_id: str) -> dict[str, Any]:
    """The parameters of ``SELECT_VERSION`` and ``SELECT_ROWS``."""
    return {"cluster": cluster_id}


def key_params(cluster_id: str, silo_address: SiloAddress) -> dict[str, Any]:
    """The parameters of ``_KEY``: the primary key of ``silo_address``'s row."""
    return {
        "cluster": cluster_id,
        "silo_host": silo_address.host,
        "silo_port": silo_address.port,
        "silo_generation": silo_address.generation,
    }


def increment_params(cluster_id: str, new_etag: str, now: datetime) -> dict[str, Any]:
    """The parameters of ``INCREMENT_VERSION``."""
    return {"cluster": cluster_id, "new_etag": new_etag, "now": now}


def bump_params(cluster_id: str, version: TableVersion, new_etag: str, now: datetime) -> dict[str, Any]:
    """The parameters of ``BUMP_VERSION`` for a write that sets ``version`` (read etag, new number)."""
    return {
        "cluster": cluster_id,
        "based_on": version.etag,
        "new_version": version.version,
        "new_etag": new_etag,
        "now": now,
    }


_NEW_PARAMS = tuple((name, f"new_{name}") for name in _CANONICAL)
"""Each canonical column and its parameter in ``INSERT_ROW`` and ``UPDATE_ROW``, named once."""


def insert_row_params(
    cluster_id: str, silo_address: SiloAddress, values: dict[str, Any], new_etag: str, at_version: int | None
) -> dict[str, Any]:
    """The parameters of ``INSERT_ROW``; ``values`` is ``rows.entry_to_values``; ``at_version``: the
    version the write sets, ``None`` for a write at the next version (see ``row_update_values``).

    Built in one dict, in place: a conditional write on SQLite takes ~20 us in the driver, so
    every intermediate dict shows in ``update_row``'s latency (``benchmarks.tables``).
    """
    params = key_params(cluster_id, silo_address)
    for name, param in _NEW_PARAMS:
        params[param] = values[name]
    params["new_etag"] = new_etag
    params["alive"] = values["i_am_alive_time"]
    params["at_version"] = at_version
    return params


def update_row_params(
    cluster_id: str,
    silo_address: SiloAddress,
    values: dict[str, Any],
    based_on: str,
    new_etag: str,
    at_version: int | None,
) -> dict[str, Any]:
    """The parameters of ``UPDATE_ROW``; ``values`` is ``rows.entry_to_values``; ``at_version`` as
    for ``insert_row_params``."""
    params = insert_row_params(cluster_id, silo_address, values, new_etag, at_version)
    params["based_on"] = based_on
    return params
