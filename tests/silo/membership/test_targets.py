"""Our rank among a target's monitors and the grid phase it gives (``targets.RingTargets``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from membership_tables import SiloAddress
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets, ring_index
from silo.membership.targets import PROBE_PHASES, RingTargets, monitors_in_rank_order
from tests.silo.harness import address, row, view

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
