"""``SqlMembershipTable``: the membership contract on SQLite, PostgreSQL and MySQL/MariaDB.

Every canonical write is one transaction: the member rows are inserted or updated
(each update conditioned on the row's etag), then, last, a conditional UPDATE of the
cluster's version row (``WHERE etag = <the version the caller read>``), then COMMIT. That row
lock serialises the writers of one cluster; a row count of 0 means the caller lost the race
(on PostgreSQL also when another writer holds the row: ``BUMP_UNLOCKED_VERSION``).
Taking it last holds it for one round trip: taken first, it was held across every statement
of the write, and in a 1,000-silo join storm on PostgreSQL (writers in busy processes) the
version UPDATE waited 380 ms on average for it. Any failed precondition rolls the whole
transaction back, so a write that returns ``False`` changed nothing. Deadlocks and lock timeouts roll
back too and are retried a few times; a refused login or privilege becomes
``AccessDeniedError``; whatever else the driver raises becomes ``TableUnavailableError``.

``initialize()`` reads the catalog first and runs DDL only when a table is missing, so silos
can run as a role with nothing but SELECT/INSERT/UPDATE/DELETE on the two tables
(``membership_tables.sql.grants``); ``silo table init URI`` creates the schema once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from membership_tables.codec import new_etag
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import SCHEMA_MISSING_FIX, AccessDeniedError, InvalidEntryError, TableUnavailableError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    ensure_utc,
    validate_cluster_id,
)
from membership_tables.sql import dialects
from membership_tables.sql.dbapi import Driver, Transaction
from membership_tables.sql.engine import SqlOptions, create_engine, parse_url
from membership_tables.sql.rows import RowParser, entry_to_values, key_of, row_to_entry
from membership_tables.sql.schema import membership_table, version_table
from membership_tables.sql.statements import (
    BUMP_UNLOCKED_VERSION,
    BUMP_VERSION,
    INCREMENT_VERSION,
    INSERT_ROW,
    LOCK_VERSION,
    SELECT_ROW,
    SELECT_ROWS,
    SELECT_VERSION,
    UPDATE_I_AM_ALIVE,
    UPDATE_ROW,
    bump_params,
    cluster_params,
    increment_params,
    insert_row_params,
    key_params,
    update_row_params,
)

T = TypeVar("T")

_ATTEMPTS = 3
"""Tries of one transaction that keeps hitting deadlocks or lock timeouts."""

_members = membership_table.c
_versions = version_table.c


class _LostRaceError(Exception):
    """A precondition of a conditional write failed: roll back and return ``False``."""


class SqlMembershipTable(MembershipTable):
    """A cluster's membership in the ``silo_membership`` tables of a SQL database."""

    max_rows_per_update = 1_000
    """``update_rows`` runs one ``UPDATE`` per row while holding the version row's lock, which
    blocks every other writer of the cluster: the bound keeps that wait short."""

    def __init__(self, engine: sa.Engine, cluster_id: str) -> None:
        super().__init__(validate_cluster_id(cluster_id))
        self._engine = engine
        self._dialect = engine.dialect.name
        self._bump = BUMP_UNLOCKED_VERSION if dialects.skips_locked_rows(engine.dialect) else BUMP_VERSION
        self._where = engine.url.render_as_string(hide_password=True)
        self._driver = Driver(engine)
        self._rows = RowParser(self.cluster_id)

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> SqlMembershipTable:
        """Open ``uri`` (a SQLAlchemy URL); ``options`` are the fields of ``SqlOptions``."""
        return cls(create_engine(parse_url(uri), SqlOptions.from_kwargs(options)), cluster_id)

    def __repr__(self) -> str:
        return f"SqlMembershipTable({self._where!r}, cluster_id={self.cluster_id!r})"

    def close(self) -> None:
        self._driver.close()
        self._engine.dispose()

    # -- transactions ------------------------------------------------------------------

    def _transaction(self, work: Callable[[sa.Connection], T], *, write: bool, if_no_schema: T) -> T:
        """Run ``work`` in one transaction, retrying deadlocks; map driver errors."""
        options = dialects.transaction_options(self._dialect, write=write)

        def run() -> T:
            with self._engine.connect() as connection:
                connection.execution_options(**options)
                with connection.begin():
                    return work(connection)

        return self._retrying(run, write=write, if_no_schema=if_no_schema)

    def _fast_transaction(self, work: Callable[[Transaction], T], *, write: bool, if_no_schema: T) -> T:
        """``_transaction`` on the pooled DB-API connection, for the hot paths (see ``dbapi``)."""

        return self._retrying(lambda: self._driver.run(work, write=write), write=write, if_no_schema=if_no_schema)

    def _retrying(self, run: Callable[[], T], *, write: bool, if_no_schema: T) -> T:
        """Retry deadlocks (and reads on a connection found dead); map driver errors."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return run()
            except sa.exc.DBAPIError as exc:
                if dialects.is_missing_table(self._dialect, exc):
                    return if_no_schema
                if dialects.is_access_denied(self._dialect, exc):
                    raise self._denied(exc) from exc
                retry = dialects.is_transient(self._dialect, exc) or (exc.connection_invalidated and not write)
                if retry and attempt < _ATTEMPTS:
                    time.sleep(random.uniform(0.005, 0.05) * attempt)
                    continue
                raise self._unavailable(exc) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise self._unavailable(exc) from exc

    def _unavailable(self, exc: sa.exc.SQLAlchemyError) -> TableUnavailableError:
        cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
        return TableUnavailableError(
            f"the membership table at {self._where} is unavailable ({type(cause).__name__}: {cause}); "
            "check that the database is up and reachable"
        )

    def _denied(self, exc: sa.exc.DBAPIError) -> AccessDeniedError:
        return AccessDeniedError(
            f"the database at {self._where} refused this role ({type(exc.orig).__name__}: {exc.orig}); "
            "check the user and password, and grant the privileges listed in docs/security.md"
        )

    def _write(self, work: Callable[[sa.Connection], T]) -> T | None:
        """A conditional write: ``None`` (rolled back) if ``work`` raised ``_LostRaceError``."""
        try:
            return self._transaction(work, write=True, if_no_schema=None)
        except _LostRaceError:
            return None

    def _fast_write(self, work: Callable[[Transaction], T]) -> T | None:
        """``_write`` on the pooled DB-API connection."""
        try:
            return self._fast_transaction(work, write=True, if_no_schema=None)
        except _LostRaceError:
            return None

    def _key_params(self, silo_address: SiloAddress) -> dict[str, Any]:
        return key_params(self.cluster_id, silo_address)

    def _key(self, silo_address: SiloAddress) -> sa.ColumnElement[bool]:
        return sa.and_(
            _members.cluster_id == self.cluster_id,
            *(_members[name] == value for name, value in key_of(silo_address).items()),
        )

    # -- reads -------------------------------------------------------------------------

    def _read(self, silo_address: SiloAddress | None) -> MembershipTableData:
        cluster = cluster_params(self.cluster_id)
        query, params = (SELECT_ROWS, cluster) if silo_address is None else (SELECT_ROW, self._key_params(silo_address))

        def work(transaction: Transaction) -> tuple[Any, list[Any]]:
            version_row = transaction.execute(SELECT_VERSION, cluster).fetchone()
            return version_row, transaction.execute(query, params).fetchall()

        nothing: tuple[Any, list[Any]] = (None, [])
        version_row, rows = self._fast_transaction(work, write=False, if_no_schema=nothing)
        version = UNINITIALIZED_VERSION if version_row is None else TableVersion(*version_row)
        return self._rows.table_data(version, rows, full=silo_address is None)

    def read_all(self) -> MembershipTableData:
        return self._read(None)

    def read_version(self) -> TableVersion:
        def work(connection: sa.Connection) -> TableVersion:
            row = connection.execute(
                sa.select(_versions.version, _versions.etag).where(_versions.cluster_id == self.cluster_id)
            ).first()
            return UNINITIALIZED_VERSION if row is None else TableVersion(*row)

        return self._transaction(work, write=False, if_no_schema=UNINITIALIZED_VERSION)

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self._read(silo_address)

    # -- canonical writes --------------------------------------------------------------

    def _bump_version(self, connection: sa.Connection | Transaction, version: TableVersion) -> TableVersion:
        """Lock the version row if it still carries ``version.etag`` and set ``version``; the new version."""
        written = TableVersion(version.version, new_etag())
        result = connection.execute(self._bump, bump_params(self.cluster_id, version, written.etag, datetime.now(UTC)))
        if result.rowcount != 1:
            raise _LostRaceError
        return written

    def _increment_version(self, transaction: Transaction) -> TableVersion:
        """Lock the version row (waiting for a writer that holds it) and set the next version; the new version."""
        if not self._engine.dialect.update_returning:  # MySQL/MariaDB
            row = transaction.execute(LOCK_VERSION, cluster_params(self.cluster_id)).fetchone()
            if row is None:
                raise _LostRaceError  # no version row
            return self._bump_version(transaction, TableVersion(*row).next())
        written_etag = new_etag()
        params = increment_params(self.cluster_id, written_etag, datetime.now(UTC))
        rows = transaction.execute(INCREMENT_VERSION, params).fetchall()
        if not rows:
            raise _LostRaceError  # no version row
        return TableVersion(rows[0][0], written_etag)

    def _insert(self, entry: MembershipEntry, bump: Callable[[Transaction], TableVersion]) -> CommittedWrite | None:
        """Insert ``entry`` and then, last (see the module's docstring), ``bump`` the version."""
        etag = new_etag()
        params = insert_row_params(self.cluster_id, entry.silo_address, entry_to_values(entry), etag)
        duplicate = self._driver.integrity_error

        def work(transaction: Transaction) -> CommittedWrite:
            # No SELECT first: the key's uniqueness refuses a second row, and every statement
            # between the caller's read of the version and our bump of it is time in which
            # another writer may win (a 1,000-silo join storm is paced by that window).
            try:
                transaction.execute(INSERT_ROW, params)
            except duplicate as exc:  # the row exists
                raise _LostRaceError from exc
            return CommittedWrite(bump(transaction), ((entry, etag),))

        return self._fast_write(work)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        return self._insert(entry, lambda transaction: self._bump_version(transaction, version))

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        return self._insert(entry, self._increment_version)

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """Replace each row at its etag (keeping a later IAmAlive time: ``UPDATE_ROW``; in key
        order, so two writers of the same rows cannot deadlock), then bump the version; any miss
        rolls everything back."""
        batch = checked_updates(updates, self.max_rows_per_update)
        return self._update(batch, lambda transaction: self._bump_version(transaction, version))

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        return self._update(checked_updates(((entry, etag),), self.max_rows_per_update), self._increment_version)

    def _update(self, batch: Sequence[RowUpdate], bump: Callable[[Transaction], TableVersion]) -> CommittedWrite | None:
        """Update each row of a checked ``batch`` at its etag and then, last, ``bump`` the version."""
        new_etags = [new_etag() for _ in batch]
        in_key_order = sorted(zip(batch, new_etags, strict=True), key=lambda update: update[0][0].silo_address)
        rows = [
            update_row_params(self.cluster_id, entry.silo_address, entry_to_values(entry), etag, new)
            for (entry, etag), new in in_key_order
        ]

        def work(transaction: Transaction) -> CommittedWrite:
            for params in rows:
                if transaction.execute(UPDATE_ROW, params).rowcount != 1:
                    raise _LostRaceError
            written = bump(transaction)  # last: see the module's docstring
            return CommittedWrite(written, tuple(zip((entry for entry, _ in batch), new_etags, strict=True)))

        return self._fast_write(work)

    # -- other writes ------------------------------------------------------------------

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        params = {**self._key_params(silo_address), "alive": ensure_utc(when, "IAmAlive time")}
        self._fast_transaction(lambda t: t.execute(UPDATE_I_AM_ALIVE, params), write=True, if_no_schema=None)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        old = sa.and_(_members.start_time < before, _members.i_am_alive_time < before)
        dead = sa.and_(_members.cluster_id == self.cluster_id, _members.status == SiloStatus.DEAD.name, old)

        def work(connection: sa.Connection) -> int:
            candidates = connection.execute(sa.select(membership_table).where(dead)).mappings()
            removed = 0
            for row in candidates.all():
                try:
                    entry = row_to_entry(row)
                except InvalidEntryError:
                    continue  # a malformed row: its age is unknown, keep it
                if entry.last_activity >= before:  # a recent vote
                    continue
                address = entry.silo_address
                # the etag and age conditions skip a row that changed since it was selected
                removed += connection.execute(
                    sa.delete(membership_table).where(self._key(address), _members.etag == row["etag"], old)
                ).rowcount
            return removed

        return self._transaction(work, write=True, if_no_schema=0)

    def delete_cluster_entries(self) -> None:
        def work(connection: sa.Connection) -> None:
            connection.execute(sa.delete(membership_table).where(_members.cluster_id == self.cluster_id))
            connection.execute(sa.delete(version_table).where(_versions.cluster_id == self.cluster_id))

        self._transaction(work, write=True, if_no_schema=None)

    def initialize(self, try_init_version: bool = True) -> None:
        """Create the schema only if a table is missing (checked first: no DDL otherwise)."""
        if not self._transaction(dialects.schema_exists, write=False, if_no_schema=False):
            try:
                self._transaction(dialects.create_schema, write=True, if_no_schema=None)
            except AccessDeniedError as exc:
                cause = exc.__cause__
                detail = cause.orig if isinstance(cause, sa.exc.DBAPIError) else cause
                raise AccessDeniedError(
                    f"the membership tables do not exist in the database at {self._where}, and this role may "
                    f"not create them ({type(detail).__name__}: {detail}); {SCHEMA_MISSING_FIX}"
                ) from cause
        if try_init_version:
            self._write(self._seed_version)

    def _seed_version(self, connection: sa.Connection) -> None:
        exists = connection.execute(sa.select(_versions.etag).where(_versions.cluster_id == self.cluster_id)).first()
        if exists:
            return
        try:
            connection.execute(
                sa.insert(version_table).values(
                    cluster_id=self.cluster_id, version=0, etag=new_etag(), updated_at=datetime.now(UTC)
                )
            )
        except sa.exc.IntegrityError as exc:  # another process created it first: fine
            raise _LostRaceError from exc
