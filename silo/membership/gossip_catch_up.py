"""Catching up when a peer says the table moved: apply the gossiped write, else pull a view, else read.

A delta whose base version we hold is applied without reading anything. Further behind, we ask
the sender for its view (it holds at least that version), and read the table only if that
fails. Catching up is coalesced, so a flood of gossip cannot turn into a flood of pulls or reads.
A Work caller whose view is newer than ours (``catch_up_to``) is served once we caught up.
"""

from __future__ import annotations

import asyncio
import logging

from membership_tables import SiloAddress, TableUnavailableError
from silo.membership.probing import GossipMessage
from silo.membership.table_view import TableView, catch_up

logger = logging.getLogger(__name__)


class GossipCatchUp:
    """Brings this silo's view to the versions gossip and callers announce."""

    def __init__(self, view: TableView) -> None:
        self._view = view
        self._gossip_read: asyncio.Task[None] | None = None
        self._caught_up_at: float | None = None
        """When the last catch-up for gossip ended (monotonic)."""
        self._caller_read_at: float | None = None
        """When a Work caller's newer view last made us read the table (``catch_up_to``)."""

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None = None) -> None:
        """A peer says the table is at ``message.version``: catch up if that is newer than ours.

        At most one catch-up is in flight (later gossip waits for it and looks again), and after
        one, the next waits ``probe_timeout`` (gossip that comes meanwhile is dropped; the next
        gossip or the periodic refresh catches up). A silo at the base version of each delta,
        the normal case, never catches up; in a large cluster (``LARGE_VIEW``) a delta it cannot
        place that is not about this silo, and in a join storm (more silos Joining than
        ``gossip_fanout``) one that also takes no silo out (a join, a vote against another), is
        left to the periodic refresh, so the storm (every delta off its base) costs no pulls,
        and a sender announcing versions the table does not have (hostile, confused, or a
        lagging replica) costs one read per ``probe_timeout``.
        """
        view = self._view
        version = message.version
        view.hear_of(version)
        if message.delta is not None and await view.apply(message.delta):
            return
        delta = message.delta
        if delta is not None and (
            (view.snapshot.large and not delta.is_about(view.address))
            or (not delta.is_urgent_for(view.address) and view.snapshot.in_join_storm(view.options))
        ):
            # A change we cannot place (we missed an earlier write) that is not about us, in a
            # large cluster (``LARGE_VIEW``), or a join or a vote against another in a join storm:
            # not worth a pull of a whole view. In a storm nearly every write finds its receivers
            # off its base, and those pulls (N rows each) were most of the storm's CPU; the
            # periodic refresh sees the version moved and reads them.
            logger.debug(
                "silo %s: gossip of version %d (base %d, since %d) is off our version %d; left to the refresh",
                view.address, version, delta.base_version, delta.since_version or delta.base_version,
                view.snapshot.version,
            )  # fmt: skip
            return
        while version > view.snapshot.version:
            read = self._gossip_read
            if read is not None and not read.done():
                await asyncio.shield(read)
                if message.delta is not None and await view.apply(message.delta):
                    return
                continue
            caught_up_at = self._caught_up_at
            if caught_up_at is not None and view.clock.monotonic() - caught_up_at < view.options.probe_timeout:
                logger.debug("silo %s: no catch-up for gossip of version %d yet", view.address, version)
                return
            self._gossip_read = asyncio.create_task(self._catch_up(version, sender))
            await asyncio.shield(self._gossip_read)
            return

    async def _catch_up(self, version: int, sender: SiloAddress | None) -> None:
        view = self._view
        try:
            if sender is not None and sender != view.address and await view.pull_view(sender, version):
                return
            try:
                await catch_up(view)
            except TableUnavailableError:
                logger.debug("silo %s: gossip of version %d but the table is unreachable", view.address, version)
                return
            if view.snapshot.version < version:
                logger.info(
                    "silo %s: gossip announced table version %d but the table is at %d",
                    view.address, version, view.snapshot.version,
                )  # fmt: skip
        finally:
            self._caught_up_at = view.clock.monotonic()

    async def catch_up_to(self, version: int) -> bool:
        """Bring our view to ``version`` (a caller's view is that new) within a probe timeout: wait
        for its gossip, else re-read the table; True once our view is at least that new."""
        view = self._view
        if view.snapshot.version >= version:
            return True
        if await view.brought_by_gossip(version, view.options.probe_timeout / 2):
            return True
        now = view.clock.monotonic()
        if self._caller_read_at is not None and now - self._caller_read_at < view.options.probe_timeout:
            return False  # a caller's version is not trusted: at most one read per probe timeout for them
        self._caller_read_at = now
        try:
            await catch_up(view, view.access.deadline_in(view.options.probe_timeout / 2))
        except TableUnavailableError:
            return False
        return view.snapshot.version >= version
