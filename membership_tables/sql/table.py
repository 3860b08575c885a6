"""``SqlMembershipTable``: the membership contract on SQLite, PostgreSQL and MySQL/MariaDB.

Every canonical write is atomic and conditional: each member row is inserted or updated (each
update conditioned on the row's etag) together with a conditional UPDATE of the cluster's
version row (``WHERE etag = <the version the caller read>``), whose row lock serialises the
writers of one cluster. On PostgreSQL and MySQL a write is one statement
(``one_statement``: one round trip on PostgreSQL, which runs it in autocommit, and two on
MySQL with its COMMIT), on PostgreSQL losing at once when another writer holds the version
row (``BUMP_UNLOCKED_VERSION``). SQLite, and MySQL batches over ``ONE_STATEMENT_MAX_ROWS``,
run a transaction of a statement per row and the version's UPDATE last, so its lock is held
for one step: taken first, it was held across every statement of the write, and in a
1,000-silo join storm on PostgreSQL (writers in busy processes) the version UPDATE waited
380 ms on average for it. Any failed precondition rolls the whole write back, so a write that
returns ``False`` changed nothing. Deadlocks and lock timeouts roll back too and are retried a
few times; a refused login or privilege becomes ``AccessDeniedError``; whatever else the driver
raises becomes ``TableUnavailableError``. Reads are one statement too (the version row joined
with the rows: one round trip on PostgreSQL).

Every versioned write also records in each row it writes the version it set and the etag it
left (``written_version``, ``written_etag``), so that ``read_changes(since)`` reads only the rows
written after ``since`` (and those whose version is unknown: ``one_statement.CHANGED_SINCE``). A
write conditioned on the version etag knows that version up front and writes it with the row. A
write at the next version learns it only from the version's UPDATE, which comes last; it writes
the row with NULL and sets the column before COMMIT, in the same transaction: on SQLite a
statement more (``statements.record_written_version``), on MySQL within the version's UPDATE
(``one_statement.mysql_bump_version_and_rows``), on PostgreSQL a second statement in the same
request (``one_statement.postgres_at_next_version``). No round trip is added to any write.

``initialize()`` reads the catalog first and runs DDL only when a table is missing, or when
``silo_membership`` lacks the columns above (a table of release 0.1.0: it adds them), so silos
can run as a role with nothing but SELECT/INSERT/UPDATE/DELETE on the two tables
(``membership_tables.sql.grants``); ``silo table init URI`` creates or upgrades the schema once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from membership_tables.codec import new_etag
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import TableUnavailableError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    TableVersion,
    ensure_utc,
    validate_cluster_id,
)
from membership_tables.sql import dialects
from membership_tables.sql._dbapi import Transaction
from membership_tables.sql.engine import SqlOptions, create_engine, parse_url
from membership_tables.sql.maintenance import SqlMaintenance
from membership_tables.sql.one_statement import (
    LOST_RACE_SQLSTATE,
    ONE_STATEMENT_MAX_ROWS,
    READ_ALL,
    READ_CHANGES,
    READ_ROW,
    READ_ROWS_MAX,
    mysql_bump_version_and_rows,
    mysql_update_rows,
    postgres_at_next_version,
    postgres_insert_row,
    postgres_update_rows,
    read_rows,
    row_params,
    split_read,
)
from membership_tables.sql.rows import RowParser, entry_to_values
from membership_tables.sql.statements import (
    BUMP_UNLOCKED_VERSION,
    BUMP_VERSION,
    INCREMENT_VERSION,
    INSERT_ROW,
    LOCK_VERSION,
    SELECT_VERSION,
    UPDATE_I_AM_ALIVE,
    UPDATE_ROW,
    bump_params,
    cluster_params,
    increment_params,
    insert_row_params,
    key_params,
    record_written_version,
    update_row_params,
)
from membership_tables.sql.transactions import LostRaceError, SqlTransactions


class SqlMembershipTable(SqlMaintenance, MembershipTable):
    """A cluster's membership in the ``silo_membership`` tables of a SQL database."""

    max_rows_per_update = 1_000
    """``update_rows`` holds the version row's lock while it updates every row, which blocks every
    other writer of the cluster: the bound keeps that wait short."""

    read_only_sessions = True

    reads_changes = True
    """``read_changes`` reads the rows whose ``written_version`` is after the version asked for, or
    unknown (``one_statement.CHANGED_SINCE``)."""

    def __init__(self, engine: sa.Engine, cluster_id: str, *, read_only: bool = False) -> None:
        MembershipTable.__init__(self, validate_cluster_id(cluster_id))
        SqlTransactions.__init__(self, engine, read_only=read_only)
        self._bump = BUMP_UNLOCKED_VERSION if dialects.skips_locked_rows(engine.dialect) else BUMP_VERSION
        self._rows = RowParser(self.cluster_id)

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, *, read_only: bool = False, **options: Any) -> SqlMembershipTable:
        """Open ``uri`` (a SQLAlchemy URL); ``options`` are the fields of ``SqlOptions``. ``read_only``:
        sessions the database keeps from writing (``engine.create_engine``); a write raises ``ReadOnlyTableError``."""
        engine = create_engine(parse_url(uri), SqlOptions.from_kwargs(options), read_only=read_only)
        return cls(engine, cluster_id, read_only=read_only)

    def __repr__(self) -> str:
        return f"SqlMembershipTable({self._where!r}, cluster_id={self.cluster_id!r})"

    def close(self) -> None:
        self._driver.close()
        self._engine.dispose()

    def _key_params(self, silo_address: SiloAddress) -> dict[str, Any]:
        return key_params(self.cluster_id, silo_address)

    # -- reads -------------------------------------------------------------------------

    def _read(self, query: sa.Select[Any], params: dict[str, Any], *, full: bool) -> MembershipTableData:
        """The version and the rows in one statement (``one_statement``): one round trip on PostgreSQL;
        ``full``: every row of the cluster (``RowParser`` keeps it)."""

        def work(transaction: Transaction) -> list[Any]:
            lines: list[Any] = transaction.execute(query, params).fetchall()
            return lines

        lines: list[Any] = self._fast_transaction(work, write=False, if_no_schema=[], single=True)
        version_row, rows = split_read(lines)
        version = UNINITIALIZED_VERSION if version_row is None else TableVersion(*version_row)
        return self._rows.table_data(version, rows, full=full)

    def read_all(self) -> MembershipTableData:
        return self._read(READ_ALL, cluster_params(self.cluster_id), full=True)

    def read_changes(self, since: int) -> MembershipTableData:
        """``read_all`` of the rows written after ``since`` or at an unknown version (``one_statement.READ_CHANGES``).

        On a table of an older release that ``initialize()`` has not given the columns this
        reads (a read-only handle never runs it), every row: ``read_all``."""
        params = {**cluster_params(self.cluster_id), "since": since}
        try:
            return self._read(READ_CHANGES, params, full=False)
        except TableUnavailableError as exc:
            cause = exc.__cause__
            if isinstance(cause, sa.exc.DBAPIError) and dialects.is_missing_column(self._dialect, cause):
                return self.read_all()
            raise

    def read_version(self) -> TableVersion:
        params = cluster_params(self.cluster_id)

        def work(transaction: Transaction) -> TableVersion:
            row = transaction.execute(SELECT_VERSION, params).fetchone()
            return UNINITIALIZED_VERSION if row is None else TableVersion(*row)

        return self._fast_transaction(work, write=False, if_no_schema=UNINITIALIZED_VERSION, single=True)

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self._read(READ_ROW, self._key_params(silo_address), full=False)

    def read_rows(self, silos: Sequence[SiloAddress]) -> MembershipTableData:
        """One statement (``one_statement.read_rows``) for up to ``READ_ROWS_MAX`` silos; none or
        more: the contract's row by row."""
        keys = list(dict.fromkeys(silos))
        if not 0 < len(keys) <= READ_ROWS_MAX:
            return super().read_rows(keys)
        params = cluster_params(self.cluster_id)
        for index, silo in enumerate(keys):
            params.update(row_params(index, key_params(self.cluster_id, silo)))
        return self._read(read_rows(len(keys)), params, full=False)

    # -- canonical writes --------------------------------------------------------------

    def _bump_version(self, connection: sa.Connection | Transaction, version: TableVersion) -> TableVersion:
        """Lock the version row if it still carries ``version.etag`` and set ``version``; the new version."""
        written = TableVersion(version.version, new_etag())
        result = connection.execute(self._bump, bump_params(self.cluster_id, version, written.etag, datetime.now(UTC)))
        if result.rowcount != 1:
            raise LostRaceError
        return written

    def _increment_version(self, transaction: Transaction, rows: Sequence[dict[str, Any]]) -> TableVersion:
        """Lock the version row (waiting for a writer that holds it), set the next version and record
        it as the ``written_version`` of ``rows`` (their ``INSERT_ROW`` or ``UPDATE_ROW`` parameters:
        written just before, with NULL); the new version."""
        written: dict[str, Any] = {}
        for index, row in enumerate(rows):
            written.update(row_params(index, row))
        if not self._engine.dialect.update_returning:  # MySQL/MariaDB
            row = transaction.execute(LOCK_VERSION, cluster_params(self.cluster_id)).fetchone()
            if row is None:
                raise LostRaceError  # no version row
            version = TableVersion(*row).next()
            bumped = TableVersion(version.version, new_etag())
            written.update(bump_params(self.cluster_id, version, bumped.etag, datetime.now(UTC)))
            # the version and the rows' written_version in one statement: no round trip more
            if transaction.execute(mysql_bump_version_and_rows(len(rows)), written).rowcount != len(rows) + 1:
                raise LostRaceError  # cannot happen: the version row is locked, the rows are ours
            return bumped
        written_etag = new_etag()
        params = increment_params(self.cluster_id, written_etag, datetime.now(UTC))
        lines = transaction.execute(INCREMENT_VERSION, params).fetchall()
        if not lines:
            raise LostRaceError  # no version row
        transaction.execute(record_written_version(len(rows)), written)  # SQLite: in the process, no round trip
        return TableVersion(lines[0][0], written_etag)

    def _insert(self, entry: MembershipEntry, version: TableVersion | None) -> CommittedWrite | None:
        """Insert ``entry`` and bump the version to ``version`` (to the next one if ``None``): in one
        statement on PostgreSQL, else the INSERT and then, last (see the module's docstring), the version."""
        etag = new_etag()
        at_version = None if version is None else version.version
        params = insert_row_params(self.cluster_id, entry.silo_address, entry_to_values(entry), etag, at_version)
        if self._dialect == "postgresql":
            return self._in_one_statement([params], ((entry, etag),), version, insert=True)
        bump: Callable[[Transaction], TableVersion] = (
            (lambda transaction: self._increment_version(transaction, [params]))
            if version is None
            else (lambda transaction: self._bump_version(transaction, version))
        )
        duplicate = self._driver.integrity_error

        def work(transaction: Transaction) -> CommittedWrite:
            # No SELECT first: the key's uniqueness refuses a second row, and every statement
            # between the caller's read of the version and our bump of it is time in which
            # another writer may win (a 1,000-silo join storm is paced by that window).
            try:
                transaction.execute(INSERT_ROW, params)
            except duplicate as exc:  # the row exists
                raise LostRaceError from exc
            return CommittedWrite(bump(transaction), ((entry, etag),))

        return self._fast_write(work)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        return self._insert(entry, version)

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        return self._insert(entry, None)

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """Replace each row at its etag (keeping a later IAmAlive time: ``UPDATE_ROW``) and bump the
        version, all or nothing: one statement on PostgreSQL and MySQL (``one_statement``, up to
        ``ONE_STATEMENT_MAX_ROWS`` rows), else a statement per row in key order (so two writers of
        the same rows cannot deadlock) and the version last."""
        batch = checked_updates(updates, self.max_rows_per_update)
        if self._dialect == "postgresql" and len(batch) <= ONE_STATEMENT_MAX_ROWS:
            return self._update_in_one_statement(batch, version)
        if self._dialect in ("mysql", "mariadb") and len(batch) <= ONE_STATEMENT_MAX_ROWS:
            return self._update_joined(batch, version)
        return self._update(batch, version.version, lambda transaction, _: self._bump_version(transaction, version))

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        batch = checked_updates(((entry, etag),), self.max_rows_per_update)
        if self._dialect == "postgresql":
            return self._update_in_one_statement(batch, None)
        return self._update(batch, None, self._increment_version)

    def _row_updates(
        self, batch: Sequence[RowUpdate], at_version: int | None
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Fresh etags for a checked ``batch`` (in its order) and the rows' ``UPDATE_ROW`` parameters
        in key order; ``at_version``: the version the write sets (``None``: the next one)."""
        new_etags = [new_etag() for _ in batch]
        in_key_order = sorted(zip(batch, new_etags, strict=True), key=lambda update: update[0][0].silo_address)
        rows = [
            update_row_params(self.cluster_id, entry.silo_address, entry_to_values(entry), etag, new, at_version)
            for (entry, etag), new in in_key_order
        ]
        return new_etags, rows

    @staticmethod
    def _rows_written(batch: Sequence[RowUpdate], new_etags: Sequence[str]) -> tuple[tuple[MembershipEntry, str], ...]:
        return tuple(zip((entry for entry, _ in batch), new_etags, strict=True))

    def _update_in_one_statement(
        self, batch: Sequence[RowUpdate], version: TableVersion | None
    ) -> CommittedWrite | None:
        """PostgreSQL: ``one_statement.postgres_update_rows`` at ``version`` (at the next one if ``None``)."""
        new_etags, rows = self._row_updates(batch, None if version is None else version.version)
        return self._in_one_statement(rows, self._rows_written(batch, new_etags), version, insert=False)

    def _in_one_statement(
        self,
        rows: Sequence[dict[str, Any]],
        written: tuple[tuple[MembershipEntry, str], ...],
        version: TableVersion | None,
        *,
        insert: bool,
    ) -> CommittedWrite | None:
        """PostgreSQL: run a write of ``one_statement`` in autocommit with the rows' parameters and the
        version's (``bump_params``); its lost race is the division by zero it rolls back with. An
        ``insert`` (``postgres_insert_row``) or an update (``postgres_update_rows``) of ``rows``.

        If ``version`` is ``None``, at the next version (``increment_params``): that statement and
        the one that records the version in the rows, as one request (``postgres_at_next_version``)."""
        written_etag, now = new_etag(), datetime.now(UTC)
        params = (
            increment_params(self.cluster_id, written_etag, now)
            if version is None
            else bump_params(self.cluster_id, version, written_etag, now)
        )
        for index, row in enumerate(rows):
            params.update(row_params(index, row))
        error = self._engine.dialect.loaded_dbapi.Error

        def work(transaction: Transaction) -> CommittedWrite:
            try:
                if version is None:
                    line = transaction.execute_script(
                        postgres_at_next_version(len(rows), insert=insert), params
                    ).fetchone()
                else:
                    statement = postgres_insert_row(False) if insert else postgres_update_rows(len(rows), False)
                    line = transaction.execute(statement, params).fetchone()
            except error as exc:
                if getattr(exc, "sqlstate", None) == LOST_RACE_SQLSTATE:
                    raise LostRaceError from exc
                raise
            if line is None or line[0] is None:  # no version row
                raise LostRaceError
            return CommittedWrite(TableVersion(line[0], written_etag), written)

        return self._fast_write(work, single=True)

    def _update_joined(self, batch: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """MySQL: ``one_statement.mysql_update_rows`` (all rows or none), then COMMIT."""
        new_etags, rows = self._row_updates(batch, version.version)
        written = TableVersion(version.version, new_etag())
        params = bump_params(self.cluster_id, version, written.etag, datetime.now(UTC))
        for index, row in enumerate(rows):
            params.update(row_params(index, row))
        statement = mysql_update_rows(len(rows))

        def work(transaction: Transaction) -> CommittedWrite:
            if transaction.execute(statement, params).rowcount != len(rows) + 1:
                raise LostRaceError
            return CommittedWrite(written, self._rows_written(batch, new_etags))

        return self._fast_write(work, single=True)

    def _update(
        self,
        batch: Sequence[RowUpdate],
        at_version: int | None,
        bump: Callable[[Transaction, Sequence[dict[str, Any]]], TableVersion],
    ) -> CommittedWrite | None:
        """Update each row of a checked ``batch`` at its etag and then, last, ``bump`` the version
        (given the rows' parameters); ``at_version``: the version it sets (``None``: the next one)."""
        new_etags, rows = self._row_updates(batch, at_version)

        def work(transaction: Transaction) -> CommittedWrite:
            for params in rows:
                if transaction.execute(UPDATE_ROW, params).rowcount != 1:
                    raise LostRaceError
            written = bump(transaction, rows)  # last: see the module's docstring
            return CommittedWrite(written, self._rows_written(batch, new_etags))

        return self._fast_write(work)

    # -- other writes ------------------------------------------------------------------

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        params = {**self._key_params(silo_address), "alive": ensure_utc(when, "IAmAlive time")}
        self._fast_transaction(
            lambda t: t.execute(UPDATE_I_AM_ALIVE, params), write=True, if_no_schema=None, single=True
        )
