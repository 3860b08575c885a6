"""The arithmetic of suspicion votes: vote freshness, the quorum and the vote itself.

Pure functions of a row, the time and the options, so the rules can be tested as tables.
The table manager applies the resulting ``VoteDecision`` in one conditional write.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from membership_tables import MembershipEntry, SiloAddress, SiloStatus, Vote
from silo.membership.options import SiloOptions


def fresh_votes(votes: Iterable[Vote], now: datetime, expiration: float) -> tuple[Vote, ...]:
    """The votes younger than ``expiration`` seconds, measured from the window end.

    The window ends at the later of ``now`` and the newest vote: a voter whose clock runs
    ahead of ours writes votes "from the future", and measuring from our own ``now`` would
    keep its older votes fresh too long or expire ours too early.
    """
    votes = tuple(votes)
    if not votes:
        return ()
    window_end = max(now, *(when for _, when in votes))
    return tuple((voter, when) for voter, when in votes if (window_end - when).total_seconds() < expiration)


def required_votes(num_votes_for_death_declaration: int, fresh_active: int) -> int:
    """Votes needed to declare death: the configured number, capped at half the fresh Active silos.

    In a small cluster ``num_votes_for_death_declaration`` healthy voters may not exist;
    ``(fresh_active + 1) // 2`` still needs half of them. Never less than one. (Fresh: see
    ``silo.membership.liveness``; a crashed silo stops heartbeating and drops out.)
    """
    return max(1, min(num_votes_for_death_declaration, (fresh_active + 1) // 2))


def may_vote(heard: int, fresh_monitored: int) -> bool:
    """The majority rule: a silo votes only while it is on the majority side of what it monitors.

    ``heard``: monitored silos that answered within the suspicion time; ``fresh_monitored``:
    monitored silos that are fresh (they still heartbeat, so they are alive somewhere).
    The silo plus those it hears must be a strict majority of itself plus the fresh ones.
    A partitioned silo still reaches the table and stays fresh, so it keeps counting
    against a minority; a crashed or hung one stops heartbeating and drops out.
    """
    return 2 * (1 + heard) > 1 + fresh_monitored


class VoteKind(enum.Enum):
    VOTE = "vote"
    """Write the suspicion votes; not enough yet to declare death."""
    DECLARE_DEAD = "declare_dead"
    """This voter reaches the quorum: write the row as Dead."""


@dataclass(frozen=True)
class VoteDecision:
    """The row to write (votes pruned and added, or Dead) and the count that led to it."""

    kind: VoteKind
    entry: MembershipEntry
    votes: int
    required: int


def decide_vote(
    target_entry: MembershipEntry,
    voter: SiloAddress,
    now: datetime,
    options: SiloOptions,
    fresh_active_count: int,
    dead_voters: Collection[SiloAddress] = (),
) -> VoteDecision:
    """Add ``voter``'s vote to the target's row: one vote per observer, on its own evidence.

    Expired votes are pruned; a repeated vote by the same silo replaces its older one.
    Votes cast by ``dead_voters`` are dropped too: a silo that was itself declared Dead
    (typically the partitioned one, which suspected everybody) must not help kill anyone.
    If the fresh votes reach ``required_votes`` the row is declared Dead and the voter
    (the killer) is recorded last in ``suspect_times``.
    """
    kept = tuple(
        vote
        for vote in fresh_votes(target_entry.suspect_times, now, options.death_vote_expiration)
        if vote[0] != voter and vote[0] not in dead_voters
    )
    votes = (*kept, (voter, now))
    required = required_votes(options.num_votes_for_death_declaration, fresh_active_count)
    if len(votes) >= required:
        entry = target_entry.replace(status=SiloStatus.DEAD, suspect_times=votes)
        return VoteDecision(VoteKind.DECLARE_DEAD, entry, len(votes), required)
    return VoteDecision(VoteKind.VOTE, target_entry.replace(suspect_times=votes), len(votes), required)
