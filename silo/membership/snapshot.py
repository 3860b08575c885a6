"""Immutable membership snapshots and the publisher that hands them out in version order.

A ``MembershipSnapshot`` is one atomic table read plus derived helpers. The publisher
accepts a snapshot only if its version is newer than the current one, so no consumer ever
sees an older view after a newer one. A re-read at the *same* version (only heartbeats
changed) is merged into the current snapshot quietly, each row keeping the later of its
two IAmAlive times (two reads can complete out of order): not a membership change.

A ``MembershipDelta`` is one versioned write as its writer knows it. A conditional write that
set version v+1 succeeded only if the table was still at v, so the table at v+1 is exactly the
table at v with the delta's rows put in: a silo holding v builds v+1 without reading
(``MembershipSnapshot.apply``). Heartbeats are not versioned, so a row the delta carries may hold
an older IAmAlive than the store: the later of the two is kept, as for a re-read.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.membership.options import SiloOptions
from silo.membership.ring import RingIndex, ring_index
from silo.membership.votes import fresh_votes


@dataclass(frozen=True)
class MembershipDelta:
    """One versioned write: the table at ``base_version`` with ``rows`` put in is the table at ``version``.

    ``since_version`` (at most ``base_version``) widens that: the writer knows that every row
    written after ``since_version`` is among ``rows`` (e.g. a vote, then the death of the same
    silo), so the table at any version from ``since_version`` to ``base_version`` with ``rows``
    put in is the table at ``version``. A silo that has not yet heard of the vote applies the
    death directly instead of pulling a whole view.
    """

    base_version: int
    version: TableVersion
    """The version the write set, with the version etag it left."""
    rows: tuple[tuple[MembershipEntry, str], ...]
    """Each row the write inserted or replaced, with the row etag it left."""
    since_version: int | None = None
    """The oldest version this delta applies to; None = ``base_version`` only."""

    def __post_init__(self) -> None:
        if self.version.version != self.base_version + 1:
            raise ValueError(
                f"a delta moves the table by one version; got {self.base_version} -> {self.version.version}"
            )
        if not self.rows:
            raise ValueError("a delta changes at least one row")
        if self.since_version is not None and not 0 <= self.since_version <= self.base_version:
            raise ValueError(
                f"a delta applies from a version at or before its base {self.base_version}; got {self.since_version}"
            )

    @property
    def applies_from(self) -> int:
        """The oldest version a snapshot may hold for this delta to apply to it."""
        return self.base_version if self.since_version is None else self.since_version

    @property
    def entries(self) -> tuple[MembershipEntry, ...]:
        """The rows the write put in, without their etags."""
        return tuple(entry for entry, _ in self.rows)

    @property
    def silos(self) -> frozenset[SiloAddress]:
        return frozenset(entry.silo_address for entry, _ in self.rows)

    def is_about(self, silo: SiloAddress) -> bool:
        """Whether the delta writes ``silo``'s row (a vote against it, its death, its own write)."""
        return any(entry.silo_address == silo for entry, _ in self.rows)

    def is_urgent_for(self, silo: SiloAddress) -> bool:
        """Whether ``silo``, if it cannot apply this delta, should catch up at once rather than at
        its next refresh: the delta takes a silo out (Dead, ShuttingDown, Stopping) or is about
        ``silo`` itself. Joins, activations, property changes and votes against others can wait:
        a vote cast on a view that missed them loses its conditional write and reads the table."""
        return self.is_about(silo) or any(
            entry.status not in (SiloStatus.JOINING, SiloStatus.ACTIVE) for entry, _ in self.rows
        )


LARGE_VIEW = 64
"""Rows beyond which a view is large: there, work that is O(N) for every silo on every change
(N^2 for the cluster) is deferred or left to the periodic refresh. A receiver off the base of a
change that is not about itself (a join, a vote against another silo, another silo's death)
does not pull the sender's whole view (``MembershipTableManager.on_gossip``), and probe targets
are re-derived from the latest view at most once per probe interval (``ClusterHealthMonitor``).
At 1,000 silos, after a join storm, each join gossiped to everyone made each silo decode a
peer's 1,000 rows and re-rank the whole ring, and one death made all of them pull at once (load
average 200 on two cores): the machine spent most of its time there. Receivers at the base
version still apply every change at once, and the silo a change is about always catches up."""


Rows = tuple[tuple[MembershipEntry, str], ...]
"""A table read's rows with their etags (``MembershipTableData.rows``)."""


def rows_written_between(older: Rows, newer: Rows) -> frozenset[SiloAddress] | None:
    """The silos whose rows differ between two reads' rows (added or rewritten: a new etag); None
    if a row was removed, which no delta can express."""
    before = {entry.silo_address: etag for entry, etag in older}
    changed = set()
    for entry, etag in newer:
        if before.pop(entry.silo_address, None) != etag:
            changed.add(entry.silo_address)
    return None if before else frozenset(changed)


class ActiveChanges(NamedTuple):
    """What a snapshot built by a delta inherits of its parent's Active silos (``MembershipSnapshot.apply``)."""

    active: tuple[SiloAddress, ...] | None
    """The parent's ``active_silos``, if it had listed them."""
    rings: RingIndex | None
    """The parent's ``ring_index``, if it had built it."""
    left: frozenset[SiloAddress]
    """Silos Active in the parent and not in this snapshot."""
    joined: frozenset[SiloAddress]
    """Silos Active in this snapshot and not in the parent."""


class Lineage(NamedTuple):
    """Where a snapshot comes from (``MembershipSnapshot.lineage``), so that what is derived from a
    whole view can follow a later one by the rows written in between rather than by a pass over
    every row (at 2,000 silos each such pass per new view was a host's largest cost)."""

    origin: object
    """A token of the last snapshot not built by deltas (a read, a pulled view)."""
    written: frozenset[SiloAddress]
    """The silos whose rows the deltas since ``origin`` wrote (added or rewrote)."""

    def written_since(self, other: Lineage) -> frozenset[SiloAddress] | None:
        """The silos whose rows may differ between a view of this lineage and one of ``other``
        (written since the origin in either: both may be built from it on different paths); None
        if they come from different origins."""
        return self.written | other.written if self.origin is other.origin else None


@dataclass(frozen=True)
class MembershipSnapshot:
    """One atomic read of the table (``data``) with derived views of it."""

    data: MembershipTableData
    observed_at: datetime | None = field(default=None, compare=False)
    """When this silo's view became this snapshot (set by ``SnapshotPublisher``): the time its events
    report, however late a consumer (a watch stream, the event log) gets to them."""
    derived: Lineage | None = field(default=None, compare=False, repr=False)
    """For a snapshot deltas built (``apply``): see ``lineage``."""
    inherited: ActiveChanges | None = field(default=None, compare=False, repr=False)
    """For a snapshot a delta built from one that had listed its Active silos: those, and the
    changes (``active_silos`` and ``ring_index`` follow them instead of a pass over every row)."""

    @functools.cached_property
    def lineage(self) -> Lineage:
        """Where this snapshot comes from: the last one not built by deltas, and the silos whose rows
        the deltas since wrote. Two snapshots of one origin differ in those rows only."""
        return self.derived or Lineage(object(), frozenset())

    @property
    def version(self) -> int:
        return self.data.version.version

    @property
    def table_version(self) -> TableVersion:
        return self.data.version

    @property
    def entries(self) -> tuple[MembershipEntry, ...]:
        return self.data.entries

    def entry(self, silo: SiloAddress) -> MembershipEntry | None:
        row = self.data.get(silo)
        return row[0] if row else None

    def status_of(self, silo: SiloAddress) -> SiloStatus:
        entry = self.entry(silo)
        return entry.status if entry else SiloStatus.NONE

    def with_status(self, *statuses: SiloStatus) -> tuple[MembershipEntry, ...]:
        return tuple(entry for entry in self.entries if entry.status in statuses)

    @property
    def large(self) -> bool:
        """More than ``LARGE_VIEW`` rows: see there what a silo of such a cluster does differently."""
        return len(self.data.rows) > LARGE_VIEW

    def in_join_storm(self, options: SiloOptions) -> bool:
        """More silos Joining than ``gossip_fanout``: many starting at once, when gossip of joins
        goes to a few silos only and receivers leave the joins they cannot place to the refresh."""
        return self.joining_count > options.gossip_fanout

    @functools.cached_property
    def joining_count(self) -> int:
        """Silos Joining, counted once per snapshot: every gossip message received asks whether
        the view is in a join storm, and a pass over 2,000 rows each time was 7% of a host's
        samples in a 2,000-silo join."""
        return sum(1 for entry in self.entries if entry.status is SiloStatus.JOINING)

    @functools.cached_property
    def active_silos(self) -> tuple[SiloAddress, ...]:
        """Computed once per snapshot (every probe-target and gossip decision asks for it); from the
        parent's by the delta's changes for a snapshot a delta built (``inherited``)."""
        inherited = self.inherited
        if inherited is None or inherited.active is None:
            return tuple(entry.silo_address for entry in self.with_status(SiloStatus.ACTIVE))
        active = list(inherited.active)  # in address order, as the rows
        for silo in inherited.left:
            active.pop(bisect.bisect_left(active, silo.sort_key, key=_sort_key))
        for silo in inherited.joined:
            active.insert(bisect.bisect_left(active, silo.sort_key, key=_sort_key), silo)
        return tuple(active)

    @functools.cached_property
    def ring_index(self) -> RingIndex:
        """The probe rings of the Active silos (``silo.membership.ring``), once per snapshot; for a
        snapshot a delta built, the parent's edited by the delta's changes rather than sorted again
        (in a 2,000-silo join every silo took in a new view per write, and sorting its rings was
        a sixth of a host's samples)."""
        inherited = self.inherited
        if inherited is None or inherited.rings is None:
            return ring_index(self.active_silos)
        return inherited.rings.updated(inherited.left, inherited.joined)

    @functools.cached_property
    def member_silos(self) -> tuple[SiloAddress, ...]:
        """Every silo not Dead, once per snapshot: the members a lease vouch asks about (their
        nearest successors first: ``silo.membership.ring.successors``)."""
        return tuple(entry.silo_address for entry in self.entries if entry.status is not SiloStatus.DEAD)

    def is_member(self, silo: SiloAddress) -> bool:
        """Whether ``silo`` is one of ``member_silos`` (a row, not Dead), without a pass over the view."""
        entry = self.entry(silo)
        return entry is not None and entry.status is not SiloStatus.DEAD

    def fresh_votes_against(self, silo: SiloAddress, now: datetime, options: SiloOptions) -> int:
        entry = self.entry(silo)
        return len(fresh_votes(entry.suspect_times, now, options.death_vote_expiration)) if entry else 0

    def newer_generations_of(self, silo: SiloAddress) -> tuple[SiloAddress, ...]:
        """Later generations of ``silo``'s endpoint, oldest first. Rows are sorted by address (host,
        port, generation), so they follow the place ``silo`` sorts at: found by bisection, not by a
        pass over the view (asked twice for every view a silo takes in, 2,000 rows each time)."""
        rows = self.data.rows
        at = bisect.bisect_right(rows, silo.sort_key, key=_address_key)
        newer = []
        while at < len(rows) and silo.is_predecessor_of(later := rows[at][0].silo_address):
            newer.append(later)
            at += 1
        return tuple(newer)

    def older_generations_of(self, silo: SiloAddress) -> tuple[MembershipEntry, ...]:
        return tuple(entry for entry in self.entries if entry.silo_address.is_predecessor_of(silo))

    def apply(self, delta: MembershipDelta) -> MembershipSnapshot | None:
        """The snapshot at ``delta.version``, or None unless this one is at a version the delta
        applies to (from ``delta.applies_from`` to its base version).

        Each row of the delta replaces (or adds) its silo's row, keeping the later IAmAlive
        of the two; every other row, and the malformed rows, are as in this snapshot.
        """
        if not delta.applies_from <= self.version <= delta.base_version:
            return None
        rows = list(self.data.rows)  # sorted by address: keep it so, without sorting again
        changed = []
        for entry, etag in delta.rows:
            at = bisect.bisect_left(rows, entry.silo_address.sort_key, key=_address_key)
            if at < len(rows) and rows[at][0].silo_address == entry.silo_address:
                before = rows[at][0]
                if before.i_am_alive_time > entry.i_am_alive_time:
                    entry = entry.replace(i_am_alive_time=before.i_am_alive_time)
                rows[at] = (entry, etag)
            else:
                rows.insert(at, (entry, etag))
            changed.append(rows[at])
        data = MembershipTableData.of_sorted(tuple(rows), delta.version, self.data.malformed)
        data.index_from(self.data, changed)
        origin, written = self.lineage
        return MembershipSnapshot(
            data, derived=Lineage(origin, written | delta.silos), inherited=self._changes(changed)
        )

    def _changes(self, changed: list[tuple[MembershipEntry, str]]) -> ActiveChanges | None:
        """What a snapshot with the ``changed`` rows put in inherits of this one (``inherited``):
        nothing unless this one listed its Active silos already."""
        computed = self.__dict__
        active = computed.get("active_silos")
        if active is None:
            return None
        was_active = {
            entry.silo_address for entry, _ in changed if self.status_of(entry.silo_address) is SiloStatus.ACTIVE
        }
        now_active = {entry.silo_address for entry, _ in changed if entry.status is SiloStatus.ACTIVE}
        return ActiveChanges(
            active, computed.get("ring_index"), frozenset(was_active - now_active), frozenset(now_active - was_active)
        )


def _address_key(row: tuple[MembershipEntry, str]) -> tuple[str, int, int]:
    return row[0].silo_address.sort_key


def _sort_key(silo: SiloAddress) -> tuple[str, int, int]:
    return silo.sort_key


def latest_heartbeats(current: MembershipSnapshot, reread: MembershipSnapshot) -> MembershipSnapshot:
    """``reread`` (same version as ``current``) with each row's IAmAlive never older than in ``current``."""
    rows = []
    for entry, etag in reread.data.rows:
        before = current.entry(entry.silo_address)
        if before is not None and before.i_am_alive_time > entry.i_am_alive_time:
            entry = entry.replace(i_am_alive_time=before.i_am_alive_time)
        rows.append((entry, etag))
    return MembershipSnapshot(MembershipTableData(tuple(rows), reread.data.version))


class SnapshotPublisher:
    """Holds the latest snapshot and wakes subscribers when a newer version arrives.

    ``now`` stamps each newer snapshot's ``observed_at`` as it becomes current.
    """

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now
        self._current: MembershipSnapshot | None = None
        self._refreshes = 0
        self._closed = False
        self._changed = asyncio.Condition()

    @property
    def current(self) -> MembershipSnapshot | None:
        return self._current

    async def publish(self, snapshot: MembershipSnapshot) -> bool:
        """Make ``snapshot`` current if it is newer; True if it was a new version.

        A snapshot at the current version is merged (``latest_heartbeats``) and wakes only
        the subscribers that asked for refreshes; an older one is dropped.
        """
        current = self._current
        if current is not None and snapshot.version < current.version:
            return False
        newer = current is None or snapshot.version > current.version
        if current is not None and not newer:
            snapshot = replace(latest_heartbeats(current, snapshot), observed_at=current.observed_at)
        elif self._now is not None:
            snapshot = replace(snapshot, observed_at=self._now())
        async with self._changed:
            self._current = snapshot
            self._refreshes += 1
            self._changed.notify_all()
        return newer

    async def reached(self, version: int) -> None:
        """Return once the current snapshot is at ``version`` or later (or the publisher is closed)."""

        def ready() -> bool:
            return self._closed or (self._current is not None and self._current.version >= version)

        async with self._changed:
            await self._changed.wait_for(ready)

    async def close(self) -> None:
        """End every subscription."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    async def subscribe(self, *, include_refreshes: bool = False) -> AsyncIterator[MembershipSnapshot]:
        """The current snapshot, then each newer one, in version order, until closed.

        A slow consumer skips versions it was too slow to see (it always gets the latest);
        with ``include_refreshes`` it also gets same-version re-reads.
        """
        seen_version = -1
        seen_refresh = -1

        def ready() -> bool:
            if self._closed:
                return True
            if self._current is None:
                return False
            return self._current.version > seen_version or (include_refreshes and self._refreshes > seen_refresh)

        while True:
            async with self._changed:
                await self._changed.wait_for(ready)
                if self._closed:
                    return
                snapshot = self._current
                seen_refresh = self._refreshes
            assert snapshot is not None
            seen_version = snapshot.version
            yield snapshot
