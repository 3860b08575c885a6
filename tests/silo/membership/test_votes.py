from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from membership_tables import MembershipEntry, SiloAddress, SiloStatus, Vote
from silo.membership.options import SiloOptions
from silo.membership.votes import (
    VoteKind,
    accusations,
    arbitrate_cut,
    correlated_suspicions,
    decide_vote,
    fresh_votes,
    may_vote,
    required_votes,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
A, B, C, D = (SiloAddress("10.0.0.1", 11000 + index, 1) for index in range(4))
TARGET = SiloAddress("10.0.0.2", 11111, 1)
OPTIONS = SiloOptions()  # death_vote_expiration 120s, 2 votes


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def target_row(*votes: Vote, alive_seconds_ago: float = 0.0) -> MembershipEntry:
    return MembershipEntry(TARGET, SiloStatus.ACTIVE, at(-1000), at(-alive_seconds_ago), suspect_times=votes)


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ((), ()),
        (((A, at(-10)),), ((A, at(-10)),)),
        (((A, at(-119.9)),), ((A, at(-119.9)),)),
        (((A, at(-120)),), ()),  # exactly the expiration: no longer fresh
        (((A, at(-500)), (B, at(-5))), ((B, at(-5)),)),
        # clocks out of sync: B's clock runs 100s ahead, so the window ends at B's vote and A's expires
        (((A, at(-30)), (B, at(100))), ((B, at(100)),)),
        # ...while a vote 100s behind a future vote is still fresh
        (((A, at(0)), (B, at(100))), ((A, at(0)), (B, at(100)))),
    ],
)
def test_fresh_votes(votes: tuple[Vote, ...], expected: tuple[Vote, ...]) -> None:
    assert fresh_votes(votes, NOW, 120.0) == expected


@pytest.mark.parametrize(
    ("fresh_active", "expected"),
    [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2), (8, 2), (9, 2), (10, 2)],
)
def test_quorum_with_two_votes_configured(fresh_active: int, expected: int) -> None:
    assert required_votes(2, fresh_active) == expected


@pytest.mark.parametrize(
    ("fresh_active", "expected"),
    [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3), (7, 4), (8, 4), (9, 5), (10, 5)],
)
def test_quorum_is_capped_at_a_majority(fresh_active: int, expected: int) -> None:
    assert required_votes(10, fresh_active) == expected


@pytest.mark.parametrize(
    ("heard", "fresh_monitored", "allowed", "case"),
    [
        (4, 4, True, "5 silos, all connected"),
        (2, 4, True, "3|2 split, majority side: 3 of 5"),
        (1, 4, False, "3|2 split, minority side: 2 of 5"),
        (0, 4, False, "1|4 isolation, the isolated silo"),
        (3, 4, True, "1|4 isolation, the others: 4 of 5"),
        (3, 6, True, "4|3 of 7, majority: 4 of 7"),
        (2, 6, False, "4|3 of 7, minority: 3 of 7"),
        (1, 3, False, "2|2 even split: 2 of 4 on both sides, nobody votes"),
        (1, 4, False, "3 of 5 killed, before they go stale: 2 of 5"),
        (1, 1, True, "3 of 5 killed, once stale: 2 of 2"),
        (0, 1, False, "2 silos, the other silent but fresh: 1 of 2 (an even split)"),
        (0, 0, True, "2 silos, the other stale: 1 of 1"),
        (3, 4, True, "one cut link in 5: each end hears 3 of 4"),
    ],
)
def test_the_majority_rule(heard: int, fresh_monitored: int, allowed: bool, case: str) -> None:
    assert may_vote(heard, fresh_monitored) is allowed, case


def test_first_vote_is_written_not_a_declaration() -> None:
    decision = decide_vote(target_row(), A, NOW, OPTIONS, fresh_active_count=5)
    assert decision.kind is VoteKind.VOTE
    assert decision.entry.status is SiloStatus.ACTIVE
    assert decision.entry.suspect_times == ((A, NOW),)
    assert (decision.votes, decision.required) == (1, 2)


def test_last_voter_declares_death_and_records_itself_as_the_killer() -> None:
    decision = decide_vote(target_row((B, at(-30))), A, NOW, OPTIONS, fresh_active_count=5)
    assert decision.kind is VoteKind.DECLARE_DEAD
    assert decision.entry.status is SiloStatus.DEAD
    assert decision.entry.suspect_times == ((B, at(-30)), (A, NOW))
    assert decision.entry.suspect_times[-1][0] == A


def test_one_observer_is_one_vote_however_often_it_votes() -> None:
    entry = target_row()
    for seconds in (0, 1, 2):
        decision = decide_vote(entry, A, at(seconds), OPTIONS, fresh_active_count=5)
        entry = decision.entry
    assert decision.kind is VoteKind.VOTE
    assert entry.suspect_times == ((A, at(2)),)


def test_a_repeated_vote_replaces_the_old_one() -> None:
    decision = decide_vote(target_row((A, at(-60))), A, NOW, OPTIONS, fresh_active_count=5)
    assert decision.kind is VoteKind.VOTE
    assert decision.entry.suspect_times == ((A, NOW),)


def test_expired_votes_are_pruned_and_do_not_count() -> None:
    decision = decide_vote(target_row((B, at(-121)), (C, at(-10))), A, NOW, OPTIONS, fresh_active_count=9)
    assert decision.kind is VoteKind.DECLARE_DEAD
    assert decision.entry.suspect_times == ((C, at(-10)), (A, NOW))
    alone = decide_vote(target_row((B, at(-121))), A, NOW, OPTIONS, fresh_active_count=9)
    assert alone.kind is VoteKind.VOTE
    assert alone.entry.suspect_times == ((A, NOW),)


def test_in_a_two_silo_cluster_one_vote_is_enough() -> None:
    decision = decide_vote(target_row(), A, NOW, OPTIONS, fresh_active_count=2)
    assert decision.kind is VoteKind.DECLARE_DEAD


@pytest.mark.parametrize("cluster_size", range(1, 11))
def test_votes_needed_to_kill_in_clusters_of_one_to_ten(cluster_size: int) -> None:
    options = SiloOptions(num_votes_for_death_declaration=3)
    voters = [SiloAddress("10.0.1.1", 12000 + index, 1) for index in range(cluster_size)]
    entry = target_row()
    kinds = []
    for voter in voters:
        decision = decide_vote(entry, voter, NOW, options, fresh_active_count=cluster_size)
        kinds.append(decision.kind)
        entry = decision.entry
        if decision.kind is VoteKind.DECLARE_DEAD:
            break
    assert kinds.index(VoteKind.DECLARE_DEAD) + 1 == min(3, max(1, (cluster_size + 1) // 2))


def test_votes_of_dead_silos_do_not_count() -> None:
    decision = decide_vote(target_row((B, at(-5))), A, NOW, OPTIONS, fresh_active_count=5, dead_voters={B})
    assert decision.kind is VoteKind.VOTE
    assert decision.entry.suspect_times == ((A, NOW),)


# --- the table arbitrates a cut (ring sampling) ---------------------------------------------

M = [SiloAddress("10.0.1.1", 12000 + index, 1) for index in range(6)]
"""Majority side of a 6|4 cut."""
m = [SiloAddress("10.0.2.1", 13000 + index, 1) for index in range(4)]
"""Minority side."""


def row_of(silo: SiloAddress, *votes: Vote, status: SiloStatus = SiloStatus.ACTIVE) -> MembershipEntry:
    return MembershipEntry(silo, status, at(-1000), at(0), suspect_times=votes)


def test_accusations_are_the_fresh_votes_between_live_silos() -> None:
    entries = [
        row_of(A, (B, at(-5)), (C, at(-500))),  # C's vote expired
        row_of(B, (D, at(-5))),  # D is Dead: its votes accuse nobody
        row_of(C, (A, at(-1)), status=SiloStatus.DEAD),  # votes against the Dead say nothing
        row_of(D, status=SiloStatus.DEAD),
    ]
    assert accusations(entries, NOW, 120.0) == {(B, A)}


def test_a_lone_target_is_always_declared_a_crash_or_a_hang() -> None:
    verdict = arbitrate_cut(set(), TARGET, [A, B])
    assert verdict.allowed
    assert (verdict.target_side, verdict.voter_side) == (1, 2)
    # even a single voter against a lone target (a 2-silo cluster) may declare it
    assert arbitrate_cut(set(), TARGET, [A]).allowed


def test_the_majority_side_kills_a_minority_silo_the_table_shows_on_the_smaller_side() -> None:
    # every minority silo accused by two majority silos; one minority silo accuses a majority one
    edges = {(M[i % 6], victim) for victim in m for i in range(m.index(victim), m.index(victim) + 2)}
    edges |= {(m[0], M[0])}
    verdict = arbitrate_cut(edges, m[1], [M[1], M[2]])
    assert verdict.allowed, verdict
    assert verdict.target_side < verdict.voter_side


def test_minority_voters_cannot_kill_a_majority_silo_once_the_cut_is_in_the_table() -> None:
    # the majority accuses the two minority voters (and the rest of the minority)
    edges = {(M[i], m[i % 4]) for i in range(6)}
    # m0 and m1 heard a majority of their own samples and vote against M0
    verdict = arbitrate_cut(edges, M[0], [m[0], m[1]])
    assert not verdict.allowed, verdict
    assert verdict.two_sided
    assert verdict.target_side > verdict.voter_side


def test_an_even_cut_kills_nobody_on_either_side() -> None:
    left, right = M[:3], M[3:]
    edges = {(a, b) for a in left for b in right} | {(b, a) for a in left for b in right}
    assert not arbitrate_cut(edges, right[0], left[:2]).allowed
    assert not arbitrate_cut(edges, left[0], right[:2]).allowed


def test_accusations_that_are_no_cut_arbitrate_nothing() -> None:
    # an odd cycle (A -> B -> C -> A): random loss, not two sides
    verdict = arbitrate_cut({(A, B), (B, C), (C, A)}, A, [D, B])
    assert verdict.allowed
    assert not verdict.two_sided


def test_suspicions_are_correlated_when_anyone_else_is_accused() -> None:
    assert not correlated_suspicions(set(), TARGET)
    assert not correlated_suspicions({(A, TARGET), (B, TARGET)}, TARGET)
    assert correlated_suspicions({(A, TARGET), (B, C)}, TARGET)
