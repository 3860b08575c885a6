"""Catching this silo's view up with the table by reading only the rows written since it.

A silo whose view is behind the table (its own-row read for the lease shows a newer version, its
write landed after another's, gossip announced a change it cannot apply) read the whole table to
catch up. In a join storm every view is behind at nearly every step, and those full reads were
most of a 1,000-silo storm's CPU: the lease's catch-up alone was 45% of them. Where the store reads
changed rows (``MembershipTable.reads_changes``), ``catch_up`` reads the rows written after our
view's version instead, and puts them into the view as one delta that applies from it
(``MembershipDelta.since_version``): the view at version v is the table at v (every way a view
moves keeps that: a full read, a delta on its base, a peer's view), so it becomes the table at
the version read.

Two things a read of changes does not show, and how they are covered:

* **Heartbeats** (``update_i_am_alive`` writes no version): the periodic refresh still reads the
  whole table every ``full_refresh_every`` periods, as it does for views moved by gossip.
* **Rows deleted since** (``cleanup_defunct_entries``): only a Dead row whose last activity is
  ``defunct_silo_expiration`` old is deleted, and a row written after our version was written
  after our lease was last confirmed (a confirmation needs a view at least as new as the read
  that confirmed it). So a view whose lease was confirmed within half of that expiration (the
  other half covers the wall clocks of the writer and the cleaning silo) cannot miss a deletion
  of a row written since; an older view, or one never confirmed, is read in full.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from silo.membership.snapshot import MembershipDelta, MembershipSnapshot

if TYPE_CHECKING:
    from silo.membership.table_view import TableView

RECENT_VIEW_SHARE = 0.5
"""The share of ``defunct_silo_expiration`` within which a lease confirmation makes our view recent
enough for a read of changes (see the module docstring)."""


def changes_suffice(view: TableView) -> bool:
    """Whether a read of the rows written since our view brings it up to date (module docstring)."""
    recent = view.options.defunct_silo_expiration * RECENT_VIEW_SHARE
    return view.table.reads_changes and view.publisher.current is not None and view.lease.age() < recent


async def catch_up(view: TableView, deadline: float | None = None) -> MembershipSnapshot:
    """Bring ``view`` to the table's current version and renew the lease as a full read would
    (``TableView.refresh``): by the rows written since our version where they suffice
    (``changes_suffice``), else, or when they cannot be put in (a malformed row among them, no
    row for a version that moved), by a full read."""
    if not changes_suffice(view):
        return await view.refresh(deadline)
    since = view.snapshot.version
    started = view.clock.monotonic()
    data = await view.access.call(functools.partial(view.table.read_changes, since), deadline)
    version = data.version.version
    if version < since or data.malformed or (version > since and not data.rows):
        return await view.refresh(deadline)
    # the table cannot be behind a version it was read at: gossip that announced a newer one was bogus
    view.announced_version = min(view.announced_version, version)
    if version > since:
        delta = MembershipDelta(version - 1, data.version, data.rows, since_version=since)
        if not await view.apply(delta):
            return await view.refresh(deadline)
    # our view now holds the table at ``version`` or later, our own row with it
    view.confirm_lease(view.snapshot.data, started)
    return view.snapshot
