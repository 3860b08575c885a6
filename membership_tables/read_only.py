"""``ReadOnlyMembershipTable``: the handle ``open_table(..., read_only=True)`` returns.

It passes the reads to the backend's handle and refuses every write with ``ReadOnlyTableError``
before anything reaches the store. Where the store can be told, the backend's handle is itself
opened read-only (``open_table`` passes ``read_only=True`` to the backend), so the store refuses
a write too: a SQL session in read-only mode (SQLite ``mode=ro`` and ``query_only``, PostgreSQL
``default_transaction_read_only``, MySQL/MariaDB ``SET SESSION TRANSACTION READ ONLY``), a
DynamoDB client that sends only read operations. ZooKeeper, Consul and the in-memory table
have no such switch: this handle is the guard, and a credential that may only read (a ZooKeeper
digest identity with READ, a Consul token with a ``read`` key policy) is the store's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NoReturn

from membership_tables.contract import RowUpdate
from membership_tables.errors import ReadOnlyTableError
from membership_tables.model import CommittedWrite, MembershipEntry, SiloAddress, TableVersion
from membership_tables.wrapped import WrappedTable


class ReadOnlyMembershipTable(WrappedTable):
    """The reads of ``inner``; every write raises ``ReadOnlyTableError`` and changes nothing."""

    def __repr__(self) -> str:
        return f"ReadOnlyMembershipTable({self.inner!r})"

    def _refuse(self, operation: str) -> NoReturn:
        raise ReadOnlyTableError(
            f"{operation} is a write, and the membership table {self.inner!r} was opened read-only "
            "(open_table(..., read_only=True), as silo status and silo dashboard open it); nothing was written: "
            "open it without read_only to write (silo kill, silo cleanup and silo table init do)"
        )

    def initialize(self, try_init_version: bool = True) -> None:
        self._refuse("initialize")

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        self._refuse("insert_row")

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        self._refuse("insert_row_with_etags")

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        self._refuse("insert_row_at_next_version")

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        self._refuse("update_row_at_next_version")

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        self._refuse("update_row")

    def update_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> bool:
        self._refuse("update_rows")

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        self._refuse("update_rows_with_etags")

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self._refuse("update_i_am_alive")

    def cleanup_defunct_entries(self, before: datetime) -> int:
        self._refuse("cleanup_defunct_entries")

    def delete_cluster_entries(self) -> None:
        self._refuse("delete_cluster_entries")
