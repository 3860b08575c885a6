"""The table manager: the only role that writes to the membership table.

It holds the latest snapshot and publishes only newer ones; refreshes every
``table_refresh_timeout`` (first tick randomized) and catches up when gossip announces a newer
version (applying the gossiped write as a delta when it holds the base version, else pulling
the sender's view, else re-reading); writes the silo's own row, suspicion votes and death
declarations as read-modify-write with ``update_rows_with_etags(((entry, row_etag),),
read.version.next())``, then builds the next snapshot from its own write (no re-read) and hands
the write to the gossiper; and decides when this silo must terminate itself (it reads or
learns itself Dead, finds a newer generation of itself, or its row vanished after it joined).

The periodic refresh is cheap: it reads only the version, and the whole table when the
version moved, every ``full_refresh_every`` periods (heartbeats do not move the version), and
every period for one full-read interval after a failed table call (so peers' heartbeats are
seen again soon after an outage; docs/protocol.md, "Freshness on our own clock").

Safety when the table is down: infrastructure errors are retried with exponential
backoff and jitter, never turned into a vote. The table is *down* once calls have failed
for ``probe_timeout`` without a success in between; one failed call is a hiccup and
suspends nothing. While it is down no vote is attempted (a vote needs a fresh read), and
votes are never retried across an outage (their evidence would be stale). Heartbeats that
lapsed during an outage do not shrink the quorum: the ``LivenessTracker`` does not count
time during which we could not read.

Under mutual TLS (``trusted_gossip``) a vote is decided on the silo's view when the table cannot
say otherwise (no newer version announced, every Active silo fresh), the write being
conditioned on the view's version: the monitors of a dead silo, which vote within moments of
each other, then read nothing (a loser waits briefly for the winner's gossip and decides
again). Otherwise, and when that gossip does not come, it reads the table first. Lost races are
normal: a vote that loses is retried on a fresh read as soon as the winner's gossip came (or
after a brief wait for it), up to ``VOTE_ATTEMPTS`` times, so a quorum is not delayed by a whole
probe round; when that gossip shows the target Dead (the winner completed its quorum), nothing
is read. Votes of ours that come together are cast in
one write (several deaths, one version).

With ring sampling (more fresh Active silos than ``num_probed_silos + 1``) the majority rule
sees only a sample, so the table arbitrates a death (``votes.arbitrate_cut``): a vote that
would complete a quorum while suspicions are correlated (votes against other silos in the
table, or other targets of ours unheard) records itself, waits ``settle_time`` for the other
side's votes to land, and re-decides on a fresh read; a death the accusations put on the
larger side of a cut is withheld.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import functools
import logging
import random as random_module
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta
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
from silo.membership.background import BackgroundTasks
from silo.membership.clock import Clock, Periodic, with_timeout
from silo.membership.gossiper import gossip_peers
from silo.membership.lease import MembershipConfirmation, MembershipLease, PeerVerdict, judge_confirmations
from silo.membership.liveness import LivenessTracker
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import MembershipDelta, MembershipSnapshot, SnapshotPublisher, rows_written_between
from silo.membership.table_access import BlockingRunner, TableAccess, run_in_thread
from silo.membership.votes import (
    VoteDecision,
    VoteKind,
    accusations,
    arbitrate_cut,
    correlated_suspicions,
    decide_vote,
)

logger = logging.getLogger(__name__)


def _retrieve(future: asyncio.Future[MembershipTableData]) -> None:
    """Mark a lease read's failure as seen: nobody may await it any more."""
    if not future.cancelled():
        future.exception()


_T = TypeVar("_T")


class VoteOutcome(enum.Enum):
    VOTED = "voted"
    DECLARED_DEAD = "declared_dead"
    ALREADY_GONE = "already_gone"
    """The target is Dead or absent already."""
    LOST_RACE = "lost_race"
    """Someone wrote first; the next failed probe votes again on a fresh read."""
    NOT_ALLOWED = "not_allowed"
    """The table is or just was unreachable, or this silo is not a live member."""
    WITHHELD = "withheld"
    """Ring sampling: our vote would complete the quorum, but the table's accusations put the
    target on the larger side of a cut; the vote is recorded, the death is not."""
    SETTLING = "settling"
    """Ring sampling amid correlated suspicions: the vote is recorded and the death decided
    after ``settle_time`` on a fresh read (``try_vote`` waits and retries; never returned)."""


OnWrite = Callable[[GossipMessage, MembershipSnapshot, tuple[SiloAddress, ...]], None]
"""Called after every successful versioned write with the gossip that announces it (the write
as a delta), the snapshot after it and the silos it declared Dead (gossip must reach them too)."""

FetchView = Callable[[SiloAddress, float], Awaitable[MembershipTableData]]
"""Ask a peer for its view of the table (GetMembership) within a timeout; raises if it cannot."""

AskConfirmation = Callable[[SiloAddress, float], Awaitable[MembershipConfirmation]]
"""Ask a peer to read our row from the table (ConfirmMembership) within a timeout; raises if it cannot."""


@dataclasses.dataclass
class _Ballot:
    """One queued vote of ours (``try_vote``'s attempt) and where its outcome goes."""

    target: SiloAddress
    others_unheard: bool
    settled: bool
    outcome: asyncio.Future[VoteOutcome]


RECENT_WRITES = 16
"""Steps between our recent views remembered for ``MembershipDelta.since_version``."""

VOTE_ATTEMPTS = 3
"""Fresh read-and-write attempts of one vote when other writers win the race (and, before
them, attempts on our view while gossip keeps it current: ``_cast_on_view``)."""

VIEW_VOTE_GOSSIP_WAIT = 0.2
"""Share of ``probe_timeout`` a lost vote (decided on our view, or on a read) waits for the
winner's gossip before it reads the table: the winner gossips as soon as it wrote (tens of
milliseconds on one machine; 0.1 s in the local preset, 1 s in production)."""

ROW_READ_COST_IN_ROWS = 20
"""About how many rows of a full read one ``read_row`` costs: its round trip against decoding
rows (benchmarks.tables, ``read_all`` of 10 against 1,000 rows: ~50 on PostgreSQL, ~30 on
MariaDB, ~10 on SQLite). ``reread_rows`` reads rows one by one only while that is cheaper."""


class MembershipTableManager:
    """The only writer of the table; the source of snapshots; the judge of self-termination."""

    def __init__(
        self,
        *,
        table: MembershipTable,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        random: random_module.Random,
        run_blocking: BlockingRunner = run_in_thread,
        on_write: OnWrite | None = None,
        fetch_view: FetchView | None = None,
        ask_confirmation: AskConfirmation | None = None,
        observer: MembershipObserver = NULL_OBSERVER,
        trusted_gossip: bool = False,
    ) -> None:
        """``trusted_gossip``: only members of the cluster can send us gossip (mutual TLS with
        silo certificates), so a view built from it is as trustworthy as the table (any member
        may write the table): votes may then be decided on the view (``_cast_on_view``). Without
        it anyone who reaches our port may send gossip, and votes read the table first."""
        self._table = table
        self._trusted_gossip = trusted_gossip
        self._address = address
        self._options = options
        self._clock = clock
        self._random = random
        self._on_write = on_write
        self._fetch_view = fetch_view
        self._ask_confirmation = ask_confirmation
        self._observer = observer
        self.publisher = SnapshotPublisher(clock.now)
        self.terminated = asyncio.Event()
        self._access = TableAccess(
            address=address, options=options, clock=clock, run_blocking=run_blocking, give_up=self.terminated.is_set
        )
        self.termination_reason = ""
        self._joined_version: int | None = None
        self._leaving = False
        self._refresher: Periodic | None = None
        self._requested: asyncio.Task[None] | None = None
        self._requested_at = 0.0
        self._reported_malformed: frozenset[MalformedRow] = frozenset()
        self._gossip_read: asyncio.Task[None] | None = None
        self._caught_up_at: float | None = None
        """When the last catch-up for gossip ended (monotonic)."""
        self._announced_version = UNINITIALIZED_VERSION.version
        """The newest version gossip or a lost write told us the table has (lowered by a full
        read that is older)."""
        self._periods_since_full_read = 0
        """Periodic refreshes since the last full read (of any cause)."""
        self._recent_writes: collections.deque[tuple[int, int, frozenset[SiloAddress]]] = collections.deque(
            maxlen=RECENT_WRITES
        )
        """(version, later version, silos whose rows were written in between) for our last views, in
        order and contiguous: what lets our own write's delta apply to older views (``_applies_from``)."""
        self._ballots: list[_Ballot] = []
        self._casting = False
        self._cast_tasks = BackgroundTasks()
        self._empty = MembershipSnapshot(MembershipTableData((), UNINITIALIZED_VERSION))
        self.liveness = LivenessTracker(options, clock.monotonic)
        """Which peers are fresh, on our own monotonic clock (fed by every read)."""
        self.lease = MembershipLease(options.lease_timeout, clock.monotonic)
        """When the table last confirmed us Active (``silo.membership.lease``)."""
        self._lease_renewer: Periodic | None = None
        self._unconfirmed_writes = False
        """A write of ours failed with an unknown outcome and no full read came since."""
        self._outage_logged = False
        self._caller_read_at: float | None = None
        """When a Work caller's newer view last made us read the table (``catch_up_to``)."""
        self._pending_reads: dict[SiloAddress, tuple[float, asyncio.Future[MembershipTableData]]] = {}
        """Row reads for the lease still running, by silo, with their start (``_read_within``)."""

    @property
    def snapshot(self) -> MembershipSnapshot:
        return self.publisher.current or self._empty

    @property
    def table_available(self) -> bool:
        return self._access.available

    @property
    def table_down(self) -> bool:
        """True once table calls have failed for ``probe_timeout`` with no success in between."""
        return self._access.unavailable_for() >= self._options.probe_timeout

    def can_vote(self) -> bool:
        """False once this silo terminated or while the table is down (one failed call is not enough)."""
        return not self.terminated.is_set() and not self.table_down

    def mark_leaving(self) -> None:
        """This silo is about to write itself Dead: reading that back is not a reason to terminate."""
        self._leaving = True

    def terminate(self, reason: str) -> None:
        """Signal the runtime to stop serving at once; the first reason wins."""
        if self.terminated.is_set():
            return
        self.termination_reason = reason
        logger.warning("silo %s terminates itself: %s", self._address, reason)
        self.terminated.set()

    def deadline_in(self, seconds: float) -> float:
        return self._access.deadline_in(seconds)

    # --- reads ---------------------------------------------------------------------------

    async def initialize(self, deadline: float | None) -> None:
        await self._access.call(functools.partial(self._table.initialize, try_init_version=True), deadline)

    async def refresh(self, deadline: float | None = None) -> MembershipSnapshot:
        """Read the whole table, publish it if newer, and check whether we must terminate."""
        started = self._clock.monotonic()
        data = await self._access.call(self._table.read_all, deadline)
        self._observer.refresh_completed(self._clock.monotonic() - started)
        self._confirm_lease(data, started)
        return await self._accept(data)

    async def reread_rows(
        self, silos: Collection[SiloAddress], deadline: float | None = None
    ) -> dict[SiloAddress, MembershipEntry | None]:
        """The current rows of ``silos`` (None: no row, or a malformed one), read the cheaper way.

        One ``read_row`` each, and one of our own row, in one blocking call, while they cost
        fewer rows than a full read (``ROW_READ_COST_IN_ROWS``); else a full ``refresh``. For a
        joiner that re-reads the few silos it has not reached yet every ``probe_timeout``: a full
        read each round by each of hundreds of joiners was most of a 1,000-silo join storm's CPU,
        and slowed the answers they waited for. Their heartbeats are watched as a full read's
        are; the snapshot is not replaced (the rows alone are no view of the table). If our own
        row says we must stop, the whole table is re-read, which terminates this silo.
        """
        wanted = [silo for silo in dict.fromkeys(silos) if silo != self._address]
        if (len(wanted) + 1) * ROW_READ_COST_IN_ROWS >= len(self.snapshot.entries):
            snapshot = await self.refresh(deadline)
            return {silo: snapshot.entry(silo) for silo in wanted}

        def read() -> list[MembershipTableData]:
            return [self._table.read_row(silo) for silo in (*wanted, self._address)]

        *reads, own = await self._access.call(read, deadline)
        rows = {silo: (data.entries[0] if data.entries else None) for silo, data in zip(wanted, reads, strict=True)}
        self.liveness.learn(row for row in rows.values() if row is not None)
        if self._own_verdict_in(own) is not None:
            await self.refresh(deadline)
        return rows

    def _confirm_lease(self, data: MembershipTableData, started: float) -> None:
        """Renew the lease if ``data``, read by a call started at ``started``, holds our row Active
        and our view is at least as new as that read: the lease also vouches that our view (who
        owns which key) was current at ``started``, so a silo that missed a join stops serving the
        keys the newcomer took before the newcomer starts (``silo.runtime.ownership``).

        Only our own row matters: a read of other rows (a vote's read of its target) says
        nothing of ours, however new its version."""
        found = data.get(self._address)
        if found is not None and found[0].status is SiloStatus.ACTIVE and self.snapshot.version >= data.version.version:
            self.lease.confirm(started)

    async def renew_lease(self) -> None:
        """Read our own row unless a call confirmed us within ``lease_renew_interval``.

        One row, not the table: every silo does this every quarter of ``lease_timeout``. If the
        row says we must stop, the whole table is re-read, which terminates this silo. A failure
        just leaves the lease to run out: the runtime fences on its own."""
        interval = self._options.lease_renew_interval
        if self.lease.age() < interval or self.terminated.is_set() or self._leaving:
            return
        if self.snapshot.status_of(self._address) is not SiloStatus.ACTIVE:
            return  # not a member yet (joining) or not any more (leaving)
        pending = self._pending_reads.get(self._address)
        if pending is not None and not pending[1].done():
            # our last read still hangs (a store whose packets are dropped): go to the peers at
            # once, every renewal, rather than spend half of each round waiting on it again
            await self._confirm_through_peers()
            return
        read = await self._read_within(self._address, interval / 2)
        if read is None:
            await self._confirm_through_peers()
            return
        started, data = read
        self._outage_logged = False
        behind = data.version.version > self.snapshot.version
        if self._own_verdict_in(data) is not None or (
            behind and not await self._brought_by_gossip(data.version.version, interval / 2)
        ):
            # we must stop (the read terminates us), or our view is behind and no gossip brought
            # the change: a full read, which confirms the lease by itself
            with contextlib.suppress(TimeoutError, TableUnavailableError):
                await with_timeout(self._clock, self.refresh(), interval)
            return
        self._confirm_lease(data, started)

    async def _read_within(self, silo: SiloAddress, timeout: float) -> tuple[float, MembershipTableData] | None:
        """``silo``'s row read in one attempt, awaited at most ``timeout``, with the time the read
        started; None if it failed or is still running. A read still running from an earlier
        call is awaited again, never started twice: on a store whose packets are dropped, reads
        hang until the driver's deadline, and starting one per lease renewal would fill the
        worker threads every other table call needs."""
        pending = self._pending_reads.get(silo)
        if pending is None or pending[1].done():
            read: asyncio.Future[MembershipTableData] = asyncio.ensure_future(
                self._access.call(functools.partial(self._table.read_row, silo), None)
            )
            read.add_done_callback(_retrieve)
            pending = self._pending_reads[silo] = (self._clock.monotonic(), read)
        started, future = pending
        try:
            data = await with_timeout(self._clock, asyncio.shield(future), timeout)
        except (TimeoutError, TableUnavailableError):
            return None
        self._pending_reads.pop(silo, None)
        return started, data

    async def _confirm_through_peers(self) -> None:
        """Our table calls fail: ask every other non-Dead member of our view to read our row
        (``silo.membership.lease``, "Through peers"), and renew the lease as their answers allow."""
        ask_peer = self._ask_confirmation
        if ask_peer is None:
            return
        snapshot, timeout = self.snapshot, self._options.lease_renew_interval
        members = [
            entry.silo_address
            for entry in snapshot.entries
            if entry.status is not SiloStatus.DEAD and entry.silo_address != self._address
        ]
        started = self._clock.monotonic()

        async def ask(member: SiloAddress) -> MembershipConfirmation | None:
            try:
                return await with_timeout(self._clock, ask_peer(member, timeout), timeout)
            except Exception as exc:
                logger.debug("silo %s: %s did not confirm it: %r", self._address, member, exc)
                return None

        answers: dict[SiloAddress, MembershipConfirmation] = {}
        for member, answer in zip(members, await asyncio.gather(*(ask(member) for member in members)), strict=True):
            if answer is not None:
                answers[member] = answer
        newer = [answer for answer in answers.values() if answer.table_read and answer.version > snapshot.version]
        if newer and await self._pull_view(newer[0].responder, newer[0].version):
            snapshot = self.snapshot  # the read is newer than our view: take the reader's view first
        verdict = judge_confirmations(snapshot.version, self.newest_version_heard, members, answers)
        if verdict is PeerVerdict.CONFIRMED:
            self.lease.confirm(started)
        elif verdict is PeerVerdict.OUTAGE:
            self.lease.confirm(started)
            if not self._outage_logged:
                self._outage_logged = True
                logger.warning(
                    "silo %s: no member of the cluster reaches the table (all %d others say so at version %d); "
                    "nobody can be declared Dead, so this silo goes on serving",
                    self._address, len(members), snapshot.version,
                )  # fmt: skip
        elif verdict is PeerVerdict.NOT_ACTIVE:
            logger.warning("silo %s: a peer read this silo's row as not Active; it stays fenced", self._address)

    @property
    def newest_version_heard(self) -> int:
        """The newest table version we know exists: our view's, or one gossip, a lost race or a peer's ask announced."""
        return max(self._announced_version, self.snapshot.version)

    async def confirm_member(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        """A peer's ``ConfirmMembership``: read its row now (one try), or say what we know.

        Only for silos of our view: a stranger must not make us read the table for it. The
        asker's ``known_version``, newest it knows of, is taken as heard, as gossip is."""
        self._announced_version = max(self._announced_version, known_version)
        snapshot = self.snapshot
        if snapshot.entry(asker) is not None and not self.terminated.is_set():
            # within half the asker's wait, so it gets our answer either way
            read = await self._read_within(asker, self._options.lease_renew_interval / 2)
            if read is not None:
                data = read[1]
                found = data.get(asker)
                status = found[0].status if found is not None else SiloStatus.NONE
                return MembershipConfirmation(
                    self._address, True, status, data.version.version, data.version.version, False
                )
        return MembershipConfirmation(
            self._address, False, SiloStatus.NONE, snapshot.version, self.newest_version_heard, self._unconfirmed_writes
        )

    async def _accept(self, data: MembershipTableData) -> MembershipSnapshot:
        """Take in a full read of the table."""
        self._periods_since_full_read = 0
        self._unconfirmed_writes = False  # whatever committed is in this read
        # gossip cannot announce a version the table does not have yet; one that did was bogus
        self._announced_version = min(self._announced_version, data.version.version)
        self._report_malformed(data.malformed)
        snapshot = MembershipSnapshot(data)
        self.liveness.observe(snapshot)
        return await self._publish(snapshot)

    async def _accept_learned(
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
                    self._address, snapshot.version,
                )  # fmt: skip
        self.liveness.learn(rows)
        await self._publish(snapshot, written)

    def _reason_to_stop(self, snapshot: MembershipSnapshot) -> str | None:
        """Why ``snapshot`` says this silo must terminate (its own row, or a newer generation of it); None if not."""
        reason = self._own_row_verdict(snapshot.entry(self._address), snapshot.version)
        if reason is None and (newer := snapshot.newer_generations_of(self._address)):
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

    async def _apply(self, delta: MembershipDelta) -> bool:
        """Build the next snapshot from ``delta`` if we hold its base version; True if we did (or were past it)."""
        past, following = self._place(delta)
        if following is not None:
            await self._accept_learned(following, delta.entries, delta.silos)
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
        if written is None:
            written = rows_written_between(previous, current)
        if written is None:  # a row was removed: no delta can span that
            self._recent_writes.clear()
        else:
            self._recent_writes.append((previous.version, current.version, written))

    def _applies_from(self, base_version: int, silos: frozenset[SiloAddress]) -> int:
        """The oldest version our write at ``base_version + 1`` (of ``silos``' rows) applies to: back
        through our recent views while every row written since is one our write puts in too."""
        since = base_version
        for start, end, written in reversed(self._recent_writes):
            if end != since or not written <= silos:
                break
            since = start
        return since

    def _report_malformed(self, malformed: tuple[MalformedRow, ...]) -> None:
        """Log each malformed row once, when a read first reports it (again if it comes back after a repair).

        The store skips such rows, so this silo ignores them: it neither probes nor votes on them.
        """
        current = frozenset(malformed)
        for row in sorted(current - self._reported_malformed):
            logger.error(
                "silo %s: the membership table holds a malformed row, which every silo skips: %s: %s. "
                "Repair or delete it by hand (`silo status` lists them)",
                self._address, row.key, row.reason,
            )  # fmt: skip
        self._reported_malformed = current

    def _own_verdict_in(self, data: MembershipTableData) -> str | None:
        """``_own_row_verdict`` of our row in a read of the table (or of our row alone)."""
        row = data.get(self._address)
        return self._own_row_verdict(row[0] if row else None, data.version.version)

    def _own_row_verdict(self, entry: MembershipEntry | None, version: int) -> str | None:
        """Why our own row (``entry``, None if absent, at table ``version``) says we must terminate; None if not."""
        if entry is not None and entry.status is SiloStatus.DEAD and not self._leaving:
            killer = entry.suspect_times[-1][0] if entry.suspect_times else "itself or an operator"
            return f"the table says this silo is Dead (declared by {killer})"
        if entry is None and self._joined_version is not None and version > self._joined_version:
            return f"this silo's row is gone from table version {version}"
        return None

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None = None) -> None:
        """A peer says the table is at ``message.version``: catch up if that is newer than ours.

        A delta whose base version we hold is applied without reading anything. Further
        behind, we ask the sender for its view (it holds at least that version), and read the
        table only if that fails. Catching up is coalesced, so a flood of gossip cannot turn
        into a flood of pulls or reads: at most one is in flight (later gossip waits for it and
        looks again), and after one, the next waits ``probe_timeout`` (gossip that comes
        meanwhile is dropped; the next gossip or the periodic refresh catches up). A silo at the
        base version of each delta, the normal case, never catches up; in a large cluster
        (``LARGE_VIEW``) a delta it cannot place that is not about this silo, and in a join storm
        (more silos Joining than ``gossip_fanout``) one that also takes no silo out (a join, a
        vote against another), is left to the periodic refresh,
        so the storm (every delta off its base) costs no pulls, and a sender
        announcing versions the table does not have (hostile, confused, or a lagging replica)
        costs one read per ``probe_timeout``.
        """
        version = message.version
        self._announced_version = max(self._announced_version, version)
        if message.delta is not None and await self._apply(message.delta):
            return
        delta = message.delta
        if delta is not None and (
            (self.snapshot.large and not delta.is_about(self._address))
            or (not delta.is_urgent_for(self._address) and self.snapshot.in_join_storm(self._options))
        ):
            # A change we cannot place (we missed an earlier write) that is not about us, in a
            # large cluster (``LARGE_VIEW``), or a join or a vote against another in a join storm:
            # not worth a pull of a whole view. In a storm nearly every write finds its receivers
            # off its base, and those pulls (N rows each) were most of the storm's CPU; the
            # periodic refresh sees the version moved and reads them.
            logger.debug(
                "silo %s: gossip of version %d (base %d, since %d) is off our version %d; left to the refresh",
                self._address, version, delta.base_version, delta.since_version or delta.base_version,
                self.snapshot.version,
            )  # fmt: skip
            return
        while version > self.snapshot.version:
            read = self._gossip_read
            if read is not None and not read.done():
                await asyncio.shield(read)
                if message.delta is not None and await self._apply(message.delta):
                    return
                continue
            caught_up_at = self._caught_up_at
            if caught_up_at is not None and self._clock.monotonic() - caught_up_at < self._options.probe_timeout:
                logger.debug("silo %s: no catch-up for gossip of version %d yet", self._address, version)
                return
            self._gossip_read = asyncio.create_task(self._catch_up(version, sender))
            await asyncio.shield(self._gossip_read)
            return

    async def _catch_up(self, version: int, sender: SiloAddress | None) -> None:
        try:
            if sender is not None and sender != self._address and await self._pull_view(sender, version):
                return
            try:
                await self.refresh()
            except TableUnavailableError:
                logger.debug("silo %s: gossip of version %d but the table is unreachable", self._address, version)
                return
            if self.snapshot.version < version:
                logger.info(
                    "silo %s: gossip announced table version %d but the table is at %d",
                    self._address, version, self.snapshot.version,
                )  # fmt: skip
        finally:
            self._caught_up_at = self._clock.monotonic()

    async def _pull_view(self, peer: SiloAddress, version: int) -> bool:
        """Take ``peer``'s view if it holds ``version`` or later; False if it cannot be had or is older."""
        if self._fetch_view is None:
            return False
        try:
            data = await self._fetch_view(peer, self._options.probe_timeout)
        except Exception as exc:  # any failure of a peer: read the table instead
            logger.debug("silo %s: could not fetch %s's view of version %d: %r", self._address, peer, version, exc)
            return False
        if data.version.version < version:
            return False
        await self._accept_learned(MembershipSnapshot(data), data.entries, None)
        return True

    async def catch_up_to(self, version: int) -> bool:
        """Bring our view to ``version`` (a caller's view is that new) within a probe timeout: wait
        for its gossip, else re-read the table; True once our view is at least that new."""
        if self.snapshot.version >= version:
            return True
        if await self._brought_by_gossip(version, self._options.probe_timeout / 2):
            return True
        now = self._clock.monotonic()
        if self._caller_read_at is not None and now - self._caller_read_at < self._options.probe_timeout:
            return False  # a caller's version is not trusted: at most one read per probe timeout for them
        self._caller_read_at = now
        try:
            await self.refresh(self.deadline_in(self._options.probe_timeout / 2))
        except TableUnavailableError:
            return False
        return self.snapshot.version >= version

    def request_refresh(self) -> None:
        """Look for this silo's own verdict soon, in the background: one such look at a time, one
        per ``probe_timeout``.

        For a silo that finds itself on the minority side of a partition: the majority's
        gossip cannot reach it, so it looks for its own verdict instead of waiting for the
        periodic refresh, and stops serving as soon as it was declared Dead. It reads only its
        own row (one key), and the whole table only if that row says it must stop: on an
        overloaded machine every silo may find itself "on the minority side" (its probes time
        out), and hundreds of full reads each probe timeout made the overload worse.
        """
        now = self._clock.monotonic()
        if self._requested is not None and (
            not self._requested.done() or now - self._requested_at < self._options.probe_timeout
        ):
            return
        self._requested_at = now
        self._requested = asyncio.create_task(self._requested_refresh())

    async def _requested_refresh(self) -> None:
        try:
            data = await self._access.call(functools.partial(self._table.read_row, self._address), None)
            if self._own_verdict_in(data) is not None:
                await self.refresh()  # publishes the view that says so, and terminates
        except TableUnavailableError:
            logger.debug("silo %s: a requested look at its own row found the table unreachable", self._address)

    # --- writes --------------------------------------------------------------------------

    async def _after_write(
        self, committed: CommittedWrite, declared_dead: tuple[SiloAddress, ...] = (), *, reread_if_behind: bool = True
    ) -> None:
        """Take in our own write and announce it: the write as a delta, applied here if we hold its
        base version (no re-read). If we do not (another write landed between our view and our
        write: e.g. a vote whose gossip is still on its way to us), the gossip goes out first and
        our full re-read after it: receivers at the base version need nothing from our read, and
        a death must not wait for it. ``reread_if_behind=False`` keeps our older view instead
        (the periodic refresh catches up)."""
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
            await self._accept_learned(following, delta.entries, delta.silos)
        if behind and reread_if_behind:
            await self._reread_after_write()

    async def _reread_after_write(self) -> None:
        try:
            await self.refresh()
        except TableUnavailableError:
            logger.debug("silo %s: could not re-read the table after its write", self._address)

    def _lost_race_pause(self, lost: int) -> float:
        """Seconds to wait after the ``lost``-th lost race of one write of a row: "full jitter"
        exponential backoff, so a storm of writers (a join storm's status updates) spreads out
        instead of colliding again and again (each retry costs every contender a read and a write).

        At most ``probe_timeout``: with the earlier cap of four, the silos that lost most often
        in the bulk of a 1,000-silo storm waited up to 20 s between tries once the table was
        quiet again, and their inserts made the storm's tail (the last 10% of the inserts took
        45 s of an 85 s storm, their joins about 2 s each once inserted)."""
        first = self._options.probe_timeout / 20
        return self._random.uniform(0, min(self._options.probe_timeout, first * 2 ** (lost - 1)))

    async def insert_self(self, entry: MembershipEntry, deadline: float) -> None:
        """Insert this silo's row (retried while the table is unavailable, until ``deadline``); an
        existing row of ours counts as done.

        ``insert_row_at_next_version``: conditioned on our row alone, so it loses to no other
        write. With a version token (read, then insert at the next version) the inserts of a
        1,000-silo join storm kept losing to each other: 15,365 attempts for 1,000 rows.
        """
        insert = functools.partial(self._table.insert_row_at_next_version, entry)
        committed = await self._unconfirmed_if_failed(self._access.call(insert, deadline))
        if committed is None:  # an earlier attempt whose outcome was unknown committed our row
            snapshot = await self.refresh(deadline)
            if snapshot.entry(self._address) is None:
                raise TableUnavailableError(
                    f"cluster {self._table.cluster_id!r} has no version row, so this silo cannot insert its row; "
                    "initialize the table (`silo table init URI`)"
                )
            self._joined_version = snapshot.version
            return
        self._joined_version = committed.version.version
        logger.info(
            "silo %s inserted its row as %s at version %d", self._address, entry.status.name, committed.version.version
        )
        # In a join storm our view is behind our insert (others joined meanwhile). The join
        # needs no newer one (validation pings the Active silos we saw; becoming Active reads
        # our row and the table again): one full read fewer per joiner, N rows each, a quarter
        # of a 1,000-silo storm's reads.
        await self._after_write(committed, reread_if_behind=not self.snapshot.in_join_storm(self._options))

    async def _read_then_write(
        self, silo: SiloAddress, decide: Callable[[MembershipTableData], MembershipEntry | None], deadline: float
    ) -> tuple[MembershipTableData, MembershipEntry | None, CommittedWrite | None]:
        """Read ``silo``'s row and the version, and write ``decide``'s row for it (None: nothing to
        write) conditioned on them, in one blocking call; returns the read, the row decided and the
        write if it won its race. One call: no event-loop turn between the read and
        the write. That gap is the window in which any other write makes ours lose its race; on a
        busy loop (a join storm) it was most of the attempt, so contenders kept losing. ``decide``
        runs in the worker thread: it must only compute (no loop state is changed there).

        Our own row is written at the next version (``update_row_at_next_version``), conditioned
        on its etag alone: our status and properties depend on nothing but our row, and any write
        of it since the read (a vote, a death) still makes ours lose. Conditioned on the version
        too, the Active writes of a 1,000-silo storm lost 87% of their races (7,557 attempts for
        1,000 rows); another silo's row (an older generation of ours declared Dead) is a decision
        on our view, so that write is conditioned on the version read."""

        def attempt() -> tuple[MembershipTableData, MembershipEntry | None, CommittedWrite | None]:
            data = self._table.read_row(silo)
            entry = decide(data)
            found = data.get(silo)
            if entry is None or found is None:
                return data, None, None
            if silo == self._address:
                return data, entry, self._table.update_row_at_next_version(entry, found[1])
            return data, entry, self._table.update_rows_with_etags(((entry, found[1]),), data.version.next())

        return await self._unconfirmed_if_failed(self._access.call(attempt, deadline))

    async def _unconfirmed_if_failed(self, write: Awaitable[_T]) -> _T:
        """``write``'s result; if it fails, it may still have committed: remember that until a full read."""
        try:
            return await write
        except TableUnavailableError:
            self._unconfirmed_writes = True
            raise

    async def update_row(
        self, silo: SiloAddress, change: Callable[[MembershipEntry], MembershipEntry | None], deadline: float
    ) -> bool:
        """Read-modify-write one row until it sticks; ``change`` (pure: it runs in the table's
        worker thread) returns None for "nothing to do".

        Lost races are retried on a fresh read after a jittered pause; unavailability until
        ``deadline``. False if the row is absent, ``change`` declined, or (for our own row)
        we must terminate.
        """
        own = silo == self._address

        def modify(data: MembershipTableData) -> MembershipEntry | None:
            if own and self._own_verdict_in(data) is not None:
                return None
            row = data.get(silo)
            if row is None or row[0].status is SiloStatus.DEAD:
                return None  # Dead is terminal: never written over
            return change(row[0])

        lost = 0
        while not (own and self.terminated.is_set()):
            started = self._clock.monotonic()
            data, entry, committed = await self._read_then_write(silo, modify, deadline)
            if entry is not None and committed is not None:  # written: announce it whatever else happened meanwhile
                logger.info(
                    "silo %s wrote %s as %s at version %d",
                    self._address, silo, entry.status.name, committed.version.version,
                )  # fmt: skip
                await self._after_write(committed)
                if own and entry.status is SiloStatus.ACTIVE:
                    # our row written Active (conditioned on its etag). Our view may lag the table
                    # (a join storm): the keys a joiner may serve wait out takeover_wait anyway
                    # (silo.runtime.ownership), by which time a renewal has checked the view.
                    self.lease.confirm(started)
                return True
            if own and (reason := self._own_verdict_in(data)) is not None:
                self.terminate(reason)
            if entry is None or (own and self.terminated.is_set()):
                return False  # absent, Dead, nothing to change, or we must stop
            if self._clock.monotonic() >= deadline:
                return False
            lost += 1
            await self._clock.sleep(self._lost_race_pause(lost))
        return False

    async def update_own_status(self, status: SiloStatus, deadline: float) -> bool:
        def change(entry: MembershipEntry) -> MembershipEntry:
            return entry.replace(status=status, i_am_alive_time=self._clock.now())

        return await self.update_row(self._address, change, deadline)

    async def heartbeat(self, deadline: float) -> None:
        """Write IAmAlive now (a blind write: no version bump)."""
        now = self._clock.now()
        await self._access.call(functools.partial(self._table.update_i_am_alive, self._address, now), deadline)

    async def cleanup_defunct(self, older_than: float) -> int:
        """Remove Dead rows inactive for ``older_than`` seconds (not a versioned write)."""
        before = self._clock.now() - timedelta(seconds=older_than)
        return await self._access.call(functools.partial(self._table.cleanup_defunct_entries, before), None)

    @property
    def settle_time(self) -> float:
        """How long a death amid correlated suspicions waits for the other side's votes (ring
        sampling only): two probe timeouts, the indirect round every observer finishes
        before it votes."""
        return 2 * self._options.probe_timeout

    async def try_vote(self, target: SiloAddress, *, others_unheard: bool = False) -> VoteOutcome:
        """Vote against ``target`` on our own evidence, declaring it Dead when ours completes the quorum.

        A target our snapshot already holds Dead is ``ALREADY_GONE`` without a read (a gossiped
        death reaches the other monitors before their own votes). Each attempt decides on our
        view if that is as good as a read (``_cast_on_view``, under mutual TLS), else on a fresh
        read, and writes conditionally on the version decided on; a lost race is retried on a new read
        once the winner's gossip came or did not come in time, unless it shows the target Dead
        (``VOTE_ATTEMPTS`` in all). A table error ends the vote: a silo that cannot reach the
        table does not vote, and the monitor votes again later on fresh evidence.
        ``others_unheard``: we do not hear other silos we monitor either (a sign of a cut; it
        makes a ring-sampled death settle first).
        """
        if self.can_vote() and self.snapshot.status_of(target) is SiloStatus.DEAD:
            return VoteOutcome.ALREADY_GONE  # Dead is terminal: a gossiped death spares the read
        outcome = VoteOutcome.LOST_RACE
        settled = False
        attempts = 0
        while attempts < VOTE_ATTEMPTS:
            if not self.can_vote():
                return VoteOutcome.NOT_ALLOWED
            try:
                outcome = await self._vote_once(target, others_unheard=others_unheard, settled=settled)
            except TableUnavailableError:
                return VoteOutcome.NOT_ALLOWED
            if outcome is VoteOutcome.SETTLING:
                settled = True
                await self._clock.sleep(self.settle_time)
                continue
            if outcome is not VoteOutcome.LOST_RACE:
                return outcome
            attempts += 1
            logger.info("silo %s lost the race to vote against %s; retrying on a fresh read", self._address, target)
        return outcome

    async def _vote_once(self, target: SiloAddress, *, others_unheard: bool, settled: bool) -> VoteOutcome:
        """One read-and-write attempt of a vote, cast together with the votes of ours queued beside it.

        Votes that come while a batch is in flight wait for the next one: when a rack or a
        zone is lost, this silo's monitors of its silos vote at about the same moment, and
        instead of racing each other for the version row (one write each, all but one lost),
        the ones behind the first share one read and one ``update_rows``, and the silos whose
        quorum they complete are declared Dead in one version. A vote with no other in flight
        is cast at once by its own caller.
        """
        ballot = _Ballot(target, others_unheard, settled, asyncio.get_running_loop().create_future())
        self._ballots.append(ballot)
        if self._casting:
            return await asyncio.shield(ballot.outcome)
        self._casting = True
        try:
            await self._cast_next_batch()
        finally:
            if self._ballots:  # queued behind ours: the next batch, cast in the background
                self._cast_tasks.spawn(self._cast_the_rest())
            else:
                self._casting = False
        return ballot.outcome.result()

    async def _cast_the_rest(self) -> None:
        try:
            while self._ballots:
                await self._cast_next_batch()
        finally:
            self._casting = False
            for ballot in self._ballots:  # only if this task was cancelled (the silo stops)
                if not ballot.outcome.done():
                    ballot.outcome.set_exception(TableUnavailableError("the silo stopped before casting this vote"))
            self._ballots.clear()

    async def _cast_next_batch(self) -> None:
        batch = self._ballots[: self._table.max_rows_per_update]
        del self._ballots[: len(batch)]
        try:
            outcomes = await self._cast(batch)
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else TableUnavailableError("the vote was interrupted")
            for ballot in batch:
                if not ballot.outcome.done():
                    ballot.outcome.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        for ballot in batch:
            if not ballot.outcome.done():
                ballot.outcome.set_result(outcomes[ballot.target])

    async def _cast(self, batch: list[_Ballot]) -> dict[SiloAddress, VoteOutcome]:
        """Cast ``batch`` on our view if it decides as a read would (``_cast_on_view``), else on a
        fresh read of the table."""
        outcomes = await self._cast_on_view(batch) if self._trusted_gossip else None
        if outcomes is not None:
            return outcomes
        data = await self._access.attempt(self._table.read_all)
        await self._accept(data)
        outcomes = await self._decide_and_write(batch, MembershipSnapshot(data))
        if VoteOutcome.LOST_RACE in outcomes.values() and self._options.use_liveness_gossip:
            outcomes = await self._after_lost_race(outcomes, data.version.version)
        return outcomes

    @property
    def _winner_gossip_wait(self) -> float:
        """How long a vote that lost its race waits for the winner's gossip (``VIEW_VOTE_GOSSIP_WAIT``)."""
        return VIEW_VOTE_GOSSIP_WAIT * self._options.probe_timeout

    async def _after_lost_race(
        self, outcomes: dict[SiloAddress, VoteOutcome], read_version: int
    ) -> dict[SiloAddress, VoteOutcome]:
        """``outcomes`` of a vote decided on a read that lost its race, once the winner's gossip
        came (or ``VIEW_VOTE_GOSSIP_WAIT`` of a probe timeout passed): ``ALREADY_GONE`` for each
        target it shows Dead, which needs no read (a Dead view only spares a vote, as in
        ``try_vote``). The winner is usually a monitor of the same dead silo completing its
        quorum, and retrying at once read the table to find that."""
        await self._brought_by_gossip(read_version + 1, self._winner_gossip_wait)
        snapshot = self.snapshot
        return {
            target: VoteOutcome.ALREADY_GONE
            if outcome is VoteOutcome.LOST_RACE and snapshot.status_of(target) is SiloStatus.DEAD
            else outcome
            for target, outcome in outcomes.items()
        }

    async def _cast_on_view(self, batch: list[_Ballot]) -> dict[SiloAddress, VoteOutcome] | None:
        """Cast ``batch`` on the view we hold, without reading the table; None: read it instead.

        The write is conditioned on our view's version, so it sticks only if the table is still
        at that version: then its rows, statuses and votes are the table's (every other write
        moves the version; heartbeats, which do not, count only through the liveness tracker).
        If also every Active silo of the view is fresh, a read now could not change the quorum
        base either (a read only makes silos fresher), so the decision is the one a read would
        give. Only with ``trusted_gossip``: a view misled by forged gossip carrying real etags
        (which anyone may learn from GetMembership without TLS) could otherwise make us declare
        a death on forged votes. When monitors vote together (each of a dead silo's monitors, at
        once) the first write wins and the others' lose; the winner gossips its write at once, so a loser waits
        briefly for that gossip (``VIEW_VOTE_GOSSIP_WAIT`` of a probe timeout) and decides again
        on the new view (or finds the silo Dead): a death then costs the store no read at all,
        where each monitor read the whole table before. A view known to be behind (gossip
        announced a newer version), one that decides differently from a read, or gossip that
        does not come: read the table.
        """
        for _ in range(VOTE_ATTEMPTS):
            view = self.snapshot
            if not self._decides_as_a_read(view):
                return None
            outcomes = await self._decide_and_write(batch, view)
            if VoteOutcome.LOST_RACE not in outcomes.values():
                return outcomes
            if not await self._brought_by_gossip(view.version + 1, self._winner_gossip_wait):
                return None
            logger.debug(
                "silo %s: a vote on view %d lost; deciding again on gossiped view %d",
                self._address, view.version, self.snapshot.version,
            )  # fmt: skip
        return None

    def _decides_as_a_read(self, view: MembershipSnapshot) -> bool:
        """Whether a vote decided on ``view`` is the one a read at its version would give
        (``_cast_on_view``): we hold a view, no gossip told of a newer version, and every
        Active silo in it is fresh."""
        return (
            self.publisher.current is not None
            and self._announced_version <= view.version
            and all(self.liveness.is_fresh(silo) for silo in view.active_silos)
        )

    async def _decide_and_write(self, batch: list[_Ballot], read: MembershipSnapshot) -> dict[SiloAddress, VoteOutcome]:
        """Decide each ballot on ``read`` (the table at its version) and write the decisions in one
        conditional write at the next version; ``LOST_RACE`` for each decision if it lost."""
        if self.snapshot.status_of(self._address) not in (SiloStatus.JOINING, SiloStatus.ACTIVE):
            return dict.fromkeys((ballot.target for ballot in batch), VoteOutcome.NOT_ALLOWED)
        now = self._clock.now()
        data = read.data
        quorum_base = len(self.liveness.fresh(read))
        dead = {entry.silo_address for entry in read.with_status(SiloStatus.DEAD)}
        outcomes: dict[SiloAddress, VoteOutcome] = {}
        decisions: dict[SiloAddress, tuple[VoteDecision, str]] = {}
        for ballot in batch:
            target = ballot.target
            row = data.get(target)
            if target in outcomes:
                continue  # two monitors' votes against one silo: one vote
            if row is None or row[0].status is SiloStatus.DEAD:
                outcomes[target] = VoteOutcome.ALREADY_GONE
                continue
            decision = decide_vote(row[0], self._address, now, self._options, quorum_base, dead)
            outcome = VoteOutcome.DECLARED_DEAD if decision.kind is VoteKind.DECLARE_DEAD else VoteOutcome.VOTED
            if decision.kind is VoteKind.DECLARE_DEAD:
                held = self._hold_death(
                    decision.entry,
                    read,
                    now,
                    quorum_base,
                    others_unheard=ballot.others_unheard,
                    settled=ballot.settled,
                )  # fmt: skip
                if held is not None:
                    outcome = held
                    decision = decide_vote(
                        row[0], self._address, now, self._options, quorum_base, dead, may_declare=False
                    )
            outcomes[target] = outcome
            decisions[target] = (decision, row[1])
        if not decisions:
            return outcomes
        updates = [(decision.entry, etag) for decision, etag in decisions.values()]
        committed = await self._access.attempt(
            functools.partial(self._table.update_rows_with_etags, updates, data.version.next())
        )
        if committed is None:  # the table moved past the version decided on
            self._announced_version = max(self._announced_version, read.version + 1)
            return {target: VoteOutcome.LOST_RACE if target in decisions else outcomes[target] for target in outcomes}
        declared = []
        for target, (decision, _) in decisions.items():
            if outcomes[target] is VoteOutcome.DECLARED_DEAD:
                declared.append(target)
                logger.warning(
                    "silo %s declared %s Dead (%d of %d votes)",
                    self._address, target, decision.votes, decision.required,
                )  # fmt: skip
            elif outcomes[target] is VoteOutcome.VOTED:
                logger.info(
                    "silo %s voted against %s (%d of %d votes)",
                    self._address, target, decision.votes, decision.required,
                )  # fmt: skip
        await self._after_write(committed, declared_dead=tuple(declared))
        return outcomes

    def _hold_death(
        self,
        dead_row: MembershipEntry,
        read: MembershipSnapshot,
        now: datetime,
        fresh_active: int,
        *,
        others_unheard: bool,
        settled: bool,
    ) -> VoteOutcome | None:
        """Why a death our vote would complete must wait (``SETTLING``) or not happen (``WITHHELD``).

        None: go ahead. Only with ring sampling (``fresh_active``, the quorum base of the read,
        above ``num_probed_silos + 1``); with every silo monitoring all others the majority
        rule alone keeps the majority side safe (docs/protocol.md, "The model").
        """
        if fresh_active <= self._options.num_probed_silos + 1:
            return None
        target = dead_row.silo_address
        edges = accusations(read.entries, now, self._options.death_vote_expiration)
        if not settled and (others_unheard or correlated_suspicions(edges, target)):
            logger.info(
                "silo %s: suspicions are correlated; recording its vote against %s and deciding in %.1fs",
                self._address, target, self.settle_time,
            )  # fmt: skip
            return VoteOutcome.SETTLING
        verdict = arbitrate_cut(edges, target, [voter for voter, _ in dead_row.suspect_times])
        if verdict.allowed:
            return None
        logger.warning(
            "silo %s: not declaring %s Dead: the table's votes draw a cut with %d silos on its side and %d on ours",
            self._address, target, verdict.target_side, verdict.voter_side,
        )  # fmt: skip
        return VoteOutcome.WITHHELD

    # --- periodic refresh ------------------------------------------------------------

    def start(self) -> None:
        """Start re-reading the table every ``table_refresh_timeout`` (first tick randomized)."""
        period = self._options.table_refresh_timeout
        self._refresher = Periodic(
            self._clock, period, self._refresh_round, first_delay=self._random.uniform(0, period)
        )
        self._refresher.start()

    def start_lease_renewal(self) -> None:
        """Renew the membership lease every ``lease_renew_interval`` (once this silo is Active)."""
        if self._lease_renewer is None:
            self._lease_renewer = Periodic(self._clock, self._options.lease_renew_interval, self.renew_lease)
            self._lease_renewer.start()

    async def _refresh_round(self) -> None:
        period = self._options.table_refresh_timeout
        deadline = self.deadline_in(period)
        try:
            version = await self._version_without_a_full_read(deadline)
            if version == self.snapshot.version or (version is not None and await self._brought_by_gossip(version)):
                self._observer.refresh_skipped()
                return
            if version is not None and await self._caught_up_from_a_peer(version):
                return
            await self.refresh(deadline)
        except TableUnavailableError:
            logger.warning("silo %s: table still unreachable after retrying for %ss", self._address, period)

    async def _version_without_a_full_read(self, deadline: float) -> int | None:
        """The table's version as this periodic refresh may take it without a full read, or None
        (read in full). Our view's version: skip the read (only the version was read, and it
        has not moved; or our view is a join storm, below, and nothing was read). A newer one:
        the version read shows a change that no gossip brought us (``_caught_up_from_a_peer``).

        Never with ``full_refresh_every`` 1 (no version read at all), before the first full
        read, once the last full read is ``full_refresh_every`` periods old (heartbeats do not
        move the version), or within one full-read interval of a failed table call. A failed
        version read raises like a failed full read, after the same retries.

        In a join storm of a large view (``LARGE_VIEW`` rows, more than ``gossip_fanout``
        Joining) the version moves between any two periods, so each silo read the whole table
        every period: at 1,000 silos that was the largest share of the storm's CPU. There we
        read in full on the heartbeat cadence only (every ``full_refresh_every`` periods): the
        joins, and the other changes we cannot apply as deltas (in a large view only gossip
        about this silo is pulled at once: ``on_gossip``), reach us that much later, as the
        heartbeats do.
        """
        self._periods_since_full_read += 1
        if (
            self._periods_since_full_read >= self._options.full_refresh_every
            or self.publisher.current is None
            or self._recovering()
        ):
            return None
        if self.snapshot.large and self.snapshot.in_join_storm(self._options):
            logger.debug("silo %s: join storm in its view; full reads on the heartbeat cadence", self._address)
            return self.snapshot.version
        version = (await self._access.call(self._table.read_version, deadline)).version
        return None if self._recovering() else version

    async def _brought_by_gossip(self, version: int, within: float | None = None) -> bool:
        """Whether gossip brings us ``version`` within ``within`` seconds (``probe_timeout``). A
        version read that shows a change often races the change's own gossip: in one 1,000-silo
        kill, 42 of the 99 silos whose read showed the vote or the death asked a peer that did
        not have it yet and read the whole table, 13 of them although the gossip had reached
        them meanwhile."""
        try:
            await with_timeout(
                self._clock, self.publisher.reached(version), self._options.probe_timeout if within is None else within
            )
        except TimeoutError:
            return False
        return True

    async def _caught_up_from_a_peer(self, version: int) -> bool:
        """Take the view of one of the silos we send our gossip to (``gossip_peers``: ring
        neighbours, whose channels are open) if it holds ``version``: the version moved and
        no gossip told us of the change (a lost or late send, a relay whose loop stalled). At
        1,000 silos about 60 silos per death read the whole table at their next refresh for
        that; the table is the one resource the whole cluster shares, a peer's view is not.
        The periodic full reads for heartbeats are not replaced (a peer's heartbeats are as
        old as its last read)."""
        snapshot = self.snapshot
        peers = gossip_peers(self._address, snapshot.active_silos, self._options.gossip_fanout)
        if not peers:
            return False
        peer = self._random.choice(peers)
        if await self._pull_view(peer, version):
            logger.debug("silo %s: caught up to version %d from %s's view", self._address, version, peer)
            return True
        return False

    def _recovering(self) -> bool:
        """A table call failed within one full-read interval: read in full every period meanwhile."""
        return self._access.failed_within(self._options.full_refresh_interval)

    async def stop(self) -> None:
        """Cancel the queued votes and the requested refresh before the first await: a stop
        cancelled while it waits must not leave a batch of votes to be written later."""
        tasks = self._cast_tasks.cancel()
        reads = [read for _, read in self._pending_reads.values()]  # lease reads a hung store left running
        for read in reads:
            read.cancel()
        if self._requested is not None:
            self._requested.cancel()
            tasks.append(self._requested)
        for periodic in (self._refresher, self._lease_renewer):
            if periodic is not None:
                await periodic.stop()
        await asyncio.gather(*tasks, *reads, return_exceptions=True)
        await self.publisher.close()
