"""Votes on refusals, cast on the target's row alone (``VoteCaster`` hands them here).

Refusals prove the target's process gone whatever the rest of the table says (no cut makes one,
so the table's arbitration does not apply: ``vote_caster.hold_death``), so such a vote is read
and written on the target's row alone, at the next version (``RowWriter.read_then_write``), and
only another vote against the same silo makes it lose its race. Read whole and conditioned on
the version, the second vote against a crashed silo of a 2,000-silo cluster on two cores took
40-60 s an attempt and lost every race to the cluster's other writes (a version a second) while
the first vote expired: no crash was declared within three minutes.
"""

from __future__ import annotations

import logging

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus
from silo.membership.row_writer import RowWriter
from silo.membership.table_view import TableView
from silo.membership.votes import VoteDecision, VoteKind, VoteOutcome, decide_vote, required_votes

logger = logging.getLogger(__name__)


def not_a_live_voter(view: TableView) -> VoteOutcome | None:
    """``NOT_ALLOWED`` unless our view holds us Joining or Active."""
    if view.snapshot.status_of(view.address) in (SiloStatus.JOINING, SiloStatus.ACTIVE):
        return None
    return VoteOutcome.NOT_ALLOWED


def report_decision(
    log: logging.Logger, voter: SiloAddress, target: SiloAddress, decision: VoteDecision, *, refused: bool
) -> VoteOutcome:
    """Log a written decision through the caster's ``log`` (``refused``: a vote on refusals); its outcome."""
    grounds = "on refusals" if refused else "on silence"
    counted = f"{decision.votes} of {decision.required} votes"
    if decision.kind is VoteKind.DECLARE_DEAD:
        log.warning("silo %s declared %s Dead %s (%s)", voter, target, grounds, counted)
        return VoteOutcome.DECLARED_DEAD
    log.info("silo %s voted against %s %s (%s)", voter, target, grounds, counted)
    return VoteOutcome.VOTED


class RefusalVotes:
    """Casts this silo's votes on refusals, each on its target's row."""

    def __init__(self, view: TableView, writer: RowWriter) -> None:
        self._view = view
        self._writer = writer

    def decides(self) -> bool:
        """Whether a vote on refusals may be decided on its target's row alone: our view holds
        enough fresh silos that the quorum is ``num_votes_for_death_declaration`` whatever a read
        would count (it lowers the quorum only in a cluster of a few silos)."""
        view = self._view
        wanted = view.options.num_votes_for_death_declaration
        return required_votes(wanted, len(view.liveness.fresh(view.snapshot))) == wanted

    async def cast(self, target: SiloAddress) -> VoteOutcome:
        """Read ``target``'s row and write our vote (or its death) into it at the next version,
        conditioned on that row alone, in one blocking call. Our view gives the quorum base and
        the silos whose votes no longer count (those it holds Dead)."""
        view = self._view
        if (refusal := not_a_live_voter(view)) is not None:
            return refusal
        snapshot, now = view.snapshot, view.clock.now()
        quorum_base = len(view.liveness.fresh(snapshot))
        dead = {entry.silo_address for entry in snapshot.with_status(SiloStatus.DEAD)}
        decisions: list[VoteDecision] = []

        def decide(data: MembershipTableData) -> MembershipEntry | None:
            found = data.get(target)
            if found is None or found[0].status is SiloStatus.DEAD:
                return None
            decisions.append(decide_vote(found[0], view.address, now, view.options, quorum_base, dead))
            return decisions[-1].entry

        _, entry, committed = await self._writer.read_then_write(target, decide, None, on_row_alone=True)
        if entry is None:
            return VoteOutcome.ALREADY_GONE
        if committed is None:
            return VoteOutcome.LOST_RACE
        outcome = report_decision(logger, view.address, target, decisions[-1], refused=True)
        declared = (target,) if outcome is VoteOutcome.DECLARED_DEAD else ()
        await view.after_write(committed, declared_dead=declared)
        return outcome
