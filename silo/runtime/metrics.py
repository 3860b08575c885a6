"""Opt-in Prometheus metrics for a silo process: the runtime side of ``silo.observability``.

Only built when ``silo run --metrics-port`` is given, and only then is
``prometheus_client`` imported: a silo without metrics measures nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from membership_tables import MembershipTable
from silo.errors import SiloError
from silo.membership.probing import GossipSender

if TYPE_CHECKING:
    from silo.observability.prometheus import MetricsServer, SiloMetrics


_T = TypeVar("_T")

LOOP_READ_TIMEOUT = 1.0
"""Seconds a scrape waits for the event loop to read a value; a loop that late is itself news."""


def on_loop(loop: asyncio.AbstractEventLoop, read: Callable[[], _T]) -> Callable[[], _T]:
    """``read`` made safe to call from the metrics server's thread: it runs on ``loop``.

    The local health score walks state the loop mutates (probe results per target); reading it
    from another thread could see a dict change size mid-iteration. A scrape waits at most
    ``LOOP_READ_TIMEOUT`` (then raises ``TimeoutError`` and the scrape reports no value).
    """

    def threadsafe() -> _T:
        result: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(read())
            except Exception as exc:  # handed to the scraping thread
                result.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return result.result(timeout=LOOP_READ_TIMEOUT)

    return threadsafe


class MetricsUnavailableError(SiloError):
    """Metrics were asked for but cannot be served (library missing, port taken)."""


@dataclass(frozen=True)
class MetricsExport:
    """A silo's metrics, the table wrapped to measure it, and the ``/metrics`` server."""

    metrics: SiloMetrics
    table: MembershipTable
    server: MetricsServer

    @classmethod
    def open(cls, table: MembershipTable, *, host: str, port: int, table_uri: str | None) -> MetricsExport:
        """Create the metrics and bind the HTTP server on ``host:port`` (0: a free port);
        ``table_uri`` names the backend in the metrics' labels."""
        try:
            from silo.observability.prometheus import (
                InstrumentedTable,
                MetricsServer,
                SiloMetrics,
                backend_label,
            )
        except ImportError as exc:
            raise MetricsUnavailableError(
                f"metrics need prometheus-client ({exc}); install the extra: pip install 'silo-membership[metrics]'"
            ) from exc
        metrics = SiloMetrics(backend_label(table_uri, table))
        try:
            server = MetricsServer(metrics, host, port)
        except OSError as exc:
            raise MetricsUnavailableError(
                f"cannot serve metrics on {host}:{port}: {exc}; pick a free --metrics-port (0 = any)"
            ) from exc
        return cls(metrics, InstrumentedTable(table, metrics), server)

    def gossip(self, sender: GossipSender) -> GossipSender:
        """``sender`` counting every gossip message it sends."""
        from silo.observability.prometheus import CountingGossipSender

        return CountingGossipSender(sender, self.metrics)

    def close(self) -> None:
        self.server.close()
