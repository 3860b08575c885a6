"""Membership events as log lines: what a silo sees change, one line per event.

Each line goes to the ``silo.events`` logger at INFO, readable as text ("silo A sees B
declared dead by C, D at version 7") and carrying the event as a dict in the record's
``event`` attribute, which ``silo run --log-format json`` writes as structured fields.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from membership_tables import MembershipTableData, SiloAddress
from silo.events import membership_events
from silo.membership.snapshot import MembershipSnapshot

logger = logging.getLogger("silo.events")


async def log_membership_events(
    snapshots: AsyncIterator[MembershipSnapshot], now: Callable[[], datetime], observer: SiloAddress
) -> None:
    """Log the events between consecutive ``snapshots`` until the stream ends.

    Nothing is compared while ``silo.events`` would drop INFO lines (a process hosting hundreds
    of silos at WARNING would diff every snapshot of every silo for nothing).
    """
    previous: MembershipTableData | None = None
    async for snapshot in snapshots:
        if not logger.isEnabledFor(logging.INFO):
            previous = snapshot.data
            continue
        for event in membership_events(previous, snapshot.data, snapshot.observed_at or now()):
            logger.info(
                "silo %s sees %s", observer, event.describe(), extra={"event": event.to_json(), "silo": str(observer)}
            )
        previous = snapshot.data
