"""The gossiper: after each table write, tell every live silo to re-read the table.

Fire-and-forget: one background send per target, failures logged at debug level (the
periodic refresh is the safety net), and no relaying: only the writer gossips, so a
write costs one message per silo. A silo the write declared Dead is told too, so it stops
serving at once instead of at its next refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import Clock
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipSender
from silo.membership.snapshot import MembershipSnapshot

logger = logging.getLogger(__name__)

GOSSIP_STATUSES = (SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)


def gossip_targets(
    snapshot: MembershipSnapshot,
    local: SiloAddress,
    is_fresh: Callable[[SiloAddress], bool],
    declared_dead: Iterable[SiloAddress] = (),
) -> list[SiloAddress]:
    """Every other silo alive by status and fresh, then the silos the write declared Dead."""
    live = [
        entry.silo_address
        for entry in snapshot.with_status(*GOSSIP_STATUSES)
        if entry.silo_address != local and is_fresh(entry.silo_address)
    ]
    return live + [silo for silo in declared_dead if silo != local and silo not in live]


class Gossiper:
    """Sends "the table is at version V" to the live silos after each write of ours."""

    def __init__(
        self,
        *,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        sender: GossipSender,
        is_fresh: Callable[[SiloAddress], bool],
    ) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._sender = sender
        self._is_fresh = is_fresh
        self._sends: set[asyncio.Task[None]] = set()

    def publish(self, version: int, snapshot: MembershipSnapshot, declared_dead: tuple[SiloAddress, ...] = ()) -> None:
        if not self._options.use_liveness_gossip:
            return
        for target in gossip_targets(snapshot, self._address, self._is_fresh, declared_dead):
            task = asyncio.create_task(self._send(target, version))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, target: SiloAddress, version: int) -> None:
        try:
            await self._sender.send(target, version)
        except Exception as exc:  # fire-and-forget: the periodic refresh covers a lost gossip
            logger.debug("silo %s: gossip of version %d to %s failed: %r", self._address, version, target, exc)

    async def stop(self) -> None:
        for task in list(self._sends):
            task.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
