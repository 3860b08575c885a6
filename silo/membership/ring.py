"""Whom to probe: ``num_probed_silos`` hash rings, one successor on each.

Ring ``k`` places every silo at a stable 64-bit hash of its address keyed by ``k``
(blake2b, never Python's per-process randomized ``hash()``), so every process computes
the same rings. Taking the successor on several independent rings spreads each silo's
probers randomly over the cluster while guaranteeing that ring 0 alone makes every silo
probed by someone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from membership_tables import SiloAddress
from silo.hashing import ring_position

RING_POSITIONS_CACHED = 1 << 16
"""Ring positions remembered (a blake2b each): every silo recomputes its targets on every
refresh, over every Active silo, on every ring."""


@functools.lru_cache(maxsize=RING_POSITIONS_CACHED)
def _position(silo: SiloAddress, ring: int) -> int:
    return ring_position(silo, ring)


def _after(local: SiloAddress, ring: int) -> Callable[[SiloAddress], tuple[bool, int, SiloAddress]]:
    """Sort key: ring ``ring``'s order (position, address) starting just after ``local``, wrapping around."""
    here = (_position(local, ring), local)

    def cyclic_order(silo: SiloAddress) -> tuple[bool, int, SiloAddress]:
        place = (_position(silo, ring), silo)
        return (place < here, *place)  # after ``local`` first, then the wrapped-around ones

    return cyclic_order


def ring_order(local: SiloAddress, silos: Iterable[SiloAddress], ring: int = 0) -> list[SiloAddress]:
    """``silos`` other than ``local`` in ring ``ring``'s order, starting just after ``local``."""
    return sorted((silo for silo in silos if silo != local), key=_after(local, ring))


def probe_targets(local: SiloAddress, silos: Iterable[SiloAddress], num_rings: int) -> list[SiloAddress]:
    """The local silo's successor on each of ``num_rings`` rings, distinct, in ring order.

    When a ring's successor was already chosen on an earlier ring, the next successor on
    that ring is taken instead. Never returns ``local``; returns fewer targets than
    ``num_rings`` when there are fewer other silos. A ring orders silos by (position,
    address); the successor is the first after ``local`` in that order, wrapping around:
    found in one pass, without sorting the cluster.
    """
    others = set(silos) - {local}
    chosen: list[SiloAddress] = []
    for ring in range(num_rings):
        candidates = others.difference(chosen)
        if not candidates:
            break
        chosen.append(min(candidates, key=_after(local, ring)))
    return chosen
