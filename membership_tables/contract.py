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
  ``False`` (``None`` from the ``*_with_etags`` writes) and leaves the store exactly as it
  was: no row, column, version or etag changed.
* **infrastructure failure**: the store cannot be reached, times out, or fails in a
  way that says nothing about the preconditions. It raises ``TableUnavailableError``
  with the driver error as ``__cause__``; a write's outcome is then unknown.
* **malformed row**: a stored member row (or its heartbeat) that cannot be parsed into a
  ``MembershipEntry``: corrupted, edited by hand, or written by someone hostile. Reads
  never fail because of one: they leave it out of ``rows`` and report it in
  ``MembershipTableData.malformed`` as a ``MalformedRow(key, reason)``, on every read
  until it is repaired or deleted, and change nothing in the store. One bad row must not
  stop every silo's refresh, and with it failure detection. No write succeeds on it (no
  etag was ever handed out for it, and an insert under its key loses as for any existing
  row), a heartbeat of it raises nothing, and cleanup keeps it (its age is unknown).
  Only a malformed *version* row still raises ``MalformedRowError``: without a version
  nothing can be written safely.

Handles are thread-safe: one handle may serve several threads at once, and several
handles (in several processes) may use the same store at once.
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import ClassVar, Literal, Self

from membership_tables.errors import InvalidUpdateError, TableUnavailableError
from membership_tables.model import (
    CommittedWrite,
    MalformedRow,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    TableVersion,
)

UNINITIALIZED_VERSION = TableVersion(0, "")
"""What reads return for a cluster whose version row does not exist (yet)."""

NEXT_VERSION_ATTEMPTS = 32
"""Lost races the default ``insert_row_at_next_version`` takes before it gives up (see there)."""

RowUpdate = tuple[MembershipEntry, str]
"""One row of an ``update_rows`` batch: the new entry and the row etag it is conditioned on."""


def checked_updates(updates: Sequence[RowUpdate], max_rows: int) -> tuple[RowUpdate, ...]:
    """The batch of an ``update_rows`` call, or ``InvalidUpdateError`` saying what is wrong with it.

    Every backend calls this before talking to its store, so bad input never costs a round
    trip and is refused the same way everywhere.
    """
    if isinstance(updates, (str, bytes)) or not isinstance(updates, Sequence):
        raise InvalidUpdateError(
            f"update_rows takes a sequence of (MembershipEntry, etag) pairs, got {type(updates).__name__}"
        )
    batch = tuple(updates)
    if not batch:
        raise InvalidUpdateError("update_rows needs at least one (MembershipEntry, etag) pair; got none")
    if len(batch) > max_rows:
        raise InvalidUpdateError(
            f"update_rows got {len(batch)} rows, but this store applies at most {max_rows} in one transaction "
            "(max_rows_per_update); split the batch into several versions"
        )
    seen: set[SiloAddress] = set()
    for position, update in enumerate(batch):
        if not (
            isinstance(update, tuple)
            and len(update) == 2
            and isinstance(update[0], MembershipEntry)
            and isinstance(update[1], str)
        ):
            raise InvalidUpdateError(
                f"update {position} of update_rows must be a (MembershipEntry, etag str) pair, got {update!r}"
            )
        address = update[0].silo_address
        if address in seen:
            raise InvalidUpdateError(
                f"update_rows names silo {address} twice; give each silo's row once (one new entry per row)"
            )
        seen.add(address)
    return batch


class MembershipTable(abc.ABC):
    """A cluster's membership table in some store.

    All methods are synchronous and may block on I/O; the silo runtime calls them off
    its event loop. A backend implements the canonical writes once, as
    ``insert_row_with_etags`` and ``update_rows_with_etags``; ``insert_row``, ``update_row``
    and ``update_rows`` are those writes without the etags.
    """

    max_rows_per_update: int
    """The most rows one ``update_rows`` call may change: what the store's transactions allow.

    Each backend sets it (see ``update_rows`` for the figures and why).
    """

    read_only_sessions: ClassVar[bool] = False
    """Whether ``from_uri`` takes ``read_only=True`` and then opens a session that the store (or
    its client) keeps from writing, under the guard of ``open_table(..., read_only=True)``."""

    reads_changes: bool = False
    """Whether ``read_changes`` reads only the rows written since a version; False: it reads them all."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id

    @abc.abstractmethod
    def initialize(self, try_init_version: bool = True) -> None:
        """Create what the store needs (schema, root node, table) if missing.

        Checks first and creates nothing (runs no DDL) when it exists, so that silos can run
        with credentials that may only read and write rows; if it is missing and the
        credentials may not create it, raises ``AccessDeniedError`` naming the fix
        (``silo table init URI``, run once by an admin).

        With ``try_init_version`` also create this cluster's version row at version 0
        with a fresh etag if it does not exist. Idempotent and safe to run from many
        processes at once; never changes existing rows or an existing version.
        Before the version row exists, reads return ``UNINITIALIZED_VERSION`` and every
        write loses (``False``, or ``None``).
        """

    @abc.abstractmethod
    def read_all(self) -> MembershipTableData:
        """All of this cluster's rows and the current version, as one atomic snapshot.

        The rows and the version agree: the result reflects exactly the writes up to
        and including the one that set this version (never a torn mix of two writes).
        Heartbeats are reflected as of some moment during the read. Rows that cannot be
        parsed are skipped and listed in ``malformed`` (see the module docstring).
        """

    @abc.abstractmethod
    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        """The row of ``silo_address`` (zero or one row) and the current version.

        Atomic like ``read_all``: it returns the same entry, etag and version that a
        ``read_all`` at the same moment would. If the silo's stored row is malformed, the
        result has no rows and reports that row in ``malformed``, as ``read_all`` would:
        the silo reads as absent, and the caller learns why.
        """

    def read_rows(self, silos: Sequence[SiloAddress]) -> MembershipTableData:
        """The rows of ``silos`` that exist (malformed ones in ``malformed``, as ``read_row``
        reports them) and a version every row read is at least as new as.

        For a caller that wants a handful of rows, not the table (a joiner re-reading the silos
        it has not reached yet). Where the store reads them in one call it is one atomic
        snapshot like ``read_row``'s (SQL: one statement); the default reads them one by one,
        each atomic, and reports the oldest version it read.
        """
        reads = [self.read_row(silo) for silo in dict.fromkeys(silos)]
        if not reads:
            return MembershipTableData((), self.read_version())
        version = min((read.version for read in reads), key=lambda read_version: read_version.version)
        parts: list[tuple[MembershipEntry, str] | MalformedRow] = []
        for read in reads:
            parts += [*read.rows, *read.malformed]
        return MembershipTableData.from_parsed(parts, version)

    def read_changes(self, since: int) -> MembershipTableData:
        """The current version and at least every row that a versioned write changed at a version
        after ``since``, as one atomic snapshot (as ``read_all``'s).

        A silo whose view holds the table at ``since`` catches up with this rather than a full
        read: its view with these rows put in is the table at the returned version, except for
        heartbeats (``update_i_am_alive`` writes no version) and rows deleted since
        (``cleanup_defunct_entries``), which only ``read_all`` shows. More rows may be returned
        (``read_all`` is a valid implementation, and the default where ``reads_changes`` is
        False); malformed rows among them are listed in ``malformed`` as ``read_all`` does.
        """
        return self.read_all()

    @abc.abstractmethod
    def read_version(self) -> TableVersion:
        """The current version only: one key, row or znode read, never the rows.

        ``UNINITIALIZED_VERSION`` if the version row does not exist. It agrees with
        ``read_all().version`` at the same moment, so a silo can refresh cheaply: read the
        version, and read everything only when it moved.
        """

    @abc.abstractmethod
    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        """Add ``entry`` and set the version to ``version.version``, atomically; say what it left.

        The new row gets a fresh etag; the version row gets a fresh etag. Returns those as a
        ``CommittedWrite`` (``rows`` holds ``entry`` as given with its etag): exactly what a
        ``read_all`` right after the write returns for that row and the version. Returns
        ``None`` (lost race, no side effect) if a row for ``entry.silo_address`` exists or
        ``version.etag`` is not the current version etag.
        """

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        """Add ``entry`` and move the version from whatever it is to the next, atomically; say what it left.

        ``insert_row_with_etags`` conditioned on the row alone: the row must be absent, the
        version is not given but taken as it is at the write and bumped by one, with fresh
        etags for both, in the same atomic step, so membership changes stay totally ordered.
        Returns a ``CommittedWrite`` (the version the write set; ``rows`` holds ``entry`` as
        given with its etag), or ``None`` (no side effect) if a row for ``entry.silo_address``
        exists (a malformed one included) or the cluster has no version row.

        Why no version etag: a silo's own new row (a fresh generation) records a fact that
        depends on no other row, so no write it did not see can make it wrong. Conditioned on
        the version, every insert of a join storm raced every other write, and lost to it:
        1,000 silos joining PostgreSQL made 15,365 insert attempts for 1,000 rows.

        Stores with a server-side increment do it in one transaction that waits for, rather
        than loses to, a concurrent writer (memory, SQL). This default, for the others
        (ZooKeeper, Consul, DynamoDB), reads the row and version (``read_row``) and inserts at
        the next version (``insert_row_with_etags``), re-reading after a short jittered pause
        on each lost race; after ``NEXT_VERSION_ATTEMPTS`` lost races in a row it raises
        ``TableUnavailableError`` (the store is too contended for now; none of them wrote).
        """

        def insert(data: MembershipTableData) -> CommittedWrite | Literal[False] | None:
            if data.get(entry.silo_address) is not None or data.malformed:
                return None
            return self.insert_row_with_etags(entry, data.version.next()) or False

        return self._at_next_version(entry.silo_address, insert)

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        """Replace the row of ``entry.silo_address`` if it still carries ``etag``, and move the
        version from whatever it is to the next, atomically; say what it left.

        ``update_row`` conditioned on the row alone (see ``insert_row_at_next_version`` for the
        version and why): for a silo's writes of its own status (Active, ShuttingDown), which
        depend on nothing but its own row. Any write of that row since ``etag`` (a vote, a
        death) makes it lose; writes of other rows do not. Returns a ``CommittedWrite`` like
        ``update_rows_with_etags`` of the one pair, or ``None`` (no side effect) if the row does
        not exist, ``etag`` is not its current etag, or the cluster has no version row. Like
        every update it never re-creates a removed row and keeps a newer stored IAmAlive time.
        The default (ZooKeeper, Consul, DynamoDB) is that of ``insert_row_at_next_version``,
        with ``update_rows_with_etags``.
        """

        def update(data: MembershipTableData) -> CommittedWrite | Literal[False] | None:
            row = data.get(entry.silo_address)
            if row is None or row[1] != etag:
                return None
            return self.update_rows_with_etags(((entry, etag),), data.version.next()) or False

        return self._at_next_version(entry.silo_address, update)

    def _at_next_version(
        self, silo: SiloAddress, write: Callable[[MembershipTableData], CommittedWrite | Literal[False] | None]
    ) -> CommittedWrite | None:
        """Read ``silo``'s row and the version, and ``write`` at the next version: its
        ``CommittedWrite``, or ``None`` (its precondition failed), or ``False`` (it lost a race
        for the version: read and try again after a jittered pause)."""
        for attempt in range(NEXT_VERSION_ATTEMPTS):
            data = self.read_row(silo)
            if data.version == UNINITIALIZED_VERSION:
                return None
            written = write(data)
            if written is not False:
                return written
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise TableUnavailableError(
            f"lost {NEXT_VERSION_ATTEMPTS} races in a row to write the row of {silo} at the next version of "
            f"{self!r}: the store is too contended for now; retry later"
        )

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        """``insert_row_with_etags`` for a caller that needs only the outcome: ``False`` on a lost race."""
        return self.insert_row_with_etags(entry, version) is not None

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        """Replace the whole row of ``entry.silo_address`` and set the version, atomically.

        ``update_rows_with_etags`` of the one pair ``(entry, etag)``: the row gets a fresh
        etag and the version row a fresh etag. Returns ``False`` (lost race, no side effect)
        if the row does not exist, ``etag`` is not the row's current etag, or
        ``version.etag`` is not the current version etag. An update never re-creates a
        removed row.

        The stored IAmAlive time never goes backwards: if the row's heartbeat is newer
        than ``entry.i_am_alive_time``, the newer one is kept.
        """
        return self.update_rows_with_etags(((entry, etag),), version) is not None

    def update_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> bool:
        """``update_rows_with_etags`` for a caller that needs only the outcome: ``False`` on a lost race."""
        return self.update_rows_with_etags(updates, version) is not None

    @abc.abstractmethod
    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """Replace several whole rows and set the version, all in one atomic step; say what it left.

        ``updates`` holds ``(entry, etag)`` pairs: each row of ``entry.silo_address`` is
        conditioned on its own ``etag`` and gets a fresh etag; the version row is set to
        ``version.version`` with a fresh etag, conditioned on ``version.etag``. So several
        silos declared Dead together cost one version, and every reader sees all of them
        change at once or none. Returns a ``CommittedWrite``: the new version and each
        ``(entry, new etag)`` in the order of ``updates``, exactly the etags a ``read_all``
        right after the write returns, so the writer can build the next snapshot and
        gossip the change without reading the table again. Returns ``None`` (lost race, no
        side effect at all, not even on the other rows) if any row does not exist, any
        ``etag`` is not its row's current etag, or ``version.etag`` is not the current
        version etag. It never re-creates a removed row and never moves a stored IAmAlive
        time backwards: if a row's heartbeat is newer than its ``entry.i_am_alive_time``,
        the newer one is kept, and ``rows`` still holds the entry as given (heartbeats are
        seen on full reads).

        Raises ``InvalidUpdateError`` (``checked_updates``) before touching the store if
        ``updates`` is empty, names a silo twice, or has more rows than
        ``max_rows_per_update``, the limit of the store's native transaction:

        * memory: 10,000 (one lock; the bound only keeps batches sane);
        * SQL (SQLite, PostgreSQL, MySQL/MariaDB): 1,000 (one transaction holding the
          version row lock while it runs one ``UPDATE`` per row);
        * ZooKeeper: 100 (one multi-op; a request must fit ``jute.maxbuffer``, 1 MiB by
          default, and rows larger than 5 KiB on average are refused for that reason);
        * Consul: 63 (``/v1/txn`` takes at most 64 operations: one ``cas`` per row plus
          one for the version key; a body over 512 KiB, ``txn_max_req_len``, is refused too);
        * DynamoDB: 99 (``TransactWriteItems`` takes at most 100 items: one ``Put`` per
          row plus the version item).
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
