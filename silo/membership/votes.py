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


Accusation = tuple[SiloAddress, SiloAddress]
"""(accuser, accused): a fresh vote of one live silo against another."""


def accusations(entries: Iterable[MembershipEntry], now: datetime, expiration: float) -> frozenset[Accusation]:
    """Every fresh vote in the table cast by a silo that is not Dead against a silo that is not Dead.

    Together they are the table's picture of who cannot reach whom: in a partition, each side's
    voters accuse silos of the other side, so the accusations are the edges across the cut.
    """
    entries = tuple(entries)
    dead = {entry.silo_address for entry in entries if entry.status is SiloStatus.DEAD}
    return frozenset(
        (voter, entry.silo_address)
        for entry in entries
        if entry.status is not SiloStatus.DEAD
        for voter, _ in fresh_votes(entry.suspect_times, now, expiration)
        if voter not in dead and voter != entry.silo_address
    )


@dataclass(frozen=True)
class CutVerdict:
    """What the table's accusations say about declaring ``target`` Dead (``arbitrate_cut``)."""

    allowed: bool
    target_side: int
    """Silos on the target's side of the cut the accusations draw (the target included)."""
    voter_side: int
    """Silos on the voters' side."""
    two_sided: bool
    """False when the accusations do not split into two sides (loss, not a cut): no arbitration."""


def arbitrate_cut(edges: Collection[Accusation], target: SiloAddress, voters: Collection[SiloAddress]) -> CutVerdict:
    """Let the table arbitrate: may the ``voters`` declare ``target`` Dead?

    With ring sampling (``N > num_probed_silos + 1``) a silo checks the majority rule over its own
    few targets only, so in a partition a minority silo can hear a majority of its sample and vote
    against a silo of the majority side. The table holds every side's votes. Accusation edges
    (plus the voters' own, against the target) link the silos that cannot reach each other; in a
    cut they form two sides, found by two-colouring the target's connected component. The
    target's side is the accused, the voters' side the accusers. A death is refused when the
    target's side holds someone besides the target and is at least as large as the voters' side:
    the table shows a cut in which the target is not on the smaller side. A lone target (a crash
    or a hang: it accuses nobody and nobody takes its side) is always allowed. Accusations that
    do not split in two (an odd cycle: random loss, not a cut) arbitrate nothing.
    """
    neighbours: dict[SiloAddress, set[SiloAddress]] = {}
    for accuser, accused in (*edges, *((voter, target) for voter in voters)):
        neighbours.setdefault(accuser, set()).add(accused)
        neighbours.setdefault(accused, set()).add(accuser)
    side = {target: 0}
    queue = [target]
    two_sided = True
    while queue:
        silo = queue.pop()
        for other in neighbours.get(silo, ()):
            if other not in side:
                side[other] = 1 - side[silo]
                queue.append(other)
            elif side[other] == side[silo]:
                two_sided = False
    target_side = sum(1 for colour in side.values() if colour == 0)
    voter_side = len(side) - target_side
    if not two_sided:
        return CutVerdict(True, target_side, voter_side, two_sided=False)
    return CutVerdict(target_side == 1 or target_side < voter_side, target_side, voter_side, two_sided=True)


def correlated_suspicions(edges: Collection[Accusation], target: SiloAddress) -> bool:
    """Fresh votes against some silo other than ``target``: a cut (or several failures) may be under way.

    A single crash or hang draws votes against one silo; a partition draws votes against many,
    on both sides, within a probe timeout or two of each other.
    """
    return any(accused != target for _, accused in edges)


class VoteOutcome(enum.Enum):
    """What one vote of ours came to (``silo.membership.vote_caster``)."""

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
    WITHDRAWN = "withdrawn"
    """Our evidence no longer held when the vote came to be decided (the target answered, or an
    intermediary reached it, after the vote began): nothing was written."""
    SETTLING = "settling"
    """Ring sampling amid correlated suspicions: the vote is recorded and the death decided
    after ``settle_time`` on a fresh read (``try_vote`` waits and retries; never returned)."""


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
    *,
    may_declare: bool = True,
) -> VoteDecision:
    """Add ``voter``'s vote to the target's row: one vote per observer, on its own evidence.

    Expired votes are pruned; a repeated vote by the same silo replaces its older one.
    Votes cast by ``dead_voters`` are dropped too: a silo that was itself declared Dead
    (typically the partitioned one, which suspected everybody) must not help kill anyone.
    If the fresh votes reach ``required_votes`` the row is declared Dead and the voter
    (the killer) is recorded last in ``suspect_times``. With ``may_declare`` False the vote
    is recorded but the row stays as it is (the table arbitrates a cut, or a death waits).
    """
    kept = tuple(
        vote
        for vote in fresh_votes(target_entry.suspect_times, now, options.death_vote_expiration)
        if vote[0] != voter and vote[0] not in dead_voters
    )
    votes = (*kept, (voter, now))
    required = required_votes(options.num_votes_for_death_declaration, fresh_active_count)
    if may_declare and len(votes) >= required:
        entry = target_entry.replace(status=SiloStatus.DEAD, suspect_times=votes)
        return VoteDecision(VoteKind.DECLARE_DEAD, entry, len(votes), required)
    return VoteDecision(VoteKind.VOTE, target_entry.replace(suspect_times=votes), len(votes), required)
