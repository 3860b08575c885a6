"""The gossiper: after each table write, tell every live silo to re-read the table.

Fire-and-forget: one background send per target, failures logged at debug level (the
periodic refresh is the safety net), and no relaying: only the writer gossips, so a
write costs one message per silo.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import Clock
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipSender
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.votes import is_stale

logger = logging.getLogger(__name__)

GOSSIP_STATUSES = (SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)


def gossip_targets(
    snapshot: MembershipSnapshot, local: SiloAddress, now: datetime, options: SiloOptions
) -> list[SiloAddress]:
    """Every other silo that is alive by status and not stale."""
    return [
        entry.silo_address
        for entry in snapshot.with_status(*GOSSIP_STATUSES)
        if entry.silo_address != local and not is_stale(entry, now, options)
    ]


class Gossiper:
    """Sends "the table is at version V" to the live silos after each write of ours."""

    def __init__(self, *, address: SiloAddress, options: SiloOptions, clock: Clock, sender: GossipSender) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._sender = sender
        self._sends: set[asyncio.Task[None]] = set()

    def publish(self, version: int, snapshot: MembershipSnapshot) -> None:
        if not self._options.use_liveness_gossip:
            return
        for target in gossip_targets(snapshot, self._address, self._clock.now(), self._options):
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
