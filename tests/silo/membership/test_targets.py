"""Our rank among a target's monitors and the grid phase it gives (``targets.RingTargets``)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from membership_tables import SiloAddress, TableVersion
from silo.membership.liveness import LivenessTracker
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets, ring_index
from silo.membership.snapshot import MembershipDelta, MembershipSnapshot
from silo.membership.targets import (
    PROBE_PHASES,
    RingTargets,
    SuspectCandidates,
    monitors_in_rank_order,
    select_targets,
)
from tests.silo.harness import T0, HandClock, address, row, view

NOW = T0 + timedelta(seconds=1)

LOCAL = SiloOptions.local()  # 10 probed silos, a quorum of 2: two grid phases from 4 ring targets on


def cluster(size: int, seed: int = 0) -> list[SiloAddress]:
    """``size`` silos; another ``seed``, other ports: other rings."""
    return [address(20000 + 97 * index + seed) for index in range(size)]


@pytest.mark.parametrize("size", [5, 11])
def test_when_every_silo_probes_every_other_one_each_ranks_the_others_one_per_rank(size: int) -> None:
    silos = tuple(cluster(size))
    for target in silos:
        ranked = monitors_in_rank_order(target, silos, size - 1)
        assert sorted(ranked) == sorted(set(silos) - {target})  # every other silo, once
        assert ranked[0] == next(ring_index(silos).preceding(target, 0))


def test_under_ring_sampling_the_ranked_are_the_targets_ring_predecessors_who_probe_it() -> None:
    silos = tuple(cluster(40))
    for target in silos:
        ranked = monitors_in_rank_order(target, silos, 3)
        predecessors = [next(ring_index(silos).preceding(target, ring)) for ring in range(3)]
        assert ranked == list(dict.fromkeys(predecessors))
        assert all(target in probe_targets(monitor, silos, 3) for monitor in ranked)


@pytest.mark.parametrize(("size", "seed"), [(5, 0), (5, 1), (10, 0), (10, 3), (20, 0), (20, 5)])
def test_each_grid_phase_holds_a_quorum_of_each_targets_first_ranked_monitors(size: int, seed: int) -> None:
    """A hung silo is declared by the first ranks of the phase that heard it the longer ago: each
    phase must have a quorum of them (two phases at the local preset), no more."""
    silos = cluster(size, seed)
    snapshot = view(*(row(silo) for silo in silos))
    first_ranked: dict[SiloAddress, Counter[float]] = {silo: Counter() for silo in silos}
    for monitor in silos:
        ring = RingTargets.of(snapshot, monitor, LOCAL)
        assert ring.phases == PROBE_PHASES
        for target in ring.targets:
            if ring.ranks[target] < ring.first_ranks:
                first_ranked[target][ring.phase(target)] += 1
    quorum = LOCAL.num_votes_for_death_declaration
    assert all(counts == {0.0: quorum, 0.5: quorum} for counts in first_ranked.values())


def test_too_few_ring_targets_for_a_quorum_per_phase_keep_one_grid() -> None:
    """Orleans' 3 probed silos and a quorum of 2 (the scale preset): one phase, the first two ranks vote at once."""
    silos = cluster(20)
    snapshot = view(*(row(silo) for silo in silos))
    for options in (replace(LOCAL, num_probed_silos=3), LOCAL.with_overrides({"align_probes": "false"})):
        ring = RingTargets.of(snapshot, silos[0], options)
        assert ring.phases == 1
        assert ring.first_ranks == 2
        assert {ring.phase(target) for target in ring.targets} == {0.0}


def test_a_silo_not_active_has_no_ring_and_a_suspect_off_the_ring_is_probed_on_the_grid() -> None:
    silos = cluster(8)
    snapshot = view(*(row(silo) for silo in silos))
    assert RingTargets.of(snapshot, address(1), LOCAL).targets == []  # not in the view
    ring = RingTargets.of(snapshot, silos[0], replace(LOCAL, num_probed_silos=4))
    off_ring = next(silo for silo in silos[1:] if silo not in ring.targets)
    assert ring.phase(off_ring) == 0.0


def test_suspect_candidates_give_the_targets_a_pass_over_every_row_gives_at_every_instant() -> None:
    """Rows heartbeat at different times, are voted against, are learned from gossip, and full
    reads come and go: the targets found among the candidates are the ones a pass over the whole
    view finds, at each step."""
    rng = random.Random(7)
    clock = HandClock()
    liveness = LivenessTracker(LOCAL, clock)
    candidates = SuspectCandidates(liveness, clock)
    silos = cluster(80)
    local = silos[0]
    beats = dict.fromkeys(silos, 0)

    def read(voted: set[SiloAddress], at: datetime = NOW) -> MembershipSnapshot:
        entries = []
        for silo in silos:
            entry = row(silo, when=T0 + timedelta(seconds=beats[silo]))
            entries.append(replace(entry, suspect_times=((local, at),)) if silo in voted else entry)
        return view(*entries)

    snapshot = read(set())
    liveness.observe(snapshot)
    for step in range(400):
        clock.now += rng.uniform(0.0, liveness.limit / 8)
        now = NOW + timedelta(seconds=clock.now)
        for silo in rng.sample(silos[1:], 10):  # live ones heartbeat; the last 20 never do
            if silo not in silos[-20:]:
                beats[silo] += 1
        event = rng.random()
        if event < 0.1:  # a full read of ours
            snapshot = read(set(rng.sample(silos, 3)), at=now)
            liveness.observe(snapshot)
        elif event < 0.3:  # rows learned from a peer: fresher watches, the same view
            liveness.learn(entry for entry in read(set()).entries if rng.random() < 0.2)
        elif event < 0.6:  # a delta: votes cast or cleared in a few rows (the view of the same origin)
            snapshot = apply_votes(snapshot, rng.sample(silos, rng.randint(1, 3)), local, now, step)
            if rng.random() < 0.5:
                liveness.learn(snapshot.entries[:5])
        elif event < 0.65:  # a view of another origin (pulled from a peer), then deltas on it
            snapshot = view(*snapshot.entries, version=snapshot.version)
        everyone = select_targets(snapshot, local, now, LOCAL, liveness.fresh_now())
        among = select_targets(snapshot, local, now, LOCAL, liveness.fresh_now(), candidates=candidates.of(snapshot))
        assert among == everyone, f"step {step}"
    assert any(liveness.silent_for(silo) is not None for silo in silos[-20:])


def apply_votes(
    snapshot: MembershipSnapshot, silos: list[SiloAddress], voter: SiloAddress, now: datetime, step: int
) -> MembershipSnapshot:
    """``snapshot`` with a delta that casts a vote in each of ``silos``' rows, or clears the one there."""
    written = []
    for silo in silos:
        entry = snapshot.entry(silo)
        assert entry is not None
        written.append((replace(entry, suspect_times=() if entry.suspect_times else ((voter, now),)), f"e{step}"))
    delta = MembershipDelta(snapshot.version, TableVersion(snapshot.version + 1, f"v{step}"), tuple(written))
    after = snapshot.apply(delta)
    assert after is not None
    return after


class CountingLiveness(LivenessTracker):
    """Counts the rows a pass tests (``stays_fresh_until``'s lookups)."""

    tested = 0

    def stays_fresh_until(self) -> Callable[[SiloAddress], float]:
        until = super().stays_fresh_until()

        def counted(silo: SiloAddress) -> float:
            self.tested += 1
            return until(silo)

        return counted


def candidates_over_a_read(
    silos: list[SiloAddress], liveness: LivenessTracker, clock: HandClock
) -> tuple[SuspectCandidates, MembershipSnapshot]:
    """Candidates on ``liveness``, and a view of ``silos`` (all fresh) it took in as a full read."""
    snapshot = view(*(row(silo) for silo in silos))
    liveness.observe(snapshot)
    return SuspectCandidates(liveness, clock), snapshot


def test_suspect_candidates_test_only_the_rows_deltas_wrote_in_a_view_of_the_same_origin() -> None:
    clock = HandClock()
    liveness = CountingLiveness(LOCAL, clock)
    silos = cluster(10)
    candidates, snapshot = candidates_over_a_read(silos, liveness, clock)
    assert candidates.of(snapshot) == ()
    assert liveness.tested == 10
    voted = apply_votes(snapshot, silos[3:5], silos[0], NOW, 1)
    assert [entry.silo_address for entry in candidates.of(voted)] == silos[3:5]
    assert liveness.tested == 12, "the two rows the delta wrote, not the view"
    cleared = apply_votes(voted, silos[4:5], silos[0], NOW, 2)
    assert [entry.silo_address for entry in candidates.of(cleared)] == silos[3:4]
    assert candidates.of(cleared)[0] is cleared.entry(silos[3]), "the view's own row, not an older one"
    assert voted.lineage.origin is snapshot.lineage.origin
    assert cleared.lineage.written == frozenset(silos[3:5])
    assert view(*cleared.entries).lineage.origin is not snapshot.lineage.origin


def test_suspect_candidates_pass_over_a_view_again_only_once_a_fresh_row_could_turn_stale() -> None:
    clock = HandClock()
    liveness = LivenessTracker(LOCAL, clock)
    silos = cluster(10)
    candidates, snapshot = candidates_over_a_read(silos, liveness, clock)
    assert candidates.of(snapshot) == ()
    stale_at = clock.now + liveness.limit
    while True:  # full reads every interval, no heartbeat moves, until the limit falls within our watch
        clock.now += LOCAL.full_refresh_interval
        liveness.observe(view(*(row(silo) for silo in silos[1:])))
        if clock.now + LOCAL.full_refresh_interval >= stale_at:
            break
    gone = candidates.of(snapshot)
    assert [entry.silo_address for entry in gone] == silos[:1], "a read without it dropped its watch"
    clock.now = stale_at - 0.001
    assert candidates.of(snapshot) is gone, "no row can have turned stale yet: no new pass"
    clock.now += 0.002
    assert [entry.silo_address for entry in candidates.of(snapshot)] == silos
    newer = view(*(row(silo, when=NOW) for silo in silos), version=2)
    liveness.observe(newer)
    assert candidates.of(newer) == (), "a new read: every row heartbeated, none is a candidate"
