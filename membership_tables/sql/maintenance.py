"""The SQL table's calls made rarely, on the SQLAlchemy path: the schema, cleanup, a cluster's removal.

``SqlMaintenance`` is a base of ``SqlMembershipTable`` (``table``), which holds the reads and the
conditional writes that silos make all the time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime

import sqlalchemy as sa

from membership_tables.codec import new_etag
from membership_tables.errors import SCHEMA_MISSING_FIX, AccessDeniedError, InvalidEntryError
from membership_tables.model import SiloAddress, SiloStatus, ensure_utc
from membership_tables.sql import dialects
from membership_tables.sql.rows import key_of, row_to_entry
from membership_tables.sql.schema import MEMBERSHIP_TABLE, membership_table, version_table
from membership_tables.sql.transactions import LostRaceError, SqlTransactions

_members = membership_table.c
_versions = version_table.c


class SqlMaintenance(SqlTransactions):
    """``initialize``, ``cleanup_defunct_entries`` and ``delete_cluster_entries`` of one cluster's table."""

    cluster_id: str

    def _key(self, silo_address: SiloAddress) -> sa.ColumnElement[bool]:
        return sa.and_(
            _members.cluster_id == self.cluster_id,
            *(_members[name] == value for name, value in key_of(silo_address).items()),
        )

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
        """Create the schema only if a table is missing, and add the columns an older release's
        table lacks (``schema.WRITTEN_COLUMNS``); both checked in the catalog first, so that a role
        without DDL rights runs none when the schema is complete."""
        missing = self._transaction(dialects.missing_columns, write=False, if_no_schema=None)
        if missing is None:
            with self._refused(f"the membership tables do not exist in the database at {self._where}", "create them"):
                self._transaction(dialects.create_schema, write=True, if_no_schema=None)
        elif missing:
            # the silo must not write rows without them: read_changes would miss its writes
            with self._refused(
                f"the table {MEMBERSHIP_TABLE} in the database at {self._where} was made by an older release: "
                f"it lacks the columns {', '.join(missing)}, which this release writes and read_changes reads",
                f"add them with ALTER TABLE {MEMBERSHIP_TABLE} ADD COLUMN",
            ):
                self._transaction(dialects.add_columns, write=True, if_no_schema=None)
        if try_init_version:
            self._write(self._seed_version)

    @contextlib.contextmanager
    def _refused(self, what: str, change: str) -> Iterator[None]:
        """Turn the ``AccessDeniedError`` of a schema change into one saying ``what`` is missing and the fix."""
        try:
            yield
        except AccessDeniedError as exc:
            cause = exc.__cause__
            detail = cause.orig if isinstance(cause, sa.exc.DBAPIError) else cause
            raise AccessDeniedError(
                f"{what}, and this role may not {change} ({type(detail).__name__}: {detail}); {SCHEMA_MISSING_FIX}"
            ) from cause

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
            raise LostRaceError from exc
