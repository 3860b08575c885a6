from __future__ import annotations

import itertools
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest

from membership_tables import SiloAddress
from silo.hashing import ring_position
from silo.membership.ring import RingIndex, probe_targets, ring_order, successors


def cluster(size: int) -> list[SiloAddress]:
    return [SiloAddress("10.0.0.1", 11000 + index, 1_700_000_000_000 + index) for index in range(size)]


def test_ring_positions_are_stable_across_processes() -> None:
    silo = SiloAddress("10.0.0.1", 11111, 42)
    script = (
        "from membership_tables import SiloAddress; from silo.hashing import ring_position; "
        "print(ring_position(SiloAddress('10.0.0.1', 11111, 42), 3))"
    )
    other_process = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    assert int(other_process.stdout) == ring_position(silo, 3)
    assert ring_position(silo, 0) != ring_position(silo, 1)


@pytest.mark.parametrize(("size", "rings", "expected"), [(1, 10, 0), (2, 10, 1), (5, 10, 4), (20, 3, 3), (20, 10, 10)])
def test_targets_are_distinct_never_self_and_capped(size: int, rings: int, expected: int) -> None:
    silos = cluster(size)
    for local in silos:
        targets = probe_targets(local, silos, rings)
        assert len(targets) == expected
        assert len(set(targets)) == len(targets)
        assert local not in targets
        assert set(targets) <= set(silos)


def test_targets_are_deterministic_whatever_the_input_order() -> None:
    silos = cluster(12)
    local = silos[3]
    assert probe_targets(local, silos, 4) == probe_targets(local, list(reversed(silos)), 4)


@pytest.mark.parametrize(("size", "rings"), [(2, 1), (7, 1), (30, 1), (30, 3)])
def test_every_silo_is_probed_by_someone(size: int, rings: int) -> None:
    silos = cluster(size)
    probed = Counter(target for local in silos for target in probe_targets(local, silos, rings))
    assert set(probed) == set(silos)


def test_first_target_is_the_successor_on_ring_zero() -> None:
    silos = cluster(8)
    order = sorted(silos, key=lambda silo: (ring_position(silo, 0), silo))
    for index, local in enumerate(order):
        assert probe_targets(local, silos, 1) == [order[(index + 1) % len(order)]]


def test_a_successor_already_chosen_is_skipped_for_the_next_one_on_that_ring() -> None:
    silos = cluster(10)
    local = silos[0]
    for ring_count in range(1, 10):
        targets = probe_targets(local, silos, ring_count)
        ring = ring_count - 1
        order = sorted(silos, key=lambda silo: (ring_position(silo, ring), silo))
        start = order.index(local)
        successors = [order[(start + step) % len(order)] for step in range(1, len(order))]
        expected_last = next(silo for silo in successors if silo not in targets[:-1])
        assert targets[-1] == expected_last


def test_the_local_silo_need_not_be_in_the_list() -> None:
    silos = cluster(4)
    joining = SiloAddress("10.0.0.9", 12000, 5)
    targets = probe_targets(joining, silos, 10)
    assert sorted(targets) == silos


def sorted_ring_targets(local: SiloAddress, silos: list[SiloAddress], num_rings: int) -> list[SiloAddress]:
    """The definition, by sorting each ring: the first silo after ``local`` not chosen yet."""
    members = sorted(set(silos) | {local})
    chosen: list[SiloAddress] = []
    for ring in range(num_rings):
        order = sorted(members, key=lambda silo: (ring_position(silo, ring), silo))
        start = order.index(local)
        following = [order[(start + step) % len(order)] for step in range(1, len(order))]
        chosen += [silo for silo in following if silo not in chosen][:1]
    return chosen


def test_targets_match_the_sorted_rings_for_random_clusters() -> None:
    rng = random.Random(11)
    for _ in range(200):
        silos = [SiloAddress("10.0.0.1", rng.randint(1, 50), rng.randint(1, 3)) for _ in range(rng.randint(1, 30))]
        local = rng.choice([*silos, SiloAddress("10.0.0.2", 1, 1)])
        rings = rng.randint(1, 6)
        assert probe_targets(local, silos, rings) == sorted_ring_targets(local, silos, rings)


def sorted_predecessors(
    silos: list[SiloAddress], target: SiloAddress, count: int, accept: Callable[[SiloAddress], bool]
) -> list[SiloAddress]:
    """The definition: walk ring 0, sorted with ``target`` in it, backwards from ``target``."""
    order = sorted(set(silos) | {target}, key=lambda silo: (ring_position(silo, 0), silo))
    start = order.index(target)
    before = [order[(start - step) % len(order)] for step in range(1, len(order))]
    return [silo for silo in before if accept(silo)][:count]


def test_predecessors_match_the_sorted_ring_whether_or_not_the_target_is_on_it() -> None:
    rng = random.Random(12)
    for _ in range(200):
        silos = list({SiloAddress("10.0.0.1", rng.randint(1, 60), 1) for _ in range(rng.randint(1, 30))})
        target = rng.choice([*silos, SiloAddress("10.0.0.2", 1, 1)])
        accepted = set(silos) - set(rng.sample(silos, rng.randint(0, len(silos) // 2)))
        count = rng.randint(1, 5)
        found = list(itertools.islice(filter(accepted.__contains__, RingIndex(silos).preceding(target)), count))
        assert found == sorted_predecessors(silos, target, count, accepted.__contains__)
        assert target not in found


def test_an_empty_ring_has_no_successors_or_predecessors() -> None:
    assert list(RingIndex([]).preceding(SiloAddress("10.0.0.1", 1, 1))) == []
    assert list(RingIndex([]).following(SiloAddress("10.0.0.1", 1, 1))) == []


def sorted_following(silos: list[SiloAddress], local: SiloAddress, ring: int) -> list[SiloAddress]:
    """The definition: sort ring ``ring`` with ``local`` on it and walk forwards from ``local``."""
    order = sorted(set(silos) | {local}, key=lambda silo: (ring_position(silo, ring), silo))
    start = order.index(local)
    return [order[(start + step) % len(order)] for step in range(1, len(order))]


def test_an_index_and_ring_order_walk_the_sorted_ring_from_any_silo() -> None:
    rng = random.Random(13)
    for _ in range(100):
        silos = list({SiloAddress("10.0.0.1", rng.randint(1, 60), 1) for _ in range(rng.randint(1, 30))})
        local = rng.choice([*silos, SiloAddress("10.0.0.2", 1, 1)])
        ring = rng.randint(0, 3)
        assert list(RingIndex(silos).following(local, ring)) == sorted_following(silos, local, ring)
        assert ring_order(local, silos, ring) == sorted_following(silos, local, ring)


def test_successors_are_the_first_silos_of_the_sorted_ring_without_sorting_it() -> None:
    rng = random.Random(14)
    for _ in range(200):
        silos = list({SiloAddress("10.0.0.1", rng.randint(1, 60), 1) for _ in range(rng.randint(0, 30))})
        local = rng.choice([*silos, SiloAddress("10.0.0.2", 1, 1)])
        ring, count = rng.randint(0, 3), rng.randint(1, 12)
        assert successors(local, silos, count, ring) == sorted_following(silos, local, ring)[:count]
