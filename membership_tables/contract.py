"""The ``MembershipTable`` contract, written as a specification.

Every backend implements this class and passes ``membership_tables.testing``. The
runtime depends on this contract only, never on a backend module.

Terms used below:

* **version row**: one per cluster; holds ``TableVersion(version, etag)``. Every
  canonical write bumps it in the same atomic step as the row it writes, so all
  membership changes are totally ordered.
* **row etag**: an opaque token that changes on every canonical write of that row
  (never on a heartbeat).
* **fresh etag**: a token the row or version has never carried before.
* **lost race**: a conditional write whose preconditions no longer hold. It returns
  ``False`` and leaves the store exactly as it was: no row, column, version or etag
  changed.
* **infrastructure failure**: the store cannot be reached, times out, or fails in a
  way that says nothing about the preconditions. It raises ``TableUnavailableError``
  with the driver error as ``__cause__``; a write's outcome is then unknown.

Handles are thread-safe: one handle may serve several threads at once, and several
handles (in several processes) may use the same store at once.
"""

from __future__ import annotations

import abc
from datetime import datetime
from types import TracebackType
from typing import Self

from membership_tables.model import MembershipEntry, MembershipTableData, SiloAddress, TableVersion

UNINITIALIZED_VERSION = TableVersion(0, "")
"""What reads return for a cluster whose version row does not exist (yet)."""


class MembershipTable(abc.ABC):
    """A cluster's membership table in some store.

    All methods are synchronous and may block on I/O; the silo runtime calls them off
    its event loop.
    """

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id

    @abc.abstractmethod
    def initialize(self, try_init_version: bool = True) -> None:
        """Create what the store needs (schema, root node, table) if missing.

        With ``try_init_version`` also create this cluster's version row at version 0
        with a fresh etag if it does not exist. Idempotent and safe to run from many
        processes at once; never changes existing rows or an existing version.
        Before the version row exists, reads return ``UNINITIALIZED_VERSION`` and every
        write returns ``False``.
        """

    @abc.abstractmethod
    def read_all(self) -> MembershipTableData:
        """All of this cluster's rows and the current version, as one atomic snapshot.

        The rows and the version agree: the result reflects exactly the writes up to
        and including the one that set this version (never a torn mix of two writes).
        Heartbeats are reflected as of some moment during the read.
        """

    @abc.abstractmethod
    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        """The row of ``silo_address`` (zero or one row) and the current version.

        Atomic like ``read_all``: it returns the same entry, etag and version that a
        ``read_all`` at the same moment would.
        """

    @abc.abstractmethod
    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        """Add ``entry`` and set the version to ``version.version``, atomically.

        The new row gets a fresh etag; the version row gets a fresh etag.
        Returns ``False`` (lost race, no side effect) if a row for
        ``entry.silo_address`` exists or ``version.etag`` is not the current version etag.
        """

    @abc.abstractmethod
    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        """Replace the whole row of ``entry.silo_address`` and set the version, atomically.

        The row gets a fresh etag and the version row a fresh etag. Returns ``False``
        (lost race, no side effect) if the row does not exist, ``etag`` is not the
        row's current etag, or ``version.etag`` is not the current version etag. An
        update never re-creates a removed row.

        The stored IAmAlive time never goes backwards: if the row's heartbeat is newer
        than ``entry.i_am_alive_time``, the newer one is kept.
        """

    @abc.abstractmethod
    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        """Record a heartbeat: one blind write of the row's IAmAlive time.

        Changes neither a canonical field, nor the row etag, nor the version, so a token
        read before the heartbeat still works afterwards. The stored time never goes
        backwards (an older ``when`` is ignored). Does nothing if the row is absent:
        a heartbeat never creates a row.
        """

    @abc.abstractmethod
    def cleanup_defunct_entries(self, before: datetime) -> int:
        """Remove Dead rows whose latest activity is strictly older than ``before``.

        Latest activity = the latest of start time, IAmAlive time and vote times
        (``MembershipEntry.last_activity``). Rows in any other status are kept whatever
        their age. Does not change the version. Returns how many rows were removed; a
        repeat removes nothing.
        """

    @abc.abstractmethod
    def delete_cluster_entries(self) -> None:
        """Remove this cluster's rows and its version row; never another cluster's."""

    def close(self) -> None:  # noqa: B027 - a no-op is right for stores without connections
        """Release connections. The handle must not be used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
