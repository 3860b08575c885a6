"""Stable positions of silos on hash rings, shared by probe rings and keyed routing.

blake2b keyed by the ring number, never Python's per-process randomized ``hash()``, so every
process (silos, clients, Spark executors) computes the same positions.
"""

from __future__ import annotations

import hashlib

from membership_tables import SiloAddress


def ring_position(address: SiloAddress, ring: int) -> int:
    """The position of ``address`` on ring ``ring`` (stable across processes and runs)."""
    digest = hashlib.blake2b(str(address).encode(), digest_size=8, key=ring.to_bytes(8, "big"))
    return int.from_bytes(digest.digest(), "big")
