"""Immutable membership snapshots and the publisher that hands them out in version order.

A ``MembershipSnapshot`` is one atomic table read plus derived helpers. The publisher
accepts a snapshot only if its version is newer than the current one, so no consumer ever
sees an older view after a newer one. A re-read at the *same* version (only heartbeats
changed) is merged into the current snapshot quietly, each row keeping the later of its
two IAmAlive times (two reads can complete out of order): not a membership change.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.membership.options import SiloOptions
from silo.membership.votes import fresh_votes


@dataclass(frozen=True)
class MembershipSnapshot:
    """One atomic read of the table (``data``) with derived views of it."""

    data: MembershipTableData

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
    def active_silos(self) -> tuple[SiloAddress, ...]:
        return tuple(entry.silo_address for entry in self.with_status(SiloStatus.ACTIVE))

    def fresh_votes_against(self, silo: SiloAddress, now: datetime, options: SiloOptions) -> int:
        entry = self.entry(silo)
        return len(fresh_votes(entry.suspect_times, now, options.death_vote_expiration)) if entry else 0

    def newer_generations_of(self, silo: SiloAddress) -> tuple[SiloAddress, ...]:
        return tuple(entry.silo_address for entry in self.entries if silo.is_predecessor_of(entry.silo_address))

    def older_generations_of(self, silo: SiloAddress) -> tuple[MembershipEntry, ...]:
        return tuple(entry for entry in self.entries if entry.silo_address.is_predecessor_of(silo))


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
    """Holds the latest snapshot and wakes subscribers when a newer version arrives."""

    def __init__(self) -> None:
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
            snapshot = latest_heartbeats(current, snapshot)
        async with self._changed:
            self._current = snapshot
            self._refreshes += 1
            self._changed.notify_all()
        return newer

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
