"""Casting suspicion votes: decided on a fresh read (or on a view as good as one), written in one
conditional write, batched when several come together, held while a cut is being arbitrated.

Safety when the table is down: a vote needs a fresh read, so none is attempted while the table
is down, and votes are never retried across an outage (their evidence would be stale).

Under mutual TLS (``trusted_gossip``) a vote is decided on the silo's view when the table cannot
say otherwise (no newer version announced, every Active silo fresh), the write being
conditioned on the view's version: the monitors of a dead silo, which vote within moments of
each other, then read nothing (a loser waits briefly for the winner's gossip and decides
again). Otherwise, and when that gossip does not come, it reads the table first. Lost races are
normal: a vote that loses is retried on a fresh read as soon as the winner's gossip came (or
after a brief wait for it), up to ``VOTE_ATTEMPTS`` times, so a quorum is not delayed by a whole
probe round; when that gossip shows the target Dead (the winner completed its quorum), nothing
is read. Votes of ours that come together are cast in one write (several deaths, one version).

With ring sampling (more fresh Active silos than ``num_probed_silos + 1``) the majority rule
sees only a sample, so the table arbitrates a death (``votes.arbitrate_cut``): a vote that
would complete a quorum while suspicions are correlated (votes against other silos in the
table, or other targets of ours unheard) records itself, waits ``settle_time`` for the other
side's votes to land, and re-decides on a fresh read; a death the accusations put on the
larger side of a cut is withheld.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable
from datetime import datetime

from membership_tables import MembershipEntry, SiloAddress, SiloStatus, TableUnavailableError
from silo.membership.background import BackgroundTasks, retrieve_failure
from silo.membership.options import SiloOptions
from silo.membership.refusal_votes import RefusalVotes, not_a_live_voter, report_decision
from silo.membership.row_writer import RowWriter
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_view import TableView
from silo.membership.votes import (
    VoteDecision,
    VoteKind,
    VoteOutcome,
    accusations,
    arbitrate_cut,
    correlated_suspicions,
    decide_vote,
)

logger = logging.getLogger(__name__)

VOTE_ATTEMPTS = 3
"""Fresh read-and-write attempts of one vote when other writers win the race (and, before
them, attempts on our view while gossip keeps it current: ``_cast_on_view``)."""

VIEW_VOTE_GOSSIP_WAIT = 0.2
"""Share of ``probe_timeout`` a lost vote (decided on our view, or on a read) waits for the
winner's gossip before it reads the table: the winner gossips as soon as it wrote (tens of
milliseconds on one machine; 0.1 s in the local preset, 1 s in production)."""


@dataclasses.dataclass
class _Ballot:
    """One queued vote of ours (``try_vote``'s attempt) and where its outcome goes."""

    target: SiloAddress
    others_unheard: bool
    settled: bool
    refused: bool
    still_holds: Callable[[], bool]
    outcome: asyncio.Future[VoteOutcome]


def settle_time(options: SiloOptions) -> float:
    """How long a death amid correlated suspicions waits for the other side's votes (ring
    sampling only): two probe timeouts, the indirect round every observer finishes before it votes."""
    return 2 * options.probe_timeout


def hold_death(
    voter: SiloAddress,
    options: SiloOptions,
    dead_row: MembershipEntry,
    read: MembershipSnapshot,
    now: datetime,
    fresh_active: int,
    *,
    others_unheard: bool,
    settled: bool,
    refused: bool = False,
) -> VoteOutcome | None:
    """Why a death ``voter``'s vote would complete must wait (``SETTLING``) or not happen (``WITHHELD``).

    None: go ahead. Only with ring sampling (``fresh_active``, the quorum base of the read,
    above ``num_probed_silos + 1``); with every silo monitoring all others the majority
    rule alone keeps the majority side safe (docs/protocol.md, "The model"). Nor when our
    vote stands on refusals (``refused``): the target's endpoint answered that nothing of that
    incarnation listens there, which no cut or loss can fake (they are silence), so the
    process is gone whichever side of a cut we are on, and its death waits for nothing. Each
    of several silos killed at once otherwise settled with every monitor's vote in its row
    (ten versions a removal, where one vote and the Dead write are two).
    """
    if refused or fresh_active <= options.num_probed_silos + 1:
        return None
    target = dead_row.silo_address
    edges = accusations(read.entries, now, options.death_vote_expiration)
    if not settled and (others_unheard or correlated_suspicions(edges, target)):
        logger.info(
            "silo %s: suspicions are correlated; recording its vote against %s and deciding in %.1fs",
            voter, target, settle_time(options),
        )  # fmt: skip
        return VoteOutcome.SETTLING
    verdict = arbitrate_cut(edges, target, [voter for voter, _ in dead_row.suspect_times])
    if verdict.allowed:
        return None
    logger.warning(
        "silo %s: not declaring %s Dead: the table's votes draw a cut with %d silos on its side and %d on ours",
        voter, target, verdict.target_side, verdict.voter_side,
    )  # fmt: skip
    return VoteOutcome.WITHHELD


class VoteCaster:
    """Casts this silo's votes against the silos it finds silent."""

    def __init__(
        self, view: TableView, writer: RowWriter, *, can_vote: Callable[[], bool], trusted_gossip: bool = False
    ) -> None:
        """``writer`` casts votes on refusals (``RefusalVotes``). ``trusted_gossip``: only members
        of the cluster can send us gossip (mutual TLS with silo certificates), so a view built
        from it is as trustworthy as the table (any member may write the table): votes may then
        be decided on the view (``_cast_on_view``). Without it anyone who reaches our port may
        send gossip, and votes read the table first."""
        self._view = view
        self._on_rows = RefusalVotes(view, writer)
        self._can_vote = can_vote
        self._trusted_gossip = trusted_gossip
        self._ballots: list[_Ballot] = []
        self._casting = False
        self._cast_tasks = BackgroundTasks()

    async def try_vote(
        self,
        target: SiloAddress,
        *,
        others_unheard: bool = False,
        refused: bool = False,
        still_holds: Callable[[], bool] = lambda: True,
    ) -> VoteOutcome:
        """Vote against ``target`` on our own evidence, declaring it Dead when ours completes the quorum.

        A target our snapshot already holds Dead is ``ALREADY_GONE`` without a read (a gossiped
        death reaches the other monitors before their own votes). Each attempt decides on our
        view if that is as good as a read (``_cast_on_view``, under mutual TLS), else on a fresh
        read, and writes conditionally on the version decided on; a lost race is retried on a new read
        once the winner's gossip came or did not come in time, unless it shows the target Dead
        (``VOTE_ATTEMPTS`` in all). A table error ends the vote: a silo that cannot reach the
        table does not vote, and the monitor votes again later on fresh evidence.
        ``others_unheard``: we do not hear other silos we monitor either (a sign of a cut; it
        makes a ring-sampled death settle first). ``refused``: our evidence is refusals, not
        silence (``hold_death``: such a death neither settles nor is withheld).
        ``still_holds``: whether the voter's evidence still calls for the vote, asked before each
        attempt and again when it is decided (``WITHDRAWN`` once it does not). A vote waits for
        the majority check, the batch ahead of it, a settling and lost races: on a saturated
        machine (1,000 silos on two cores) votes were written minutes after they began, after
        their target had answered again, and completed the quorum of a live silo.
        """
        view = self._view
        if self._can_vote() and view.snapshot.status_of(target) is SiloStatus.DEAD:
            return VoteOutcome.ALREADY_GONE  # Dead is terminal: a gossiped death spares the read
        outcome = VoteOutcome.LOST_RACE
        settled = False
        attempts = 0
        while attempts < VOTE_ATTEMPTS:
            if not self._can_vote():
                logger.debug("silo %s: no vote against %s: the table failed us lately", view.address, target)
                return VoteOutcome.NOT_ALLOWED
            if not still_holds():
                return self._withdrawn(target)
            ballot = _Ballot(
                target, others_unheard, settled, refused, still_holds, asyncio.get_running_loop().create_future()
            )
            try:
                outcome = await self._vote_once(ballot)
            except TableUnavailableError as exc:
                logger.debug("silo %s: the vote against %s failed: %s", view.address, target, exc)
                return VoteOutcome.NOT_ALLOWED
            if outcome is VoteOutcome.SETTLING:
                settled = True
                await view.clock.sleep(settle_time(view.options))
                continue
            if outcome is not VoteOutcome.LOST_RACE:
                return outcome
            attempts += 1
            logger.info("silo %s lost the race to vote against %s; retrying on a fresh read", view.address, target)
        return outcome

    def _withdrawn(self, target: SiloAddress) -> VoteOutcome:
        logger.info(
            "silo %s withdraws its vote against %s: its evidence no longer holds (it answered or an intermediary "
            "reached it since the vote began, or our own stall is no longer counted as its silence)",
            self._view.address, target,
        )  # fmt: skip
        return VoteOutcome.WITHDRAWN

    async def _vote_once(self, ballot: _Ballot) -> VoteOutcome:
        """One read-and-write attempt of a vote, cast together with the votes of ours queued beside it.

        Votes that come while a batch is in flight wait for the next one: when a rack or a
        zone is lost, this silo's monitors of its silos vote at about the same moment, and
        instead of racing each other for the version row (one write each, all but one lost),
        the ones behind the first share one read and one ``update_rows``, and the silos whose
        quorum they complete are declared Dead in one version. A vote with no other in flight
        is cast at once by its own caller.
        """
        ballot.outcome.add_done_callback(retrieve_failure)  # a voter cancelled by a stop never reads its outcome
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
        batch = self._ballots[: self._view.table.max_rows_per_update]
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
        """Cast each vote on refusals on its target's row alone (``RefusalVotes``), the others on
        our view if it decides as a read would (``_cast_on_view``), else on a fresh read of the table."""
        refused = {ballot.target: ballot for ballot in batch if ballot.refused}
        on_rows = refused if refused and self._on_rows.decides() else {}
        cast_on_rows = {
            target: await self._on_rows.cast(target) if ballot.still_holds() else self._withdrawn(target)
            for target, ballot in on_rows.items()
        }
        batch = [ballot for ballot in batch if ballot.target not in on_rows]
        if not batch:
            return cast_on_rows
        return cast_on_rows | await self._cast_on_table(batch)

    async def _cast_on_table(self, batch: list[_Ballot]) -> dict[SiloAddress, VoteOutcome]:
        view = self._view
        outcomes = await self._cast_on_view(batch) if self._trusted_gossip else None
        if outcomes is not None:
            return outcomes
        data = await view.access.attempt(view.table.read_all)
        await view.accept(data)
        outcomes = await self._decide_and_write(batch, MembershipSnapshot(data))
        if VoteOutcome.LOST_RACE in outcomes.values() and view.options.use_liveness_gossip:
            outcomes = await self._after_lost_race(outcomes, data.version.version)
        return outcomes

    @property
    def _winner_gossip_wait(self) -> float:
        """How long a vote that lost its race waits for the winner's gossip (``VIEW_VOTE_GOSSIP_WAIT``)."""
        return VIEW_VOTE_GOSSIP_WAIT * self._view.options.probe_timeout

    async def _after_lost_race(
        self, outcomes: dict[SiloAddress, VoteOutcome], read_version: int
    ) -> dict[SiloAddress, VoteOutcome]:
        """``outcomes`` of a vote decided on a read that lost its race, once the winner's gossip
        came (or ``VIEW_VOTE_GOSSIP_WAIT`` of a probe timeout passed): ``ALREADY_GONE`` for each
        target it shows Dead, which needs no read (a Dead view only spares a vote, as in
        ``try_vote``). The winner is usually a monitor of the same dead silo completing its
        quorum, and retrying at once read the table to find that."""
        await self._view.brought_by_gossip(read_version + 1, self._winner_gossip_wait)
        snapshot = self._view.snapshot
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
        view = self._view
        for _ in range(VOTE_ATTEMPTS):
            snapshot = view.snapshot
            if not self._decides_as_a_read(snapshot):
                return None
            outcomes = await self._decide_and_write(batch, snapshot)
            if VoteOutcome.LOST_RACE not in outcomes.values():
                return outcomes
            if not await view.brought_by_gossip(snapshot.version + 1, self._winner_gossip_wait):
                return None
            logger.debug(
                "silo %s: a vote on view %d lost; deciding again on gossiped view %d",
                view.address, snapshot.version, view.snapshot.version,
            )  # fmt: skip
        return None

    def _decides_as_a_read(self, snapshot: MembershipSnapshot) -> bool:
        """Whether a vote decided on ``snapshot`` is the one a read at its version would give
        (``_cast_on_view``): we hold a view, no gossip told of a newer version, and every
        Active silo in it is fresh."""
        view = self._view
        return (
            view.publisher.current is not None
            and view.announced_version <= snapshot.version
            and all(view.liveness.is_fresh(silo) for silo in snapshot.active_silos)
        )

    async def _decide_and_write(self, batch: list[_Ballot], read: MembershipSnapshot) -> dict[SiloAddress, VoteOutcome]:
        """Decide each ballot on ``read`` (the table at its version) and write the decisions in one
        conditional write at the next version; ``LOST_RACE`` for each decision if it lost."""
        view = self._view
        if (refusal := not_a_live_voter(view)) is not None:
            return dict.fromkeys((ballot.target for ballot in batch), refusal)
        now = view.clock.now()
        data = read.data
        quorum_base = len(view.liveness.fresh(read))
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
            if not ballot.still_holds():
                outcomes[target] = self._withdrawn(target)
                continue
            decision = decide_vote(row[0], view.address, now, view.options, quorum_base, dead)
            outcome = VoteOutcome.DECLARED_DEAD if decision.kind is VoteKind.DECLARE_DEAD else VoteOutcome.VOTED
            if decision.kind is VoteKind.DECLARE_DEAD:
                held = hold_death(
                    view.address, view.options, decision.entry, read, now, quorum_base,
                    others_unheard=ballot.others_unheard, settled=ballot.settled, refused=ballot.refused,
                )  # fmt: skip
                if held is not None:
                    outcome = held
                    decision = decide_vote(
                        row[0], view.address, now, view.options, quorum_base, dead, may_declare=False
                    )
            outcomes[target] = outcome
            decisions[target] = (decision, row[1])
        if not decisions:
            return outcomes
        updates = [(decision.entry, etag) for decision, etag in decisions.values()]
        committed = await view.access.attempt(
            functools.partial(view.table.update_rows_with_etags, updates, data.version.next())
        )
        if committed is None:  # the table moved past the version decided on
            view.hear_of(read.version + 1)
            return {target: VoteOutcome.LOST_RACE if target in decisions else outcomes[target] for target in outcomes}
        refused = {ballot.target for ballot in batch if ballot.refused}
        for target, (decision, _) in decisions.items():
            if outcomes[target] in (VoteOutcome.DECLARED_DEAD, VoteOutcome.VOTED):
                report_decision(logger, view.address, target, decision, refused=target in refused)
        declared = tuple(target for target in decisions if outcomes[target] is VoteOutcome.DECLARED_DEAD)
        await view.after_write(committed, declared_dead=declared)
        return outcomes

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the queued votes before they are written; returns the tasks to be awaited."""
        return self._cast_tasks.cancel()
