"""Whom to probe: ``num_probed_silos`` hash rings, one successor on each.

Ring ``k`` places every silo at a stable 64-bit hash of its address keyed by ``k``
(blake2b, never Python's per-process randomized ``hash()``), so every process computes
the same rings. Taking the successor on several independent rings spreads each silo's
probers randomly over the cluster while guaranteeing that ring 0 alone makes every silo
probed by someone.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Collection, Iterable, Iterator

from membership_tables import SiloAddress
from silo.hashing import ring_position

RING_POSITIONS_CACHED = 1 << 16
"""Ring positions remembered (a blake2b each): every silo recomputes its targets on every
refresh, over every Active silo, on every ring."""


@functools.lru_cache(maxsize=RING_POSITIONS_CACHED)
def _position(silo: SiloAddress, ring: int) -> int:
    return ring_position(silo, ring)


def ring_order(local: SiloAddress, silos: Iterable[SiloAddress], ring: int = 0) -> list[SiloAddress]:
    """``silos`` other than ``local`` in ring ``ring``'s order, starting just after ``local``
    (``RingIndex.following``, of an index not shared: ``silos`` here is any set, e.g. a relay group)."""
    return list(RingIndex(silos).following(local, ring))


def probe_targets(local: SiloAddress, silos: Iterable[SiloAddress], num_rings: int) -> list[SiloAddress]:
    """The local silo's successor on each of ``num_rings`` rings, distinct, in ring order.

    When a ring's successor was already chosen on an earlier ring, the next successor on
    that ring is taken instead. Never returns ``local``; returns fewer targets than
    ``num_rings`` when there are fewer other silos. A ring orders silos by (position,
    address); the successor is the first after ``local`` in that order, wrapping around
    (``RingIndex.following``).
    """
    return successors_on_rings(ring_index(tuple(silos)), local, num_rings)


def successors_on_rings(index: RingIndex, local: SiloAddress, num_rings: int) -> list[SiloAddress]:
    """``probe_targets`` over the silos of ``index``."""
    chosen: list[SiloAddress] = []
    for ring in range(num_rings):
        successor = next((silo for silo in index.following(local, ring) if silo not in chosen), None)
        if successor is None:
            break
        chosen.append(successor)
    return chosen


_RING_SIZE = 1 << 64
"""Ring positions are 64-bit (``silo.hashing.ring_position``)."""


def successors(local: SiloAddress, silos: Iterable[SiloAddress], count: int, ring: int = 0) -> list[SiloAddress]:
    """The first ``count`` silos after ``local`` on ring ``ring`` (``RingIndex.following``), found in
    one pass without sorting the ring: for a caller that needs a few of them once per view (a
    lease renewal through peers), where an index per view cost a sort of the whole cluster each
    time (in a join storm, every silo's view differs)."""
    origin = _position(local, ring)

    def distance(silo: SiloAddress) -> tuple[int, SiloAddress]:
        return (_position(silo, ring) - origin) % _RING_SIZE, silo

    return heapq.nsmallest(count, (silo for silo in silos if silo != local), key=distance)


RingSlot = tuple[int, SiloAddress]
"""(position, address): a silo's place on a ring; a ring orders silos by it, wrapping around."""


class RingIndex:
    """A set of silos sorted on each ring (on first use), walked from any point by bisection.

    Shared by every silo of a process that asks about the same silos (``ring_index``): at
    1,000 silos, re-ranking the cluster on three rings for each silo after each change was a
    fifth of a host's time, 50 silos to a host."""

    def __init__(self, silos: Iterable[SiloAddress], rings: dict[int, list[RingSlot]] | None = None) -> None:
        self._silos = frozenset(silos)
        self._rings: dict[int, list[RingSlot]] = rings or {}

    def updated(self, removed: Collection[SiloAddress], added: Collection[SiloAddress]) -> RingIndex:
        """The index of these silos less ``removed``, plus ``added``: the rings sorted already are
        copied and edited by bisection, not sorted again (a view built by deltas changes a few
        silos of thousands: ``MembershipSnapshot.ring_index``)."""
        rings = {}
        for ring, slots in self._rings.items():
            edited = list(slots)
            for silo in removed:
                at = bisect.bisect_left(edited, (_position(silo, ring), silo))
                if at < len(edited) and edited[at][1] == silo:
                    del edited[at]
            for silo in added:
                slot = (_position(silo, ring), silo)
                at = bisect.bisect_left(edited, slot)
                if at == len(edited) or edited[at] != slot:
                    edited.insert(at, slot)
            rings[ring] = edited
        return RingIndex(self._silos.difference(removed).union(added), rings)

    def __len__(self) -> int:
        return len(self._silos)

    def slots(self, ring: int) -> list[RingSlot]:
        slots = self._rings.get(ring)
        if slots is None:
            slots = self._rings[ring] = sorted((_position(silo, ring), silo) for silo in self._silos)
        return slots

    def following(self, local: SiloAddress, ring: int = 0) -> Iterator[SiloAddress]:
        """Every silo but ``local`` in ring order, starting just after ``local`` (which need not be one)."""
        slots = self.slots(ring)
        at = bisect.bisect_right(slots, (_position(local, ring), local))
        for step in range(len(slots)):
            silo = slots[(at + step) % len(slots)][1]
            if silo != local:
                yield silo

    def preceding(self, target: SiloAddress, ring: int = 0) -> Iterator[SiloAddress]:
        """Every silo but ``target`` in reverse ring order, starting just before ``target`` (which need not be one)."""
        slots = self.slots(ring)
        at = bisect.bisect_left(slots, (_position(target, ring), target))
        for step in range(1, len(slots) + 1):
            silo = slots[(at - step) % len(slots)][1]
            if silo != target:
                yield silo


RING_INDEXES_CACHED = 32
"""Ring indexes kept per process: a host of many silos holds a few versions of the cluster at once."""


@functools.lru_cache(maxsize=RING_INDEXES_CACHED)
def ring_index(silos: tuple[SiloAddress, ...]) -> RingIndex:
    """The ``RingIndex`` of ``silos``, shared by every caller in this process that asks with equal silos."""
    return RingIndex(silos)
