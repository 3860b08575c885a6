"""Whom to probe: ``num_probed_silos`` hash rings, one successor on each.

Ring ``k`` places every silo at a stable 64-bit hash of its address keyed by ``k``
(blake2b, never Python's per-process randomized ``hash()``), so every process computes
the same rings. Taking the successor on several independent rings spreads each silo's
probers randomly over the cluster while guaranteeing that ring 0 alone makes every silo
probed by someone.
"""

from __future__ import annotations

from collections.abc import Iterable

from membership_tables import SiloAddress
from silo.hashing import ring_position


def probe_targets(local: SiloAddress, silos: Iterable[SiloAddress], num_rings: int) -> list[SiloAddress]:
    """The local silo's successor on each of ``num_rings`` rings, distinct, in ring order.

    When a ring's successor was already chosen on an earlier ring, the next successor on
    that ring is taken instead. Never returns ``local``; returns fewer targets than
    ``num_rings`` when there are fewer other silos.
    """
    members = sorted(set(silos) | {local})
    chosen: list[SiloAddress] = []
    for ring in range(num_rings):
        if len(chosen) == len(members) - 1:
            break
        order = sorted(members, key=lambda silo: (ring_position(silo, ring), silo))
        start = order.index(local)
        for step in range(1, len(order)):
            candidate = order[(start + step) % len(order)]
            if candidate not in chosen:
                chosen.append(candidate)
                break
    return chosen
