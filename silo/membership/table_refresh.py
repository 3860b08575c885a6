"""Reading the table on a period, and on request, as cheaply as the view allows.

The periodic refresh every ``table_refresh_timeout`` (first tick randomized) reads only the
version, and when it moved the rows written since our view (``table_view.catch_up``; the whole table
where the store cannot read them); it reads the whole table every ``full_refresh_every`` periods
(heartbeats do not move the version), and every period for one full-read interval after a
failed table call (so peers' heartbeats are seen again soon after an outage; docs/protocol.md,
"Freshness on our own clock"). A version that moved is first looked for in gossip and in a
peer's view: the table is the one resource the whole cluster shares.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random as random_module
from collections.abc import Collection

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, TableUnavailableError
from silo.membership.clock import Periodic
from silo.membership.gossiper import gossip_peers
from silo.membership.table_view import TableView, catch_up

logger = logging.getLogger(__name__)

ROW_READ_COST_IN_ROWS = 20
"""About how many rows of a full read one ``read_row`` costs: its round trip against decoding
rows (benchmarks.tables, ``read_all`` of 10 against 1,000 rows: ~50 on PostgreSQL, ~30 on
MariaDB, ~10 on SQLite). ``reread_rows`` reads rows one by one only while that is cheaper."""


class TableRefresh:
    """The periodic refresh, the requested look at our own row, and targeted re-reads of rows."""

    def __init__(self, view: TableView, random: random_module.Random) -> None:
        self._view = view
        self._random = random
        self._refresher: Periodic | None = None
        self._requested: asyncio.Task[None] | None = None
        self._requested_at = 0.0

    def start(self) -> None:
        """Start re-reading the table every ``table_refresh_timeout`` (first tick randomized)."""
        period = self._view.options.table_refresh_timeout
        self._refresher = Periodic(
            self._view.clock, period, self._refresh_round, first_delay=self._random.uniform(0, period)
        )
        self._refresher.start()

    async def reread_rows(
        self, silos: Collection[SiloAddress], deadline: float | None = None
    ) -> dict[SiloAddress, MembershipEntry | None]:
        """The current rows of ``silos`` (None: no row, or a malformed one), read the cheaper way.

        One ``read_rows`` of them (one statement on SQL), and a ``read_row`` of our own, in one
        blocking call, while they cost fewer rows than a full read (``ROW_READ_COST_IN_ROWS``);
        else a full ``refresh``. For a joiner that re-reads the few silos it has not reached yet
        every ``probe_timeout``: a full read each round by each of hundreds of joiners was most
        of a 1,000-silo join storm's CPU, and slowed the answers they waited for. Their
        heartbeats are watched as a full read's are; the snapshot is not replaced (the rows
        alone are no view of the table). If our own row says we must stop, the whole table is
        re-read, which terminates this silo.
        """
        view = self._view
        wanted = [silo for silo in dict.fromkeys(silos) if silo != view.address]
        if (len(wanted) + 1) * ROW_READ_COST_IN_ROWS >= len(view.snapshot.entries):
            snapshot = await view.refresh(deadline)
            return {silo: snapshot.entry(silo) for silo in wanted}

        def read() -> tuple[MembershipTableData, MembershipTableData]:
            return view.table.read_rows(wanted), view.table.read_row(view.address)

        read_rows, own = await view.access.call(read, deadline)
        rows = {silo: (row[0] if (row := read_rows.get(silo)) else None) for silo in wanted}
        view.liveness.learn(row for row in rows.values() if row is not None)
        if view.own_verdict_in(own) is not None:
            await view.refresh(deadline)
        return rows

    def request_refresh(self) -> None:
        """Look for this silo's own verdict soon, in the background: one such look at a time, one
        per ``probe_timeout``.

        For a silo that finds itself on the minority side of a partition: the majority's
        gossip cannot reach it, so it looks for its own verdict instead of waiting for the
        periodic refresh, and stops serving as soon as it was declared Dead. It reads only its
        own row (one key), and the whole table only if that row says it must stop: on an
        overloaded machine every silo may find itself "on the minority side" (its probes time
        out), and hundreds of full reads each probe timeout made the overload worse.
        """
        now = self._view.clock.monotonic()
        if self._requested is not None and (
            not self._requested.done() or now - self._requested_at < self._view.options.probe_timeout
        ):
            return
        self._requested_at = now
        self._requested = asyncio.create_task(self._requested_refresh())

    async def _requested_refresh(self) -> None:
        view = self._view
        try:
            data = await view.access.call(functools.partial(view.table.read_row, view.address), None)
            if view.own_verdict_in(data) is not None:
                await view.refresh()  # publishes the view that says so, and terminates
        except TableUnavailableError:
            logger.debug("silo %s: a requested look at its own row found the table unreachable", view.address)

    async def _refresh_round(self) -> None:
        view = self._view
        period = view.options.table_refresh_timeout
        deadline = view.access.deadline_in(period)
        try:
            version = await self._version_without_a_full_read(deadline)
            if version == view.snapshot.version or (version is not None and await view.brought_by_gossip(version)):
                view.observer.refresh_skipped()
                return
            if version is None:
                await view.refresh(deadline)
            elif not await self._caught_up_from_a_peer(version):
                await catch_up(view, deadline)  # the rows written since our view, where the store reads them
        except TableUnavailableError:
            logger.warning("silo %s: table still unreachable after retrying for %ss", view.address, period)

    async def _version_without_a_full_read(self, deadline: float) -> int | None:
        """The table's version as this periodic refresh may take it without a full read, or None
        (read in full). Our view's version: skip the read (only the version was read, and it
        has not moved; or our view is a join storm, below, and nothing was read). A newer one:
        the version read shows a change that no gossip brought us (``_caught_up_from_a_peer``).

        Never with ``full_refresh_every`` 1 (no version read at all), before the first full
        read, once the last full read is ``full_refresh_every`` periods old (heartbeats do not
        move the version), or within one full-read interval of a failed table call. A failed
        version read raises like a failed full read, after the same retries.

        In a join storm of a large view (``LARGE_VIEW`` rows, more than ``gossip_fanout``
        Joining) the version moves between any two periods, so each silo read the whole table
        every period: at 1,000 silos that was the largest share of the storm's CPU. There we
        read in full on the heartbeat cadence only (every ``full_refresh_every`` periods): the
        joins, and the other changes we cannot apply as deltas (in a large view only gossip
        about this silo is pulled at once: ``GossipCatchUp.on_gossip``), reach us that much
        later, as the heartbeats do.

        A silo still joining a large view reads nothing: its join re-reads the rows it waits
        for, and its own, every ``probe_timeout`` (``reread_rows``), it watches no suspect
        (``SuspectWatchers``); once Active it reads on its cadence again (in full at its first
        period if the join outlasted ``full_refresh_every`` periods). In a 2,000-silo
        join that stalled with 1,649 silos Joining, their periodic full reads were four fifths
        of the table's full reads (2,000 rows each, every ``full_refresh_interval``).
        """
        view = self._view
        view.periods_since_full_read += 1
        if view.joining and view.snapshot.large:
            return view.snapshot.version
        if (
            view.periods_since_full_read >= view.options.full_refresh_every
            or view.publisher.current is None
            or self._recovering()
        ):
            return None
        if view.snapshot.large and view.snapshot.in_join_storm(view.options):
            logger.debug("silo %s: join storm in its view; full reads on the heartbeat cadence", view.address)
            return view.snapshot.version
        version = (await view.access.call(view.table.read_version, deadline)).version
        return None if self._recovering() else version

    async def _caught_up_from_a_peer(self, version: int) -> bool:
        """Take the view of one of the silos we send our gossip to (``gossip_peers``: ring
        neighbours, whose channels are open) if it holds ``version``: the version moved and
        no gossip told us of the change (a lost or late send, a relay whose loop stalled). At
        1,000 silos about 60 silos per death read the whole table at their next refresh for
        that; the table is the one resource the whole cluster shares, a peer's view is not.
        The periodic full reads for heartbeats are not replaced (a peer's heartbeats are as
        old as its last read)."""
        view = self._view
        peers = gossip_peers(view.address, view.snapshot.active_silos, view.options.gossip_fanout)
        if not peers:
            return False
        peer = self._random.choice(peers)
        if await view.pull_view(peer, version):
            logger.debug("silo %s: caught up to version %d from %s's view", view.address, version, peer)
            return True
        return False

    def _recovering(self) -> bool:
        """A table call failed within one full-read interval: read in full every period meanwhile."""
        return self._view.access.failed_within(self._view.options.full_refresh_interval)

    def cancel_requested(self) -> list[asyncio.Task[None]]:
        """Cancel the requested look at our own row, if one runs; returns it to be awaited."""
        if self._requested is None:
            return []
        self._requested.cancel()
        return [self._requested]

    async def stop(self) -> None:
        if self._refresher is not None:
            await self._refresher.stop()
