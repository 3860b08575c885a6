"""Writing rows: this silo's own (insert, status, heartbeat) and a read-modify-write of any row.

Each write is a read of the row and the version followed by a write conditioned on them, in one
blocking call; the write is then taken into our view and gossiped (``TableView.after_write``).
Lost races are retried after a jittered pause, unavailability until the caller's deadline.
"""

from __future__ import annotations

import functools
import logging
import random as random_module
from collections.abc import Callable
from datetime import timedelta

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
)
from silo.membership.table_view import TableView

logger = logging.getLogger(__name__)


class RowWriter:
    """Inserts and updates rows, conditioned on what was read."""

    def __init__(self, view: TableView, random: random_module.Random) -> None:
        self._view = view
        self._random = random

    def lost_race_pause(self, lost: int) -> float:
        """Seconds to wait after the ``lost``-th lost race of one write of a row: "full jitter"
        exponential backoff, so a storm of writers (a join storm's status updates) spreads out
        instead of colliding again and again (each retry costs every contender a read and a write).

        At most ``probe_timeout``: with the earlier cap of four, the silos that lost most often
        in the bulk of a 1,000-silo storm waited up to 20 s between tries once the table was
        quiet again, and their inserts made the storm's tail (the last 10% of the inserts took
        45 s of an 85 s storm, their joins about 2 s each once inserted)."""
        first = self._view.options.probe_timeout / 20
        return self._random.uniform(0, min(self._view.options.probe_timeout, first * 2 ** (lost - 1)))

    async def insert_self(self, entry: MembershipEntry, deadline: float) -> None:
        """Insert this silo's row (retried while the table is unavailable, until ``deadline``); an
        existing row of ours counts as done.

        ``insert_row_at_next_version``: conditioned on our row alone, so it loses to no other
        write. With a version token (read, then insert at the next version) the inserts of a
        1,000-silo join storm kept losing to each other: 15,365 attempts for 1,000 rows.
        """
        view = self._view
        insert = functools.partial(view.table.insert_row_at_next_version, entry)
        committed = await view.unconfirmed_if_failed(view.access.call(insert, deadline))
        if committed is None:  # an earlier attempt whose outcome was unknown committed our row
            snapshot = await view.refresh(deadline)
            if snapshot.entry(view.address) is None:
                raise TableUnavailableError(
                    f"cluster {view.table.cluster_id!r} has no version row, so this silo cannot insert its row; "
                    "initialize the table (`silo table init URI`)"
                )
            view.joined_version, view.joining = snapshot.version, entry.status is SiloStatus.JOINING
            return
        view.joined_version, view.joining = committed.version.version, entry.status is SiloStatus.JOINING
        logger.info(
            "silo %s inserted its row as %s at version %d", view.address, entry.status.name, committed.version.version
        )
        # In a join storm our view is behind our insert (others joined meanwhile). The join
        # needs no newer one (validation pings the Active silos we saw; becoming Active reads
        # our row and the table again): one full read fewer per joiner, N rows each, a quarter
        # of a 1,000-silo storm's reads.
        await view.after_write(committed, reread_if_behind=not view.snapshot.in_join_storm(view.options))

    async def read_then_write(
        self,
        silo: SiloAddress,
        decide: Callable[[MembershipTableData], MembershipEntry | None],
        deadline: float | None,
        *,
        on_row_alone: bool = False,
    ) -> tuple[MembershipTableData, MembershipEntry | None, CommittedWrite | None]:
        """Read ``silo``'s row and the version, and write ``decide``'s row for it (None: nothing to
        write) conditioned on them, in one blocking call; returns the read, the row decided and the
        write if it won its race. One call: no event-loop turn between the read and
        the write. That gap is the window in which any other write makes ours lose its race; on a
        busy loop (a join storm) it was most of the attempt, so contenders kept losing. ``decide``
        runs in the worker thread: it must only compute (no loop state is changed there).

        Our own row is written at the next version (``update_row_at_next_version``), conditioned
        on its etag alone: our status and properties depend on nothing but our row, and any write
        of it since the read (a vote, a death) still makes ours lose. Conditioned on the version
        too, the Active writes of a 1,000-silo storm lost 87% of their races (7,557 attempts for
        1,000 rows); another silo's row (an older generation of ours declared Dead) is a decision
        on our view, so that write is conditioned on the version read, unless the caller's decision
        too depends on the row alone (``on_row_alone``: a vote on refusals). A ``deadline`` of
        None is one try."""
        view = self._view
        table = view.table

        def attempt() -> tuple[MembershipTableData, MembershipEntry | None, CommittedWrite | None]:
            data = table.read_row(silo)
            entry = decide(data)
            found = data.get(silo)
            if entry is None or found is None:
                return data, None, None
            if silo == view.address or on_row_alone:
                return data, entry, table.update_row_at_next_version(entry, found[1])
            return data, entry, table.update_rows_with_etags(((entry, found[1]),), data.version.next())

        return await view.unconfirmed_if_failed(view.access.call(attempt, deadline))

    async def update_row(
        self, silo: SiloAddress, change: Callable[[MembershipEntry], MembershipEntry | None], deadline: float
    ) -> bool:
        """Read-modify-write one row until it sticks; ``change`` (pure: it runs in the table's
        worker thread) returns None for "nothing to do".

        Lost races are retried on a fresh read after a jittered pause; unavailability until
        ``deadline``. False if the row is absent, ``change`` declined, or (for our own row)
        we must terminate.
        """
        view = self._view
        own = silo == view.address

        def modify(data: MembershipTableData) -> MembershipEntry | None:
            if own and view.own_verdict_in(data) is not None:
                return None
            row = data.get(silo)
            if row is None or row[0].status is SiloStatus.DEAD:
                return None  # Dead is terminal: never written over
            return change(row[0])

        lost = 0
        while not (own and view.terminated.is_set()):
            started = view.clock.monotonic()
            data, entry, committed = await self.read_then_write(silo, modify, deadline)
            if entry is not None and committed is not None:  # written: announce it whatever else happened meanwhile
                logger.info(
                    "silo %s wrote %s as %s at version %d",
                    view.address, silo, entry.status.name, committed.version.version,
                )  # fmt: skip
                await view.after_write(committed)
                if own and entry.status is SiloStatus.ACTIVE:
                    # our row written Active (conditioned on its etag). Our view may lag the table
                    # (a join storm): the keys a joiner may serve wait out takeover_wait anyway
                    # (silo.runtime.ownership), by which time a renewal has checked the view.
                    view.lease.confirm(started)
                return True
            if own and (reason := view.own_verdict_in(data)) is not None:
                view.terminate(reason)
            if entry is None or (own and view.terminated.is_set()):
                return False  # absent, Dead, nothing to change, or we must stop
            if view.clock.monotonic() >= deadline:
                return False
            lost += 1
            await view.clock.sleep(self.lost_race_pause(lost))
        return False

    async def update_own_status(self, status: SiloStatus, deadline: float) -> bool:
        view = self._view

        def change(entry: MembershipEntry) -> MembershipEntry:
            return entry.replace(status=status, i_am_alive_time=view.clock.now())

        written = await self.update_row(view.address, change, deadline)
        if written:
            view.joining = status is SiloStatus.JOINING
        return written

    async def heartbeat(self, deadline: float) -> None:
        """Write IAmAlive now (a blind write: no version bump)."""
        view = self._view
        now = view.clock.now()
        await view.access.call(functools.partial(view.table.update_i_am_alive, view.address, now), deadline)

    async def cleanup_defunct(self, older_than: float) -> int:
        """Remove Dead rows inactive for ``older_than`` seconds (not a versioned write)."""
        view = self._view
        before = view.clock.now() - timedelta(seconds=older_than)
        return await view.access.call(functools.partial(view.table.cleanup_defunct_entries, before), None)
