"""The cleanup agent: removes long-Dead rows so the table does not grow forever.

Only the oldest Active silo (smallest generation, then address) does it, at most once
every ``defunct_silo_cleanup_period``; every silo computes the same leader from the same
snapshot, so there is no coordination and usually no duplicate work (a duplicate would be
a harmless no-op).
"""

from __future__ import annotations

import logging

from membership_tables import SiloAddress, TableUnavailableError
from silo.membership.clock import Clock, Periodic
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_manager import MembershipTableManager

logger = logging.getLogger(__name__)


def leader_order(silo: SiloAddress) -> tuple[int, SiloAddress]:
    """Sort key of seniority: older generation first, then address."""
    return silo.generation, silo


def cleanup_leader(snapshot: MembershipSnapshot) -> SiloAddress | None:
    """The oldest Active silo, by generation then address."""
    active = snapshot.active_silos
    return min(active, key=leader_order) if active else None


class CleanupAgent:
    """Periodically removes defunct rows when this silo is the cleanup leader."""

    def __init__(
        self, *, manager: MembershipTableManager, address: SiloAddress, options: SiloOptions, clock: Clock
    ) -> None:
        self._manager = manager
        self._address = address
        self._options = options
        self._clock = clock
        self._loop: Periodic | None = None

    def start(self) -> None:
        self._loop = Periodic(self._clock, self._options.defunct_silo_cleanup_period, self._round)
        self._loop.start()

    async def _round(self) -> None:
        await self.cleanup_once()

    async def cleanup_once(self) -> int:
        """Remove defunct rows if we are the leader; returns how many were removed."""
        if cleanup_leader(self._manager.snapshot) != self._address:
            return 0
        try:
            removed = await self._manager.cleanup_defunct(self._options.defunct_silo_expiration)
        except TableUnavailableError:
            logger.info("silo %s: table unreachable, cleanup postponed", self._address)
            return 0
        if removed:
            logger.info("silo %s removed %d defunct row(s)", self._address, removed)
        return removed

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
