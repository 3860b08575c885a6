"""In-memory membership table (``memory://NAME``), for development and unit tests.

Handles opened with the same NAME in one process share one store (per cluster), so
several in-process silos can form a cluster. One lock serialises every operation,
which makes each one trivially atomic. Entries are immutable, so returning them is
returning detached copies.

The store holds ``MembershipEntry`` values, so only code that reaches into it (a test
playing a corrupted store) can put anything else in a row; reads skip such a row and
report it in ``MembershipTableData.malformed``, like every other backend.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from membership_tables.codec import new_etag
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import InvalidTableUriError
from membership_tables.model import (
    CommittedWrite,
    MalformedRow,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    ensure_utc,
)


@dataclass
class _ClusterState:
    version: TableVersion | None = None
    rows: dict[SiloAddress, tuple[MembershipEntry, str]] = field(default_factory=dict)
    written: dict[SiloAddress, int] = field(default_factory=dict)
    """The version of each row's last versioned write (``read_changes``); a row without one is always read."""

    def wellformed(self, address: SiloAddress) -> tuple[MembershipEntry, str] | None:
        """The row of ``address`` if there is one and it holds an entry."""
        row = self.rows.get(address)
        return row if row is not None and isinstance(row[0], MembershipEntry) else None


@dataclass
class _Store:
    lock: threading.Lock = field(default_factory=threading.Lock)
    clusters: dict[str, _ClusterState] = field(default_factory=dict)


class InMemoryMembershipTable(MembershipTable):
    """A process-local table; ``memory://NAME`` names the shared store."""

    max_rows_per_update = 10_000
    """No store limit: one lock makes any batch atomic; the bound only keeps batches sane."""

    reads_changes = True

    _stores: ClassVar[dict[str, _Store]] = {}
    _stores_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str, cluster_id: str) -> None:
        super().__init__(cluster_id)
        self.name = name
        with self._stores_lock:
            self._store = self._stores.setdefault(name, _Store())

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> InMemoryMembershipTable:
        if options:
            raise InvalidTableUriError(f"the memory table takes no options, got {sorted(options)}")
        parts = urlsplit(uri)
        name = (parts.netloc + parts.path).strip("/")
        if not name or parts.query:
            raise InvalidTableUriError(f"expected 'memory://NAME' (e.g. memory://dev), got {uri!r}")
        return cls(name, cluster_id)

    @classmethod
    def reset(cls, name: str) -> None:
        """Forget the store called ``name`` (tests use this between cases)."""
        with cls._stores_lock:
            cls._stores.pop(name, None)

    @property
    def _state(self) -> _ClusterState:
        return self._store.clusters.setdefault(self.cluster_id, _ClusterState())

    def _snapshot(self, addresses: list[SiloAddress]) -> MembershipTableData:
        parsed = [self._stored(address) for address in addresses]
        return MembershipTableData.from_parsed(parsed, self._state.version or UNINITIALIZED_VERSION)

    def _stored(self, address: SiloAddress) -> tuple[MembershipEntry, str] | MalformedRow:
        """The row of ``address``, or how it is malformed."""
        row = self._state.rows[address]
        if isinstance(row[0], MembershipEntry):
            return row
        return MalformedRow(
            f"memory://{self.name} cluster {self.cluster_id!r} row {address}",
            f"holds a {type(row[0]).__name__}, not a MembershipEntry",
        )

    def _version_matches(self, version: TableVersion) -> bool:
        current = self._state.version
        return current is not None and current.etag == version.etag

    def initialize(self, try_init_version: bool = True) -> None:
        with self._store.lock:
            if try_init_version and self._state.version is None:
                self._state.version = TableVersion(0, new_etag())

    def read_all(self) -> MembershipTableData:
        with self._store.lock:
            return self._snapshot(list(self._state.rows))

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        with self._store.lock:
            return self._snapshot([silo_address] if silo_address in self._state.rows else [])

    def read_version(self) -> TableVersion:
        with self._store.lock:
            return self._state.version or UNINITIALIZED_VERSION

    def read_changes(self, since: int) -> MembershipTableData:
        with self._store.lock:
            written = self._state.written
            return self._snapshot([address for address in self._state.rows if written.get(address, since + 1) > since])

    def _insert(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        """``insert_row_with_etags`` with the store's lock held."""
        state = self._state
        if entry.silo_address in state.rows or not self._version_matches(version):
            return None
        row = (entry, new_etag())
        state.rows[entry.silo_address] = row
        state.written[entry.silo_address] = version.version
        state.version = TableVersion(version.version, new_etag())
        return CommittedWrite(state.version, (row,))

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        with self._store.lock:
            return self._insert(entry, version)

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        with self._store.lock:
            current = self._state.version
            return None if current is None else self._insert(entry, current.next())

    def _update(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """``update_rows_with_etags`` of a checked batch, with the store's lock held."""
        state = self._state
        current = [state.wellformed(entry.silo_address) for entry, _ in updates]
        if not self._version_matches(version) or any(
            row is None or row[1] != etag for row, (_, etag) in zip(current, updates, strict=True)
        ):
            return None
        written = []
        for row, (entry, _) in zip(current, updates, strict=True):
            assert row is not None
            alive = max(row[0].i_am_alive_time, entry.i_am_alive_time)
            etag = new_etag()
            state.rows[entry.silo_address] = (entry.with_i_am_alive_time(alive), etag)
            state.written[entry.silo_address] = version.version
            written.append((entry, etag))
        state.version = TableVersion(version.version, new_etag())
        return CommittedWrite(state.version, tuple(written))

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        updates = checked_updates(updates, self.max_rows_per_update)
        with self._store.lock:
            return self._update(updates, version)

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        updates = checked_updates(((entry, etag),), self.max_rows_per_update)
        with self._store.lock:
            current = self._state.version
            return None if current is None else self._update(updates, current.next())

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        when = ensure_utc(when, "IAmAlive time")
        with self._store.lock:
            current = self._state.wellformed(silo_address)
            if current is not None and when > current[0].i_am_alive_time:
                self._state.rows[silo_address] = (current[0].replace(i_am_alive_time=when), current[1])

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        with self._store.lock:
            rows = self._state.rows
            defunct = [
                address
                for address, (entry, _) in rows.items()
                if isinstance(entry, MembershipEntry)  # a malformed row's age is unknown: keep it
                and entry.status is SiloStatus.DEAD
                and entry.last_activity < before
            ]
            for address in defunct:
                del rows[address]
                self._state.written.pop(address, None)
            return len(defunct)

    def delete_cluster_entries(self) -> None:
        with self._store.lock:
            self._store.clusters.pop(self.cluster_id, None)
