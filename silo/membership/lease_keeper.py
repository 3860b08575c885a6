"""Keeping the membership lease (``silo.membership.lease``) renewed, through the table or through peers.

Every ``lease_renew_interval`` an Active silo reads its own row (one key, not the table); when
its table calls fail it asks its nearest successors on ring 0 (the first is its ring-0 probe
target), then if none of them can read the table every other non-Dead member of its view (when
their answers leave an outage vouch possible) or a few more successors (when they do not), to
read the row for it (``ConfirmMembership``), and renews as their answers allow
(``judge_confirmations``). Reads for the lease never wait on a hung store
longer than their share of the interval, and a read still running is awaited again rather than
started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from membership_tables import MembershipTableData, SiloAddress, SiloStatus, TableUnavailableError
from silo.membership.background import retrieve_failure
from silo.membership.clock import Periodic, with_timeout
from silo.membership.lease import (
    LEASE_STATUSES,
    MembershipConfirmation,
    PeerVerdict,
    judge_confirmations,
    outage_vouch_possible,
)
from silo.membership.ring import successors
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_view import TableView, catch_up

logger = logging.getLogger(__name__)

AskConfirmation = Callable[[SiloAddress, float], Awaitable[MembershipConfirmation]]
"""Ask a peer to read our row from the table (ConfirmMembership) within a timeout; raises if it cannot."""


FIRST_ASKED = 3
"""Members a silo that cannot read the table asks first to read its row for it; the others only
if none of them could read it. Every member at once is N calls per silo per renewal, and a
channel from each such silo to every member, also when own-row reads are merely slow (an
overloaded machine) rather than failing for everyone."""

WIDER_ASKED = 8
"""Members asked next, after the first, when none of those read the table and their answers
rule out an outage vouch (``outage_vouch_possible``): the following successors on ring 0, so
that a silo cut off from the table with its neighbours still finds one that reads it. Asking
every member then was a million calls per renewal in a 1,000-silo join storm (every read slow,
every view different): each silo cycled a channel to every other through its pool, and the
silo hosts grew past their memory."""

CATCH_UP_MARGIN = 2
"""Renewal intervals of lease left below which a renewal whose view is behind the table reads the
whole table to catch up (and confirm); with more left it waits for gossip or the next renewal.
In a join storm every silo's view is behind at every renewal (joins are not gossiped then): a
full read at each one was a full read per Active silo every 2.5 s, and the 1,000-silo storm
never finished; this is one per lease, still two renewals before it runs out."""


class LeaseKeeper:
    """Renews this silo's lease, and answers peers that ask us to read their rows."""

    def __init__(
        self,
        view: TableView,
        ask_confirmation: AskConfirmation | None = None,
        overloaded: Callable[[], bool] = lambda: False,
    ) -> None:
        """``overloaded()``: our own event loop lags (``LocalHealth.lagging``): see ``_read_is_slow``."""
        self._view = view
        self._ask_confirmation = ask_confirmation
        self._overloaded = overloaded
        self._renewer: Periodic | None = None
        self._outage_logged = False
        self._vouch_ended_logged = False
        self._pending_reads: dict[SiloAddress, tuple[float, asyncio.Future[tuple[float, MembershipTableData]]]] = {}
        """Row reads for the lease still running, by silo, with when they were made (``_read_within``)."""
        self._catch_up: asyncio.Future[MembershipSnapshot] | None = None
        """The full read of the last catch-up, while it runs (``_catch_up_read``)."""
        self._members: tuple[MembershipSnapshot, list[SiloAddress]] | None = None
        """The last view whose other members we listed, with them (``_other_members``)."""
        self._nearest_found: list[SiloAddress] | None = None
        """Our nearest successors among the members, as last found (``_nearest``)."""

    def start(self) -> None:
        """Renew the membership lease every ``lease_renew_interval`` (once this silo is Active)."""
        if self._renewer is None:
            view = self._view
            self._renewer = Periodic(view.clock, view.options.lease_renew_interval, self.renew_lease)
            self._renewer.start()

    async def renew_lease(self) -> None:
        """Read our own row unless a call confirmed us within ``lease_renew_interval``.

        One row, not the table: every silo does this every quarter of ``lease_timeout``. If the
        row says we must stop, the whole table is re-read, which terminates this silo. A failure
        just leaves the lease to run out: the runtime fences on its own."""
        view = self._view
        interval = view.options.lease_renew_interval
        if view.lease.age() < interval or view.terminated.is_set():
            return
        if view.snapshot.status_of(view.address) not in LEASE_STATUSES:
            return  # not a member yet (joining) or not any more (Dead)
        pending = self._pending_reads.get(view.address)
        if pending is not None and not pending[1].done() and not self._overloaded():
            # our last read still hangs (a store whose packets are dropped): go to the peers at
            # once, every renewal, rather than spend half of each round waiting on it again
            await self._confirm_through_peers()
            return
        read = await self._read_within(view.address, interval / 2)
        if read is None:
            if not self._read_is_slow():
                await self._confirm_through_peers()
            return
        started, data = read
        self._outage_logged = self._vouch_ended_logged = False
        behind = data.version.version > view.snapshot.version
        verdict = view.own_verdict_in(data) is not None
        if verdict or (behind and not await view.brought_by_gossip(data.version.version, interval / 2)):
            if verdict or view.lease.remaining() <= CATCH_UP_MARGIN * interval:
                # we must stop (the read terminates us), or our view is behind, no gossip brought
                # the change and the lease runs out soon: a full read, which confirms it by itself
                await self._catch_up_read(interval)
            return
        view.confirm_lease(data, started)

    def _read_is_slow(self) -> bool:
        """Our own-row read is still running while our own event loop lags: the machine is
        overloaded, not our path to the store cut. Peers asked to read our row would then queue
        their reads behind the same cores (and store), and their answers behind loops as late as
        ours: in a 1,000-silo join storm on two cores those asks were a quarter of a silo host's
        samples, and they kept the storm from ending. We wait for our read instead (the lease may
        run out meanwhile: the silo fences until the read confirms it; a later renewal awaits the
        same read again). A read that failed, or one that hangs while our loop keeps time (a
        store whose packets are dropped), still goes to the peers at once."""
        pending = self._pending_reads.get(self._view.address)
        return pending is not None and not pending[1].done() and self._overloaded()

    async def _catch_up_read(self, timeout: float) -> None:
        """Read the whole table, awaited at most ``timeout``; a full read still running from an
        earlier renewal is awaited again, never started twice. A fenced silo whose view is behind
        catches up at every renewal: on an overloaded machine (a 1,000-silo join storm) each full
        read outlived its renewal, and one more started at each, until every worker thread read
        the whole table for silos that had stopped waiting and the lease reads queued behind them
        fenced more silos. Whenever it completes, the read confirms the lease from its start."""
        view = self._view
        if self._catch_up is None or self._catch_up.done():
            self._catch_up = asyncio.ensure_future(catch_up(view))
            self._catch_up.add_done_callback(retrieve_failure)
        with contextlib.suppress(TimeoutError, TableUnavailableError):
            await with_timeout(view.clock, asyncio.shield(self._catch_up), timeout)

    async def _read_within(self, silo: SiloAddress, timeout: float) -> tuple[float, MembershipTableData] | None:
        """``silo``'s row read in one attempt, awaited at most ``timeout``, with the time the read
        started (``TableAccess.call_timed``); None if it failed or is still running. A read still
        running from an earlier call is awaited again, never started twice: on a store whose
        packets are dropped, reads hang until the driver's deadline, and starting one per lease
        renewal would fill the worker threads every other table call needs."""
        view = self._view
        pending = self._pending_reads.get(silo)
        if pending is None or pending[1].done():
            read = asyncio.ensure_future(view.access.call_timed(functools.partial(view.table.read_row, silo), None))
            read.add_done_callback(retrieve_failure)
            pending = self._pending_reads[silo] = (view.clock.monotonic(), read)
        try:
            started, data = await with_timeout(view.clock, asyncio.shield(pending[1]), timeout)
        except (TimeoutError, TableUnavailableError):
            return None
        self._pending_reads.pop(silo, None)
        return started, data

    async def _confirm_through_peers(self) -> None:
        """Our table calls fail: ask our nearest successors, then if none could read the table every other
        non-Dead member of our view, to read our row (``silo.membership.lease``, "Through peers"),
        and renew the lease as their answers allow."""
        ask_peer = self._ask_confirmation
        if ask_peer is None:
            return
        view = self._view
        snapshot, timeout = view.snapshot, view.options.lease_renew_interval
        started = view.clock.monotonic()

        async def ask(member: SiloAddress) -> MembershipConfirmation | None:
            try:
                return await with_timeout(view.clock, ask_peer(member, timeout), timeout)
            except Exception as exc:
                logger.debug("silo %s: %s did not confirm it: %r", view.address, member, exc)
                return None

        async def ask_all(asked: list[SiloAddress]) -> dict[SiloAddress, MembershipConfirmation]:
            replies = await asyncio.gather(*(ask(member) for member in asked))
            return {member: answer for member, answer in zip(asked, replies, strict=True) if answer is not None}

        # a few neighbours first: one that reads the table settles it; everyone only when none of
        # them could and an outage vouch is still possible (it needs every member's answer), else
        # a few more, one of which may read the table
        nearest = self._nearest(snapshot)
        # fewer than FIRST_ASKED + WIDER_ASKED nearest: a view of few members, listed at little cost
        few = len(nearest) < FIRST_ASKED + WIDER_ASKED and len(self._other_members(snapshot)) <= 2 * FIRST_ASKED
        first = self._other_members(snapshot) if few else nearest[:FIRST_ASKED]
        answers = await ask_all(first)
        # the whole list of members only when no peer read the table (a read settles it)
        read = any(answer.table_read for answer in answers.values())
        members = [] if read else self._other_members(snapshot)
        if not read and len(first) < len(members):
            if outage_vouch_possible(snapshot.version, view.newest_version_heard, first, answers):
                rest = [member for member in members if member not in first]
            else:
                rest = [member for member in nearest if member not in first]
            answers.update(await ask_all(rest))
        newer = [answer for answer in answers.values() if answer.table_read and answer.version > snapshot.version]
        if newer and await view.pull_view(newer[0].responder, newer[0].version):
            snapshot = view.snapshot  # the read is newer than our view: take the reader's view first
        verdict = judge_confirmations(snapshot.version, view.newest_version_heard, members, answers)
        if verdict is PeerVerdict.UNKNOWN and not newer:
            snapshot, members, verdict = await self._catch_up_in_outage(snapshot, members, answers)
        if verdict is PeerVerdict.CONFIRMED:
            view.lease.confirm(started)
        elif verdict is PeerVerdict.OUTAGE:
            if not self._within_outage_vouch(started):
                return
            view.lease.confirm(started, by_table=False)
            if not self._outage_logged:
                self._outage_logged = True
                logger.warning(
                    "silo %s: no member of the cluster reaches the table (all %d others say so at version %d); "
                    "nobody can be declared Dead, so this silo goes on serving",
                    view.address, len(members), snapshot.version,
                )  # fmt: skip
        elif verdict is PeerVerdict.NOT_ACTIVE:
            logger.warning("silo %s: a peer read this silo's row as not Active; it stays fenced", view.address)

    def _within_outage_vouch(self, anchor: float) -> bool:
        """Whether an outage vouch anchored at ``anchor`` is still within ``max_outage_vouch`` of the
        table's last confirmation: past it the silo fences (logged once) until the table is back."""
        view = self._view
        limit = view.options.max_outage_vouch
        table_anchor = view.lease.table_anchor
        if table_anchor is not None and anchor - table_anchor <= limit:
            return True
        if not self._vouch_ended_logged:
            self._vouch_ended_logged = True
            logger.warning(
                "silo %s: the table has been out of reach for everyone for over max_outage_vouch (%ss); the peers' "
                "word no longer keeps it serving (a silo that joined meanwhile may hold its keys): it fences until "
                "the table confirms it again",
                view.address, limit,
            )  # fmt: skip
        return False

    def _other_members(self, snapshot: MembershipSnapshot) -> list[SiloAddress]:
        """Every other non-Dead silo of ``snapshot``: the members whose answers a vouch needs
        (listed once per view, and only when needed: in a join storm every renewal goes through
        peers on a new view, and listing 2,000 members each time was a tenth of a host's samples)."""
        if self._members is None or self._members[0] is not snapshot:
            own = self._view.address
            self._members = (snapshot, [silo for silo in snapshot.member_silos if silo != own])
        return self._members[1]

    def _nearest(self, snapshot: MembershipSnapshot) -> list[SiloAddress]:
        """Our ``FIRST_ASKED + WIDER_ASKED`` nearest successors on ring 0 among the members of an
        earlier view, nearest first: found again once one of them is no longer a member of
        ``snapshot``, or while there were fewer and ``snapshot`` may hold more. Whom we ask first
        is a choice of cost, not of correctness (a vouch is judged on ``snapshot``'s members), so a
        silo that joined nearer since is not asked first; finding them again for every new view
        (a pass over 2,000 members) was a tenth of a host's samples in a 2,000-silo storm."""
        wanted = FIRST_ASKED + WIDER_ASKED
        found = self._nearest_found
        if (
            found is None
            or (len(found) < wanted and len(snapshot.entries) > len(found) + 1)
            or not all(snapshot.is_member(silo) for silo in found)
        ):
            found = self._nearest_found = successors(self._view.address, snapshot.member_silos, wanted)
        return found

    async def _catch_up_in_outage(
        self,
        snapshot: MembershipSnapshot,
        members: list[SiloAddress],
        answers: Mapping[SiloAddress, MembershipConfirmation],
    ) -> tuple[MembershipSnapshot, list[SiloAddress], PeerVerdict]:
        """Nobody reads the table and some member holds a newer view than ours (a change whose
        gossip missed us just before the outage): take that view from it, and judge the same
        answers again on it.

        Without this, one view left behind at the start of an outage fenced every member for the
        whole outage: nobody can read the table, so the views never met again. The newer view is
        a state the table had, and the answers were all given after our asks were sent, so the
        argument of an outage vouch holds on it unchanged (``silo.membership.lease``): every
        member holds it, has heard of nothing newer and wrote nothing since. The members that
        were behind take it the same way in their own rounds."""
        view = self._view
        ahead = max(answers.values(), key=lambda answer: answer.version, default=None)
        if ahead is None or ahead.version <= snapshot.version:
            return snapshot, members, PeerVerdict.UNKNOWN
        if not await view.pull_view(ahead.responder, ahead.version):
            return snapshot, members, PeerVerdict.UNKNOWN
        snapshot = view.snapshot
        members = self._other_members(snapshot)
        return snapshot, members, judge_confirmations(snapshot.version, view.newest_version_heard, members, answers)

    async def confirm_member(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        """A peer's ``ConfirmMembership``: read its row now (one try), or say what we know.

        Only for silos of our view: a stranger must not make us read the table for it. The
        asker's ``known_version``, newest it knows of, is taken as heard, as gossip is."""
        view = self._view
        view.hear_of(known_version)
        snapshot = view.snapshot
        if snapshot.entry(asker) is not None and not view.terminated.is_set() and not self._earlier_read_running(asker):
            # within half the asker's wait, so it gets our answer either way
            read = await self._read_within(asker, view.options.lease_renew_interval / 2)
            if read is not None:
                data = read[1]
                found = data.get(asker)
                status = found[0].status if found is not None else SiloStatus.NONE
                return MembershipConfirmation(
                    view.address, True, status, data.version.version, data.version.version, False
                )
        return MembershipConfirmation(
            view.address, False, SiloStatus.NONE, snapshot.version, view.newest_version_heard, view.unconfirmed_writes
        )

    def _earlier_read_running(self, asker: SiloAddress) -> bool:
        """Whether a read of ``asker``'s row started for an earlier ask is still running (a slow or
        hung store). It cannot answer this ask: it may be linearized before this ask was sent,
        where the asker anchors its lease, so a Dead write in between would go unseen; and a
        second one is not started (``_read_within``). The asker hears at once that we cannot read."""
        pending = self._pending_reads.get(asker)
        return pending is not None and not pending[1].done() and pending[0] < self._view.clock.monotonic()

    def cancel_reads(self) -> list[asyncio.Future[Any]]:
        """Cancel the lease reads a hung store left running; returns them to be awaited."""
        reads: list[asyncio.Future[Any]] = [read for _, read in self._pending_reads.values()]
        if self._catch_up is not None:
            reads.append(self._catch_up)
        for read in reads:
            read.cancel()
        return reads

    async def stop(self) -> None:
        if self._renewer is not None:
            await self._renewer.stop()
