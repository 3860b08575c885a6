from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from membership_tables import MembershipEntry, SiloAddress
from silo.membership.clock import FakeClock
from silo.membership.local_health import (
    MAX_SCORE,
    SCORE_REUSE_FRACTION,
    SILENCE_MARGIN,
    SILENCE_MEMORY,
    LocalHealth,
    effective_timeout,
    lag_penalty,
    loss_penalty,
    probe_penalty,
    silence_penalty,
)
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot
from tests.silo.harness import T0, address, async_test, row, view

ME, A, B = address(1), address(2), address(3)


@pytest.mark.parametrize(
    ("lag", "penalty"), [(-0.1, 0), (0.0, 0), (1.2, 0), (1.25, 1), (2.6, 2), (4.9, 3), (5.0, 4), (60.0, 4)]
)
def test_lag_penalty_counts_quarters_of_a_probe_timeout(lag: float, penalty: int) -> None:
    assert lag_penalty(lag, probe_timeout=5.0) == penalty


@pytest.mark.parametrize(
    ("results", "penalty"), [([], 0), ([False], 0), ([True, False], 0), ([False, False], 2), ([False] * 5, 2)]
)
def test_probes_failing_to_everyone_make_us_suspect_ourselves(results: list[bool], penalty: int) -> None:
    assert probe_penalty(lambda: results) == penalty


ANSWERED, LOST = True, False


@pytest.mark.parametrize(
    ("recent", "penalty", "case"),
    [
        ([], 0, "no targets"),
        ([[LOST] * 16], 0, "one target: its failure, not our network"),
        ([[ANSWERED] * 16] * 4, 0, "a quiet network"),
        ([[ANSWERED] * 16] * 3 + [[LOST] * 16], 0, "one dead or hung target among four"),
        ([[ANSWERED] * 16] * 2 + [[LOST] * 16] * 2, 0, "a 3|2 split seen from the majority"),
        ([[ANSWERED] * 16] + [[LOST] * 16] * 3, 3, "a 3|2 split seen from the minority"),
        ([[ANSWERED] * 15 + [LOST]] * 4, 1, "one timeout in 16 to every target: mild loss"),
        ([[ANSWERED] * 14 + [LOST] * 2] * 4, 2, "two in 16"),
        ([[ANSWERED] * 12 + [LOST] * 4] * 4, 3, "a quarter: heavy loss"),
    ],
)
def test_loss_to_most_targets_makes_us_slower_to_suspect(recent: list[list[bool]], penalty: int, case: str) -> None:
    assert loss_penalty(recent) == penalty, case


def test_the_loss_estimate_forgets_old_results() -> None:
    local = health(lambda: view(row(ME)))
    for target in (A, B):
        for _ in range(4):
            local.record_probe(target, False)
    assert local.score() > 0
    for target in (A, B):
        for _ in range(16):
            local.record_probe(target, True)
    assert local.score() == 0


@pytest.mark.parametrize(
    ("longest", "penalty", "case"),
    [
        (0.0, 0, "no silence remembered"),
        (0.25, 0, "one probe interval: a healthy network"),
        (0.75, 0, "half the floor: twice it is the floor"),
        (0.8, 1, "just over half the floor"),
        (2.25, 2, "1.5 floors: twice it is 3 floors"),
        (5.0, 6, "a 5 s TCP stall"),
        (60.0, 79, "a long one (the score is capped later)"),
    ],
)
def test_a_live_silos_longest_silence_sets_the_points_that_keep_the_floor_twice_it(
    longest: float, penalty: int, case: str
) -> None:
    floor = SiloOptions.local().detection_time  # 1.5 s
    assert silence_penalty(longest, floor) == penalty, case
    assert floor * (1 + penalty) >= SILENCE_MARGIN * longest, case


def local_health(clock: FakeClock, current: Callable[[], MembershipSnapshot]) -> LocalHealth:
    return LocalHealth(address=ME, options=SiloOptions.local(), clock=clock, snapshot=current)


@async_test
async def test_a_completed_silence_is_remembered_for_silence_memory_detection_times() -> None:
    clock, options = FakeClock(T0), SiloOptions.local()
    local = local_health(clock, lambda: view(row(ME)))
    local.record_silence(0.5)  # short silences are not even kept
    assert local.score() == 0
    local.record_silence(2.0)
    assert local.score() == silence_penalty(2.0, options.detection_time) == 2
    await clock.advance(SILENCE_MEMORY * options.detection_time - 1.0)
    local.record_silence(1.0)  # a shorter one later does not shorten the memory of the longer
    assert local.score() == 2
    await clock.advance(1.0)
    assert local.score() == 1  # the 2 s silence is forgotten; the 1 s one is not yet
    await clock.advance(SILENCE_MEMORY * options.detection_time)
    assert local.score() == 0


def test_the_silence_points_are_a_floor_under_the_other_points_not_added_to_them() -> None:
    """Loss shows both as timed-out probes and as silences: the score keeps ``suspect_after`` at
    least twice the longest silence, and counts the same loss once."""
    local = local_health(FakeClock(T0), lambda: view(row(ME)))
    local.record_silence(1.0)
    assert local.score() == 1
    for target in (A, B):
        for _ in range(12):
            local.record_probe(target, True)
        for _ in range(4):
            local.record_probe(target, False)
    assert local.score() == 2 + 3  # every latest probe failed (2) and a quarter timed out (3)
    local.record_silence(60.0)
    assert local.score() == MAX_SCORE


@pytest.mark.parametrize(("score", "timeout"), [(0, 5.0), (1, 10.0), (8, 45.0)])
def test_effective_timeout(score: int, timeout: float) -> None:
    assert effective_timeout(5.0, score) == timeout


def health(snapshot: Callable[[], MembershipSnapshot]) -> LocalHealth:
    return LocalHealth(address=ME, options=SiloOptions(), clock=FakeClock(T0), snapshot=snapshot)


def test_score_sums_lag_probes_and_suspicion_and_is_capped() -> None:
    me: MembershipEntry = row(ME)
    current = view(me)
    local = health(lambda: current)
    assert local.score() == 0
    local.record_probe(A, False)
    local.record_probe(B, False)
    assert local.score() == 2 + 3  # every latest probe failed, and every recent one: loss
    local.forget(B)
    assert local.score() == 0
    current = view(me.replace(suspect_times=((A, T0), (B, T0))))
    assert local.score() == 2
    local.record_loop_lag(100.0)
    local.record_probe(B, False)
    assert local.score() == MAX_SCORE


@async_test
async def test_the_lag_loop_reports_no_lag_on_a_punctual_clock() -> None:
    clock = FakeClock(T0)
    local = LocalHealth(address=ME, options=SiloOptions(), clock=clock, snapshot=lambda: view(row(ME)))
    local.record_loop_lag(100.0)
    local.start()
    await clock.advance(SiloOptions().probe_timeout)
    assert local.score() == 0
    await local.stop()


@async_test
async def test_an_expired_vote_against_us_stops_counting_within_a_quarter_probe_interval() -> None:
    """The score is reused while its inputs are unchanged, but not past the vote's expiry by more than that."""
    clock, options = FakeClock(T0), SiloOptions()
    current = view(row(ME).replace(suspect_times=((A, T0),)))
    local = LocalHealth(address=ME, options=options, clock=clock, snapshot=lambda: current)
    assert local.score() == 1
    await clock.advance(options.death_vote_expiration + 0.001)
    assert local.score() in (0, 1)  # the vote expired; a score from before may be reused briefly
    await clock.advance(options.effective_probe_interval * SCORE_REUSE_FRACTION)
    assert local.score() == 0
    current = view(row(ME).replace(suspect_times=((A, clock.now()),)))
    assert local.score() == 1  # a new snapshot is a new input: no reuse


@given(
    probes=st.lists(
        st.tuples(st.sampled_from([A, B, address(4)]), st.booleans(), st.sampled_from([False] * 7 + [True])),
        max_size=80,
    )
)
@example(probes=[(A, False, False), (B, False, False), (address(4), True, False)])  # a new target's first answer
@example(probes=[(A, False, False), (B, False, False), (A, True, False)])  # an answer after a miss
def test_a_reused_score_is_always_the_score_of_the_current_inputs(probes: list[tuple[SiloAddress, bool, bool]]) -> None:
    """The cache skips recomputing after a result that cannot move the score (one more answer from
    a target whose recent probes all answered): whatever the sequence of results and forgotten
    targets, the score returned is the one computed afresh from the same inputs."""
    current = view(row(ME))
    local = health(lambda: current)
    for target, answered, forget in probes:
        local.record_probe(target, answered)
        if forget:
            local.forget(target)
        assert local.score() == local._compute(current)  # the uncached computation


def test_only_the_first_veto_of_an_unbroken_silence_counts_as_a_completed_silence() -> None:
    """A link that stays cut is vetoed round after round, each veto at least half the silence
    needed: counting each would add a point a round. Its first veto counts; the next counts only
    after the target answered our own probes again (a new silence); other targets count apart."""
    local = local_health(FakeClock(T0), lambda: view(row(ME)))
    local.record_veto(A, 0.8)
    assert local.score() == 1
    local.record_veto(A, 1.6)  # the same link, still cut: no new evidence about the network
    assert local.score() == 1
    local.record_veto(B, 1.6)  # another link's stall is
    assert local.score() == silence_penalty(1.6, SiloOptions.local().detection_time) == 2
    local.record_probe(A, True)  # A's link worked again: its next veto ends a new silence
    local.record_veto(A, 2.3)
    assert local.score() == silence_penalty(2.3, SiloOptions.local().detection_time) == 3


def test_a_forgotten_target_starts_afresh() -> None:
    local = local_health(FakeClock(T0), lambda: view(row(ME)))
    local.record_veto(A, 0.8)
    local.forget(A)  # no longer probed (it left our rings); probed again later, its veto is new
    local.record_veto(A, 1.6)
    assert local.score() == 2
