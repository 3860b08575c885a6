from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import Counter

import pytest

from membership_tables import SiloAddress
from silo.work.hashring import DEFAULT_VIRTUAL_NODES, KEY_HASH, EmptyRingError, HashRing, key_position

GEN = 1_767_225_600_000
SILOS = tuple(SiloAddress("127.0.0.1", 11111 + i, GEN + 17 * i) for i in range(5))
KEYS = [f"customer-{i}" for i in range(20_000)]


def owners_of(ring: HashRing, keys: list[str]) -> dict[str, SiloAddress]:
    return {key: ring.owner(key) for key in keys}


def test_the_same_key_maps_to_the_same_silo_in_another_process() -> None:
    keys = KEYS[:500]
    script = (
        "import json, sys\n"
        "from membership_tables import SiloAddress\n"
        "from silo.work.hashring import HashRing\n"
        "silos = [SiloAddress.parse(text) for text in json.loads(sys.argv[1])]\n"
        "ring = HashRing(reversed(silos))\n"
        "print(json.dumps([str(ring.owner(key)) for key in json.loads(sys.argv[2])]))\n"
    )
    # A different hash seed: Python's own hash() would differ, the ring must not.
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    argv = [sys.executable, "-c", script, json.dumps([str(silo) for silo in SILOS]), json.dumps(keys)]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    ring = HashRing(SILOS)
    assert json.loads(result.stdout) == [str(ring.owner(key)) for key in keys]


def test_the_ring_does_not_depend_on_the_order_or_repetition_of_its_silos() -> None:
    forward, backward = HashRing(SILOS), HashRing([*reversed(SILOS), SILOS[0]])
    assert forward == backward
    assert forward.addresses == tuple(sorted(SILOS))
    assert owners_of(forward, KEYS[:2000]) == owners_of(backward, KEYS[:2000])


def test_a_str_key_and_its_utf8_bytes_have_one_owner() -> None:
    ring = HashRing(SILOS)
    for key in ["a", "ключ", "", "customer-42"]:
        assert ring.owner(key) == ring.owner(key.encode())
        assert key_position(key) == key_position(key.encode())


def test_keys_are_placed_with_xxh3_64_so_clients_in_any_language_can_place_them() -> None:
    # XXH3_64bits(input, length 0, seed 0): the reference test vector of the xxHash specification
    assert key_position(b"") == 0x2D06800538D394C2
    assert key_position("") == key_position(b"")
    assert KEY_HASH == "xxh3-64"


def test_four_silos_share_100k_keys_evenly_with_the_default_virtual_nodes() -> None:
    ring = HashRing(SILOS[:4])
    assert ring.virtual_nodes == DEFAULT_VIRTUAL_NODES
    counts = Counter(ring.owner(f"record-{i}") for i in range(100_000))
    assert set(counts) == set(SILOS[:4])
    shares = {str(silo): count / 100_000 for silo, count in counts.items()}
    assert all(0.15 <= share <= 0.35 for share in shares.values()), shares


@pytest.mark.parametrize("removed", range(5))
def test_removing_a_silo_moves_exactly_its_keys_to_their_failover_owner(removed: int) -> None:
    ring = HashRing(SILOS)
    after = HashRing(silo for i, silo in enumerate(SILOS) if i != removed)
    before_owners, after_owners = owners_of(ring, KEYS), owners_of(after, KEYS)
    moved = {key for key in KEYS if before_owners[key] != after_owners[key]}
    assert moved == {key for key in KEYS if before_owners[key] == SILOS[removed]}
    assert moved, "the removed silo owned some keys"
    assert all(after_owners[key] == ring.owners(key, 2)[1] for key in moved)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_adding_a_silo_moves_keys_only_to_the_new_silo(size: int) -> None:
    before = HashRing(SILOS[:size])
    after = HashRing(SILOS[: size + 1])
    before_owners, after_owners = owners_of(before, KEYS), owners_of(after, KEYS)
    moved = {key for key in KEYS if before_owners[key] != after_owners[key]}
    assert moved, "the new silo took some keys"
    assert {after_owners[key] for key in moved} == {SILOS[size]}


def test_a_restarted_silo_is_a_new_generation_with_its_own_place_on_the_ring() -> None:
    restarted = SiloAddress(SILOS[0].host, SILOS[0].port, SILOS[0].generation + 1)
    before, after = HashRing(SILOS[:3]), HashRing([restarted, *SILOS[1:3]])
    keys = KEYS[:5000]
    old_keys = {key for key, owner in owners_of(before, keys).items() if owner == SILOS[0]}
    new_keys = {key for key, owner in owners_of(after, keys).items() if owner == restarted}
    assert old_keys != new_keys


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_owners_lists_distinct_silos_starting_with_the_owner(n: int) -> None:
    ring = HashRing(SILOS)
    for key in KEYS[:300]:
        owners = ring.owners(key, n)
        assert len(owners) == min(n, len(SILOS))
        assert len(set(owners)) == len(owners)
        assert owners[0] == ring.owner(key)


def test_the_failover_order_is_the_ownership_after_each_successive_removal() -> None:
    ring = HashRing(SILOS)
    for key in KEYS[:300]:
        order = ring.owners(key, len(SILOS))
        for dead in range(1, len(SILOS)):
            survivors = HashRing(silo for silo in SILOS if silo not in order[:dead])
            assert survivors.owner(key) == order[dead]


def test_a_ring_survives_pickling_as_spark_broadcasts_it() -> None:
    ring = HashRing(SILOS, virtual_nodes=16)
    copy = pickle.loads(pickle.dumps(ring))
    assert copy == ring
    assert copy.virtual_nodes == 16
    assert owners_of(copy, KEYS[:1000]) == owners_of(ring, KEYS[:1000])


def test_membership_and_size() -> None:
    ring = HashRing(SILOS[:2])
    assert len(ring) == 2
    assert SILOS[0] in ring
    assert SILOS[3] not in ring
    assert "127.0.0.1:11111@1767225600000" in repr(ring)


def test_an_empty_ring_says_no_silo_is_active() -> None:
    ring = HashRing([])
    assert len(ring) == 0
    with pytest.raises(EmptyRingError, match="no silo is Active"):
        ring.owner("key")
    with pytest.raises(LookupError):
        ring.owners("key", 2)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bad_arguments_are_refused_with_what_to_pass(bad: object) -> None:
    with pytest.raises(ValueError, match="virtual_nodes must be a positive int"):
        HashRing(SILOS, virtual_nodes=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be a positive int"):
        HashRing(SILOS).owners("key", bad)  # type: ignore[arg-type]


def test_owner_indices_agree_with_owner() -> None:
    silos = [SiloAddress("10.0.0.1", 11111 + index, 7) for index in range(5)]
    ring = HashRing(silos, 64)
    keys = [f"key-{index}" for index in range(3000)] + ["", "é", "zzz"]
    indices = ring.owner_indices(keys)
    assert [ring.addresses[index] for index in indices.tolist()] == [ring.owner(key) for key in keys]
    assert HashRing([], 8).owner_indices(["a", "b"]).tolist() == [-1, -1]
