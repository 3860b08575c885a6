"""Which keys a silo may serve right now, and the fencing token it serves them under.

Keys belong to the Active silos of the view on a consistent-hash ring (``silo.work.hashring``),
the same ring the routers use. Ownership only ever moves to a silo after the previous owner has
certainly stopped serving (docs/protocol.md, "Takeover after fencing"):

* **A silo declared Dead** (its row Dead with suspicion votes: others decided it) may still be
  serving, cut off or paused, until its membership lease runs out. Its keys stay *held* by it,
  a ghost on our ring, for ``takeover_wait`` from when we learned of the death (also when our
  view never had it Active: it may have joined and died between two of our views), unless it
  provably cannot serve: its endpoint refuses connections (nothing listens) or another
  incarnation answers there. Then they are released at once.
* **A silo that drains** (ShuttingDown or Stopping after it was Active) refuses new work but
  finishes the calls in flight: its keys stay held by it until it writes itself Dead (it left:
  no wait then), unless its endpoint refuses connections (it exited without that write). Routers
  move its keys at once and the new owners refuse them until then ("draining"), so no key has two
  owners during a drain either.
* **Our own join** takes keys from live owners that learn of it by gossip or, at the latest, at
  their next lease renewal (the lease needs a current view): we serve nothing for
  ``takeover_wait`` after we turned Active, unless we were alone; for ``outage_takeover_wait``
  if our join may not have reached some member (``hold_own_keys``).

A key is ours when we own it on the ring of the Active silos plus the ghosts. The **token** is
the table version at the last change of that ring (a ghost released counts, at the version then
current): a key's new owner serves it under a larger token than any its previous owner used, so
a sink that keeps the largest token per key refuses a stale owner's writes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from membership_tables import SiloAddress, SiloStatus
from silo.membership.background import BackgroundTasks
from silo.membership.snapshot import Lineage, MembershipSnapshot
from silo.work.hashring import DEFAULT_VIRTUAL_NODES, HashRing
from silo.work.ownership import OwnershipCheck

__all__ = ["OwnershipGuard"]

logger = logging.getLogger(__name__)

_DRAINING = (SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)

ProvablyGone = Callable[[SiloAddress], Awaitable[bool]]
"""Whether a silo provably cannot serve (connection refused, another incarnation answers)."""


class OwnershipGuard:
    """Tracks the serving ring from the silo's snapshots; checks each request's keys against it."""

    def __init__(
        self,
        address: SiloAddress,
        *,
        takeover_wait: float,
        monotonic: Callable[[], float],
        provably_gone: ProvablyGone | None = None,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    ) -> None:
        self._address = address
        self._wait = takeover_wait
        self._monotonic = monotonic
        self._provably_gone = provably_gone
        self._virtual_nodes = virtual_nodes
        self._version = -1
        self._active: frozenset[SiloAddress] = frozenset()
        self._dead: frozenset[SiloAddress] = frozenset()
        """The silos Dead in the last snapshot observed."""
        self._lineage: Lineage | None = None
        """The last snapshot observed's lineage (``_members_of``)."""
        self._ghosts: dict[SiloAddress, float] = {}
        """Silos declared Dead whose keys we may not serve yet, with the time they are released."""
        self._leavers: set[SiloAddress] = set()
        """Silos that were Active and are draining (ShuttingDown, Stopping): they hold their keys until Dead."""
        self._own_hold_until: float | None = None
        self._ring: HashRing | None = HashRing((), virtual_nodes)
        """The serving ring, built when a request first needs it after a change (``None`` until then)."""
        self._ring_silos: frozenset[SiloAddress] = frozenset()
        self._index = -1
        self.token = 0
        """The table version at the last change of the serving ring: the fencing token."""
        self._probes = BackgroundTasks()
        self.on_change: Callable[[], None] | None = None
        """Called after each change of the serving ring or of our own takeover wait (a claims recorder)."""

    def pending_ghosts(self) -> frozenset[SiloAddress]:
        """Dead silos whose keys are still held now (their takeover wait runs; expired ones are let go first)."""
        self._expire()
        return frozenset(self._ghosts)

    def observe(self, snapshot: MembershipSnapshot) -> None:
        """Take in a newer snapshot (cheap if it is not newer)."""
        if snapshot.version <= self._version:
            return
        now = self._monotonic()
        active, dead = self._members_of(snapshot)
        # a death learned now: of a silo Active or draining in our last view, or of one that was
        # not Dead there at all (it joined and was declared Dead between two of our views: it may
        # have served on its lease all the same). Not on the first view: a joiner holds every key
        # for the takeover wait anyway.
        died = dead - self._dead - {self._address} if self._version >= 0 else frozenset()
        leavers = set()
        for silo in ((self._active | self._leavers) - active) | died:
            entry = snapshot.entry(silo)
            if entry is not None and entry.status in _DRAINING:
                leavers.add(silo)
                if silo not in self._leavers:
                    self._spawn_release_if_gone(silo)
            elif entry is not None and entry.status is SiloStatus.DEAD and entry.suspect_times:
                self._ghosts.setdefault(silo, now + self._wait)
                self._spawn_release_if_gone(silo)
        self._leavers = leavers
        for silo in active & set(self._ghosts):
            del self._ghosts[silo]  # cannot happen (Dead is terminal); a bogus view must not wedge keys
        joined = self._address in active and self._address not in self._active and self._own_hold_until is None
        if joined:
            self._own_hold_until = now + self._wait if active - {self._address} else now
        self._version, self._active, self._dead = snapshot.version, active, dead
        self._lineage = snapshot.lineage
        if not self._rebuild() and joined and self.on_change is not None:
            self.on_change()

    def _members_of(self, snapshot: MembershipSnapshot) -> tuple[frozenset[SiloAddress], frozenset[SiloAddress]]:
        """The Active and the Dead silos of ``snapshot``. From the last view's by the rows written
        in between when both come from one origin (``MembershipSnapshot.lineage``), else by a pass
        over it: in a 2,000-silo join every view a silo takes in is new, and sets of all its Active
        and Dead silos made again for each were a twelfth of a host's samples."""
        changed = None if self._lineage is None else snapshot.lineage.written_since(self._lineage)
        if changed is None:
            all_dead = frozenset(entry.silo_address for entry in snapshot.with_status(SiloStatus.DEAD))
            return frozenset(snapshot.active_silos), all_dead
        active, dead = set(self._active), set(self._dead)
        active.difference_update(changed)  # by the few written rows, not a pass over every member
        dead.difference_update(changed)
        for silo in changed:
            status = snapshot.status_of(silo)
            if status is SiloStatus.ACTIVE:
                active.add(silo)
            elif status is SiloStatus.DEAD:
                dead.add(silo)
        return frozenset(active), frozenset(dead)

    def hold_own_keys(self, seconds: float) -> None:
        """Serve none of our keys for at least ``seconds`` from now: our join may not have reached
        some member, which may go on serving on an outage vouch (``outage_takeover_wait``)."""
        until = self._monotonic() + seconds
        if self._own_hold_until is None or until > self._own_hold_until:
            self._own_hold_until = until
            if self.on_change is not None:
                self.on_change()

    def _spawn_release_if_gone(self, silo: SiloAddress) -> None:
        if self._provably_gone is not None and silo != self._address:
            self._probes.spawn(self._release_if_gone(silo))

    async def _release_if_gone(self, silo: SiloAddress) -> None:
        assert self._provably_gone is not None
        try:
            gone = await self._provably_gone(silo)
        except Exception as exc:
            logger.debug("could not tell whether %s is gone: %r", silo, exc)
            return
        if not gone:
            return
        held = self._ghosts.pop(silo, None) is not None or silo in self._leavers
        self._leavers.discard(silo)
        if held:
            logger.info("silo %s: %s refuses connections; its keys are taken over now", self._address, silo)
            self._rebuild()

    def _expire(self) -> None:
        now = self._monotonic()
        expired = [silo for silo, until in self._ghosts.items() if until <= now]
        for silo in expired:
            del self._ghosts[silo]
        if expired:
            self._rebuild()

    def _rebuild(self) -> bool:
        """Take a change of the ring's silos (the ring itself is built when next needed); True if they changed.

        Not built here: a ring of N silos hashes 128 N virtual nodes, and in a join storm the
        Active silos change with every join, so every silo rebuilding it at every view took
        all of a 1,000-silo storm's CPU (the storm stalled with a quarter of the silos Joining).
        Only a request needs the ring, and then once per change."""
        silos = self._active | set(self._ghosts) | self._leavers
        if silos == self._ring_silos:
            return False
        self._ring = None
        self._ring_silos = silos
        self.token = self._version
        if self.on_change is not None:
            self.on_change()
        return True

    def _built_ring(self) -> HashRing:
        if self._ring is None:
            self._ring = HashRing(self._ring_silos, self._virtual_nodes)
            self._index = self._ring.addresses.index(self._address) if self._address in self._ring_silos else -1
        return self._ring

    def claim(self) -> tuple[frozenset[SiloAddress], dict[SiloAddress, float], float, int]:
        """The serving ring's silos, the ghosts with their release times, when our own wait ends, the token."""
        return self._ring_silos, dict(self._ghosts), self._own_hold_until or 0.0, self.token

    def check(self) -> OwnershipCheck:
        """The ring as of now, frozen, to check a request's keys with (in a worker thread)."""
        self._expire()
        now = self._monotonic()
        hold = max(0.0, self._own_hold_until - now) if self._own_hold_until is not None else 0.0
        held = {silo: until - now for silo, until in self._ghosts.items()}
        ring = self._built_ring()
        return OwnershipCheck(
            self._address, ring, self._index, self._version, self.token, hold, held, frozenset(self._leavers)
        )

    async def close(self) -> None:
        await self._probes.cancel_all()
