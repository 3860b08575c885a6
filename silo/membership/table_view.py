"""This silo's view of the membership table: what every role of the table manager shares.

It holds the latest snapshot and publishes only newer ones, takes in full reads, learned views
(a delta applied, a peer's view) and our own writes (the write as a delta, applied here when we
hold its base version, then handed to the gossiper), and decides when this silo must terminate
itself (it reads or learns itself Dead, finds a newer generation of itself, or its row vanished
after it joined). ``catch_up`` brings a view that is behind to the table's version, reading
only the rows written since it where the store can. The roles that act on the table
(``row_writer``, ``vote_caster``, ``gossip_catch_up``, ``table_refresh``, ``lease_keeper``) read
and move the view through it; ``table_manager`` puts them together.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from membership_tables import (
    UNINITIALIZED_VERSION,
    CommittedWrite,
    MalformedRow,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
)
from silo.membership.clock import Clock, with_timeout
from silo.membership.lease import LEASE_STATUSES, MembershipLease
from silo.membership.liveness import LivenessTracker
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import MembershipDelta, MembershipSnapshot, SnapshotPublisher, rows_written_between
from silo.membership.table_access import BlockingRunner, TableAccess, run_in_thread

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

OnWrite = Callable[[GossipMessage, MembershipSnapshot, tuple[SiloAddress, ...]], None]
"""Called after every successful versioned write with the gossip that announces it (the write
as a delta), the snapshot after it and the silos it declared Dead (gossip must reach them too)."""

FetchView = Callable[[SiloAddress, float], Awaitable[MembershipTableData]]
"""Ask a peer for its view of the table (GetMembership) within a timeout; raises if it cannot."""

RECENT_WRITES = 16
"""Steps between our recent views remembered for ``MembershipDelta.since_version``."""


class TableView:
    """The latest snapshot of the table, how it moves, and the judge of self-termination."""

    def __init__(
        self,
        *,
        table: MembershipTable,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        run_blocking: BlockingRunner = run_in_thread,
        on_write: OnWrite | None = None,
        fetch_view: FetchView | None = None,
        observer: MembershipObserver = NULL_OBSERVER,
    ) -> None:
        self.table = table
        self.address = address
        self.options = options
        self.clock = clock
        self.observer = observer
        self._on_write = on_write
        self._fetch_view = fetch_view
        self.publisher = SnapshotPublisher(clock.now)
        self.terminated = asyncio.Event()
        self.access = TableAccess(
            address=address, options=options, clock=clock, run_blocking=run_blocking, give_up=self.terminated.is_set
        )
        self.termination_reason = ""
        self.joined_version: int | None = None
        """The version at which our row was inserted (a row gone after it means we were removed)."""
        self.joining = False
        """Our row is in the table as Joining and we have not written another status of ours yet."""
        self.leaving = False
        self.announced_version = UNINITIALIZED_VERSION.version
        """The newest version gossip or a lost write told us the table has (lowered by a full
        read that is older)."""
        self.periods_since_full_read = 0
        """Periodic refreshes since the last full read (of any cause)."""
        self.unconfirmed_writes = False
        """A write of ours failed with an unknown outcome and no full read came since."""
        self._reported_malformed: frozenset[MalformedRow] = frozenset()
        self._recent_writes: collections.deque[ViewStep] = collections.deque(maxlen=RECENT_WRITES)
        """The steps between our last views, in order and contiguous: what lets our own write's
        delta apply to older views (``_applies_from``)."""
        self._empty = MembershipSnapshot(MembershipTableData((), UNINITIALIZED_VERSION))
        self.liveness = LivenessTracker(options, clock.monotonic)
        """Which peers are fresh, on our own monotonic clock (fed by every read)."""
        self.lease = MembershipLease(options.lease_timeout, clock.monotonic)
        """When the table last confirmed us Active (``silo.membership.lease``)."""
        self.current_at: float | None = None
        """The start of the newest read our view is as new as: later writes came after (``catch_up``)."""

    @property
    def snapshot(self) -> MembershipSnapshot:
        return self.publisher.current or self._empty

    @property
    def newest_version_heard(self) -> int:
        """The newest table version we know exists: our view's, or one gossip, a lost race or a peer's ask announced."""
        return max(self.announced_version, self.snapshot.version)

    def hear_of(self, version: int) -> None:
        """A peer (gossip, a ``ConfirmMembership`` ask, a joiner's ping) or our own write says the
        table has reached ``version``: we vouch for no older view in an outage until a read."""
        self.announced_version = max(self.announced_version, version)

    @property
    def table_down(self) -> bool:
        """True once table calls have failed for ``probe_timeout`` with no success in between."""
        return self.access.unavailable_for() >= self.options.probe_timeout

    def terminate(self, reason: str) -> None:
        """Signal the runtime to stop serving at once; the first reason wins."""
        if self.terminated.is_set():
            return
        self.termination_reason = reason
        logger.warning("silo %s terminates itself: %s", self.address, reason)
        self.terminated.set()

    # --- reads ---------------------------------------------------------------------------

    async def refresh(self, deadline: float | None = None) -> MembershipSnapshot:
        """Read the whole table, publish it if newer, and check whether we must terminate."""
        called = self.clock.monotonic()
        started, data = await self.access.call_timed(self.table.read_all, deadline)
        self.observer.refresh_completed(self.clock.monotonic() - called)
        # taken in first: a read that brings a newer view renews the lease with it (confirmed
        # before, it never did, since the view was older than the read; in a join storm the
        # version moves between any two reads, so no full read ever renewed a lease)
        snapshot = await self.accept(data)
        self.confirm_lease(data, started)
        return snapshot

    def confirm_lease(self, data: MembershipTableData, started: float) -> None:
        """Renew the lease if ``data``, read by a call started at ``started``, holds our row Active
        and our view is at least as new as that read: the lease also vouches that our view (who
        owns which key) was current at ``started``, so a silo that missed a join stops serving the
        keys the newcomer took before the newcomer starts (``silo.runtime.ownership``).

        Only our own row matters: a read of other rows (a vote's read of its target) says
        nothing of ours, however new its version. A draining silo (ShuttingDown) keeps its lease:
        the others hold its keys for it until it writes itself Dead (``silo.runtime.ownership``).
        Whatever our row says, such a read dates our view (``current_at``)."""
        if self.snapshot.version < data.version.version:
            return
        self.current_at = started if self.current_at is None else max(self.current_at, started)
        found = data.get(self.address)
        if found is not None and found[0].status in LEASE_STATUSES:
            self.lease.confirm(started)

    async def accept(self, data: MembershipTableData) -> MembershipSnapshot:
        """Take in a full read of the table."""
        self.periods_since_full_read = 0
        self.unconfirmed_writes = False  # whatever committed is in this read
        # gossip cannot announce a version the table does not have yet; one that did was bogus
        self.announced_version = min(self.announced_version, data.version.version)
        self._report_malformed(data.malformed)
        snapshot = MembershipSnapshot(data)
        self.liveness.observe(snapshot)
        return await self._publish(snapshot)

    async def accept_learned(
        self, snapshot: MembershipSnapshot, rows: tuple[MembershipEntry, ...], written: frozenset[SiloAddress] | None
    ) -> None:
        """Take in a snapshot not read from the table (a delta applied, a peer's view); ``rows`` are the new ones.

        If it would make this silo terminate (it says we are Dead, lost our row, or were
        superseded), the table decides instead: we re-read it, and only if that fails do we
        trust the peer. A hostile or buggy peer can then mislead our view until the next read,
        but never make us stop serving, and a vote decided on a misled view loses its write
        (conditioned on the view's version etag) unless the peer's view holds the table's
        own version and etag.
        """
        if snapshot.version <= self.snapshot.version:
            return
        if self._reason_to_stop(snapshot) is not None:
            try:
                await self.refresh()
                return
            except TableUnavailableError:
                logger.warning(
                    "silo %s: a peer says this silo must stop (table version %d) and the table is unreachable",
                    self.address, snapshot.version,
                )  # fmt: skip
        self.liveness.learn(rows)
        await self._publish(snapshot, written)

    def _reason_to_stop(self, snapshot: MembershipSnapshot) -> str | None:
        """Why ``snapshot`` says this silo must terminate (its own row, or a newer generation of it); None if not."""
        reason = self.own_row_verdict(snapshot.entry(self.address), snapshot.version)
        if reason is None and (newer := snapshot.newer_generations_of(self.address)):
            reason = f"superseded by a newer generation of this endpoint: {newer[0]}"
        return reason

    async def _publish(
        self, snapshot: MembershipSnapshot, written: frozenset[SiloAddress] | None = None
    ) -> MembershipSnapshot:
        """Make ``snapshot`` current if newer, and remember which rows moved (``written``: the rows
        written since the current snapshot if known, else found by comparing the two)."""
        previous = self.publisher.current
        if await self.publisher.publish(snapshot) and previous is not None:
            self._remember_writes(previous, snapshot, written)
        reason = self._reason_to_stop(snapshot)
        if reason is not None:
            self.terminate(reason)
        return self.snapshot

    async def apply(self, delta: MembershipDelta) -> bool:
        """Build the next snapshot from ``delta`` if we hold its base version; True if we did (or were past it)."""
        past, following = self._place(delta)
        if following is not None:
            await self.accept_learned(following, delta.entries, delta.silos)
        return past or following is not None

    def _place(self, delta: MembershipDelta) -> tuple[bool, MembershipSnapshot | None]:
        """Where ``delta`` stands against our view: (True, None) if our view is already at or past its
        version; else (False, the snapshot it leads to from our view, or None if we miss a write before it)."""
        if self.snapshot.version >= delta.version.version:
            return True, None
        return False, self.snapshot.apply(delta)

    def _remember_writes(
        self, previous: MembershipSnapshot, current: MembershipSnapshot, written: frozenset[SiloAddress] | None
    ) -> None:
        self._recent_writes.append(ViewStep(previous, current, written))

    def _applies_from(self, base_version: int, silos: frozenset[SiloAddress]) -> int:
        """The oldest version our write at ``base_version + 1`` (of ``silos``' rows) applies to: back
        through our recent views while every row written since is one our write puts in too."""
        since = base_version
        for step in reversed(self._recent_writes):
            if step.end != since:
                break
            written = step.written()
            if written is None or not written <= silos:  # None: a row was removed, no delta spans that
                break
            since = step.start
        return since

    def _report_malformed(self, malformed: tuple[MalformedRow, ...]) -> None:
        """Log each malformed row once, when a read first reports it (again if it comes back after a
        repair). The store skips such rows, so this silo neither probes nor votes on them."""
        current = frozenset(malformed)
        for row in sorted(current - self._reported_malformed):
            logger.error(
                "silo %s: the membership table holds a malformed row, which every silo skips: %s: %s. "
                "Repair or delete it by hand (`silo status` lists them)",
                self.address, row.key, row.reason,
            )  # fmt: skip
        self._reported_malformed = current

    def own_verdict_in(self, data: MembershipTableData) -> str | None:
        """``own_row_verdict`` of our row in a read of the table (or of our row alone)."""
        row = data.get(self.address)
        return self.own_row_verdict(row[0] if row else None, data.version.version)

    def own_row_verdict(self, entry: MembershipEntry | None, version: int) -> str | None:
        """Why our own row (``entry``, None if absent, at table ``version``) says we must terminate; None if not."""
        if entry is not None and entry.status is SiloStatus.DEAD and not self.leaving:
            killer = entry.suspect_times[-1][0] if entry.suspect_times else "itself or an operator"
            return f"the table says this silo is Dead (declared by {killer})"
        if entry is None and self.joined_version is not None and version > self.joined_version:
            return f"this silo's row is gone from table version {version}"
        return None

    async def pull_view(self, peer: SiloAddress, version: int) -> bool:
        """Take ``peer``'s view if it holds ``version`` or later; False if it cannot be had or is older."""
        if self._fetch_view is None:
            return False
        try:
            data = await self._fetch_view(peer, self.options.probe_timeout)
        except Exception as exc:  # any failure of a peer: read the table instead
            logger.debug("silo %s: could not fetch %s's view of version %d: %r", self.address, peer, version, exc)
            return False
        if data.version.version < version:
            return False
        await self.accept_learned(MembershipSnapshot(data), data.entries, None)
        return True

    async def brought_by_gossip(self, version: int, within: float | None = None) -> bool:
        """Whether gossip brings us ``version`` within ``within`` seconds (``probe_timeout``). A
        version read that shows a change often races the change's own gossip: in one 1,000-silo
        kill, 42 of the 99 silos whose read showed the vote or the death asked a peer that did
        not have it yet and read the whole table, 13 of them although the gossip had reached
        them meanwhile."""
        try:
            await with_timeout(
                self.clock, self.publisher.reached(version), self.options.probe_timeout if within is None else within
            )
        except TimeoutError:
            return False
        return True

    # --- our own writes --------------------------------------------------------------------

    async def unconfirmed_if_failed(self, write: Awaitable[_T]) -> _T:
        """``write``'s result; if it fails, it may still have committed: remember that until a full read."""
        try:
            return await write
        except TableUnavailableError:
            self.unconfirmed_writes = True
            raise

    async def after_write(
        self, committed: CommittedWrite, declared_dead: tuple[SiloAddress, ...] = (), *, reread_if_behind: bool = True
    ) -> None:
        """Take in our own write and announce it: the write as a delta, applied here if we hold its
        base version (no re-read). If we do not (another write landed between our view and our
        write: e.g. a vote whose gossip is still on its way to us), the gossip goes out first and
        our full re-read after it: receivers at the base version need nothing from our read, and
        a death must not wait for it. ``reread_if_behind=False`` keeps our older view instead
        (the periodic refresh catches up)."""
        self.hear_of(committed.version.version)  # even while our view lags it (a join storm's insert)
        base = committed.version.version - 1
        delta = MembershipDelta(base, committed.version, committed.rows)
        since = self._applies_from(base, delta.silos) if self.snapshot.version == base else base
        if since < base:
            delta = dataclasses.replace(delta, since_version=since)
        past, following = self._place(delta)  # past: a later write's gossip came first
        behind = not past and following is None
        if behind and self.publisher.current is None:  # no view yet to address the gossip with
            await self._reread_after_write()
            behind = False
        if self._on_write is not None:
            # before our own view takes the write in: its subscribers (the health monitor, the event
            # log, watch streams) then run while the sends are on their way, not before them
            self._on_write(GossipMessage(delta.version.version, delta), following or self.snapshot, declared_dead)
        if following is not None:
            await self.accept_learned(following, delta.entries, delta.silos)
        if behind and reread_if_behind:
            await self._reread_after_write()

    async def _reread_after_write(self) -> None:
        try:
            await catch_up(self)
        except TableUnavailableError:
            logger.debug("silo %s: could not re-read the table after its write", self.address)


class ViewStep:
    """One step between two of our views: their versions, and the silos whose rows differ, found
    only when asked (``rows_written_between`` is a pass over both views' rows, and a step is asked
    about only when we write; on every full read of a 2,000-silo join storm it was a seventh of a
    host's samples)."""

    def __init__(
        self, previous: MembershipSnapshot, current: MembershipSnapshot, written: frozenset[SiloAddress] | None
    ) -> None:
        """``written``: the silos whose rows were written, if known (a delta's); None: compare the views."""
        self.start, self.end = previous.version, current.version
        self._rows = (previous.data.rows, current.data.rows) if written is None else None
        """The two views' rows (not the views: their caches would be kept too), until compared."""
        self._written = written

    def written(self) -> frozenset[SiloAddress] | None:
        """The silos whose rows were added or rewritten; None if a row was removed."""
        if self._rows is not None:
            self._written = rows_written_between(*self._rows)
            self._rows = None
        return self._written


RECENT_VIEW_SHARE = 0.5
"""The share of ``defunct_silo_expiration`` within which the newest read our view is as new as
(``TableView.current_at``) makes it recent enough for a read of the changes (``catch_up``)."""


def changes_suffice(view: TableView) -> bool:
    """Whether reading the rows written since our view brings it up to date (``catch_up``)."""
    recent = view.options.defunct_silo_expiration * RECENT_VIEW_SHARE
    dated = view.current_at
    return view.table.reads_changes and dated is not None and view.clock.monotonic() - dated < recent


async def catch_up(view: TableView, deadline: float | None = None) -> MembershipSnapshot:
    """Bring ``view`` to the table's current version and renew the lease as a full read would
    (``TableView.refresh``), by reading only the rows written since our view where that suffices.

    A view is behind when its lease read shows a newer version, its write landed after another's,
    or gossip announced a change it cannot place; in a join storm that is nearly every step, and
    full reads for it were most of a 1,000-silo storm's CPU (the lease's catch-up alone 45% of
    them). Where the store reads changes (``MembershipTable.reads_changes``) we read the rows
    written after our view's version and put them in as one delta applying from it
    (``MembershipDelta.since_version``): a view at version v is the table at v however it got there
    (a full read, deltas on their bases, a peer's view), so it becomes the table at the version
    read. What such a read cannot show: heartbeats (not versioned; the periodic refresh reads in
    full every ``full_refresh_every`` periods), and rows deleted since. The cleanup deletes only a
    Dead row whose last activity is ``defunct_silo_expiration`` old, and a row written after our
    view was written after the start of the newest read our view holds (``current_at``), so
    within half that expiration of it (the other half covers the writer's and the cleaner's wall
    clocks) no such deletion can be missed (``changes_suffice``). Otherwise, or when
    the rows cannot be put in (a malformed one among them, no row for a version that moved), we
    read in full."""
    if not changes_suffice(view):
        return await view.refresh(deadline)
    since = view.snapshot.version
    started, data = await view.access.call_timed(functools.partial(view.table.read_changes, since), deadline)
    version = data.version.version
    if version < since or data.malformed or (version > since and not data.rows):
        return await view.refresh(deadline)
    # the table cannot be behind a version it was read at: gossip that announced a newer one was bogus
    view.announced_version = min(view.announced_version, version)
    if version > since:
        delta = MembershipDelta(version - 1, data.version, data.rows, since_version=since)
        if not await view.apply(delta):
            return await view.refresh(deadline)
    # our view now holds the table at ``version`` or later, our own row with it
    view.confirm_lease(view.snapshot.data, started)
    return view.snapshot
