"""Reads the table on a period in a background thread and keeps the dashboard's state.

Each read is timed (the page's table latency), diffed against the previous one into
membership events (``silo.events``, the timeline, newest kept) and turned into the page's
document with a sequence number; ``wait_newer(seq)`` blocks until a newer document exists,
which is what the server-sent event stream waits on. A table error is shown on the page and
the last good read is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from membership_tables import MembershipTable, MembershipTableData, MembershipTableError
from silo.dashboard.state import dashboard_document
from silo.events import MembershipEvent, membership_events
from silo.membership.options import SiloOptions

log = logging.getLogger(__name__)

TIMELINE_SIZE = 500
"""Events kept for the timeline (the newest)."""
LATENCY_SAMPLES = 300
"""Table reads kept for the latency figures."""


class ClusterMonitor:
    """The dashboard's view of one cluster, refreshed every ``interval`` seconds."""

    def __init__(
        self,
        table: MembershipTable,
        options: SiloOptions,
        *,
        interval: float = 1.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the dashboard's refresh interval must be positive, got {interval}")
        self._table = table
        self._options = options
        self._interval = interval
        self._now = now
        self._monotonic = monotonic
        self._data: MembershipTableData | None = None
        self._timeline: deque[MembershipEvent] = deque(maxlen=TIMELINE_SIZE)
        self._latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._changed = threading.Condition()
        self._seq = 0
        self._document: dict[str, Any] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        """Read the table once and publish the new document."""
        error = ""
        started = self._monotonic()
        try:
            data = self._table.read_all()
        except MembershipTableError as exc:
            error = f"cannot read the membership table: {exc}"
            log.warning("%s", error)
        else:
            self._latencies.append(self._monotonic() - started)
            self._timeline.extend(membership_events(self._data, data, self._now()))
            if self._data is None or data.version.version >= self._data.version.version:
                self._data = data
        document = dashboard_document(
            cluster_id=self._table.cluster_id,
            data=self._data,
            options=self._options,
            now=self._now(),
            timeline=self._timeline,
            latencies=list(self._latencies),
            error=error,
        )
        with self._changed:
            self._seq += 1
            self._document = {**document, "seq": self._seq}
            self._changed.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def current(self) -> dict[str, Any]:
        with self._changed:
            return self._document

    def wait_newer(self, seq: int, timeout: float) -> dict[str, Any] | None:
        """The first document newer than ``seq``, or None after ``timeout`` seconds or once stopped."""
        with self._changed:
            self._changed.wait_for(lambda: self._seq > seq or self._stopped.is_set(), timeout)
            return self._document if self._seq > seq else None

    def start(self) -> None:
        """Read now, then every ``interval`` seconds in a daemon thread."""
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="silo-dashboard-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self.poll_once()

    def stop(self) -> None:
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
