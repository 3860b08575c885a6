"""Prometheus metrics of one silo: the observer, the instrumented table and gossip, ``/metrics``.

Each ``SiloMetrics`` has a ``CollectorRegistry`` of its own (never the process-wide default),
so several silos in one process (tests, benchmarks) export separate numbers. It creates
exactly the metrics of ``catalogue.METRICS``. Counters are bumped where the facts happen
(the protocol's observer hooks, the table and gossip wrappers); the view version, silos by
status and the health score are read only when scraped, so they cost nothing in between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)
from silo.membership.lease import MembershipConfirmation
from silo.membership.probing import GossipMessage, GossipSender, ProbeOutcome
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.votes import VoteOutcome
from silo.observability.catalogue import METRICS, MetricKind, MetricSpec

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: from a local SQLite call (about 1 ms) to a probe or read that waited out its timeout."""

_SPECS = {spec.name: spec for spec in METRICS}
_PROBE_COUNTERS = {
    ProbeOutcome.ANSWERED: "silo_probes_answered_total",
    ProbeOutcome.REFUSED: "silo_probes_refused_total",
    ProbeOutcome.TIMED_OUT: "silo_probes_timed_out_total",
}


class SiloMetrics:
    """One silo's metrics; implements ``silo.membership.observer.MembershipObserver``."""

    def __init__(self, backend: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.backend = backend
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for spec in METRICS:
            if spec.kind is MetricKind.COUNTER:
                self._counters[spec.name] = Counter(spec.family, spec.help, spec.labels, registry=self.registry)
            elif spec.kind is MetricKind.HISTOGRAM:
                self._histograms[spec.name] = Histogram(
                    spec.name, spec.help, spec.labels, buckets=LATENCY_BUCKETS, registry=self.registry
                )
        self._children: dict[tuple[str, SiloAddress], Counter] = {}
        self._operations: dict[str, tuple[Counter, Histogram, Counter, Counter]] = {}
        self._view = _ViewCollector()
        self.registry.register(self._view)

    def watch(
        self,
        snapshot: Callable[[], MembershipSnapshot],
        health_score: Callable[[], int],
        fenced: Callable[[], bool] | None = None,
    ) -> None:
        """Read the view version, silos by status, the health score and whether the silo is fenced
        from these at each scrape.

        They are called from the HTTP server's thread: ``snapshot`` must only read an immutable
        snapshot, ``fenced`` only the clock and a number; ``health_score`` may raise
        ``TimeoutError`` (the sample is then left out)."""
        self._view.snapshot = snapshot
        self._view.health_score = health_score
        self._view.fenced = fenced

    # --- MembershipObserver -------------------------------------------------------------

    def _by_target(self, name: str, target: SiloAddress) -> Counter:
        """The ``target``-labelled child of counter ``name``, cached: probes are the hot path."""
        child = self._children.get((name, target))
        if child is None:
            child = self._children[name, target] = self._counters[name].labels(str(target))
        return child

    def probe_completed(self, target: SiloAddress, outcome: ProbeOutcome, seconds: float) -> None:
        self._by_target("silo_probes_sent_total", target).inc()
        self._by_target(_PROBE_COUNTERS[outcome], target).inc()
        self._histograms["silo_probe_round_trip_seconds"].observe(seconds)

    def suspicion_started(self, target: SiloAddress) -> None:
        self._by_target("silo_suspicions_total", target).inc()

    def indirect_round_completed(self, target: SiloAddress, intermediaries: int, vetoed: bool) -> None:
        self._counters["silo_indirect_probes_total"].inc(intermediaries)
        if vetoed:
            self._counters["silo_indirect_probe_vetoes_total"].inc()

    def vote_completed(self, target: SiloAddress, outcome: VoteOutcome) -> None:
        if outcome in (VoteOutcome.VOTED, VoteOutcome.DECLARED_DEAD, VoteOutcome.WITHHELD):
            self._by_target("silo_votes_cast_total", target).inc()
        if outcome is VoteOutcome.DECLARED_DEAD:
            self._by_target("silo_deaths_declared_total", target).inc()

    def refresh_completed(self, seconds: float) -> None:
        self._histograms["silo_table_refresh_duration_seconds"].observe(seconds)

    def refresh_skipped(self) -> None:
        self._counters["silo_table_refreshes_skipped_total"].inc()

    def gossip_received(self, version: int, applied: bool) -> None:
        self._counters["silo_gossip_received_total"].inc()
        if applied:
            self._counters["silo_gossip_applied_total"].inc()

    # --- what the wrappers report -------------------------------------------------------

    def gossip_sent(self) -> None:
        self._counters["silo_gossip_sent_total"].inc()

    def table_call(self, operation: str, seconds: float, *, error: bool = False, lost_race: bool = False) -> None:
        calls, duration, errors, lost = self._table_children(operation)
        calls.inc()
        duration.observe(seconds)
        if error:
            errors.inc()
        if lost_race:
            lost.inc()

    def _table_children(self, operation: str) -> tuple[Counter, Histogram, Counter, Counter]:
        children = self._operations.get(operation)
        if children is None:
            labels = (self.backend, operation)
            children = self._operations[operation] = (
                self._counters["silo_table_operations_total"].labels(*labels),
                self._histograms["silo_table_operation_duration_seconds"].labels(*labels),
                self._counters["silo_table_errors_total"].labels(*labels),
                self._counters["silo_table_lost_races_total"].labels(*labels),
            )
        return children


class _ViewCollector(Collector):
    """The gauges computed at scrape time from the silo's current snapshot and health."""

    def __init__(self) -> None:
        self.snapshot: Callable[[], MembershipSnapshot] | None = None
        self.health_score: Callable[[], int] | None = None
        self.fenced: Callable[[], bool] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name in _VIEW_GAUGES:
            yield _gauge(_SPECS[name])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        version, silos, health, fenced = (_gauge(_SPECS[name]) for name in _VIEW_GAUGES)
        if self.fenced is not None:
            fenced.add_metric([], int(self.fenced()))
        if self.snapshot is not None:
            snapshot = self.snapshot()
            version.add_metric([], snapshot.version)
            counts = {status: 0 for status in SiloStatus}
            for entry in snapshot.entries:
                counts[entry.status] += 1
            for status, count in counts.items():
                if status is not SiloStatus.NONE:
                    silos.add_metric([status.name.lower()], count)
        if self.health_score is not None:
            try:
                health.add_metric([], self.health_score())
            except TimeoutError:
                log.warning("the event loop did not answer within a scrape; no health score this time")
        yield from (version, silos, health, fenced)


_VIEW_GAUGES = ("silo_view_version", "silo_silos", "silo_local_health_score", "silo_fenced")


def _gauge(spec: MetricSpec) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


class InstrumentedTable(MembershipTable):
    """Times and counts every call of ``inner`` into ``metrics``; changes nothing else.

    A call that raises counts as an error (and is re-raised); a conditional write that
    returns ``False`` (or ``None``, from the ``*_with_etags`` writes) counts as a lost race.
    """

    def __init__(self, inner: MembershipTable, metrics: SiloMetrics) -> None:
        super().__init__(inner.cluster_id)
        self.inner = inner
        self.max_rows_per_update = inner.max_rows_per_update
        self.reads_changes = inner.reads_changes
        self._metrics = metrics

    def _timed(self, operation: str, call: Callable[[], _T], lost_race: object = False) -> _T:
        """``call()``, timed and counted; a result that ``is lost_race`` counts as a lost race."""
        started = time.perf_counter()
        try:
            result = call()
        except Exception:
            self._metrics.table_call(operation, time.perf_counter() - started, error=True)
            raise
        self._metrics.table_call(operation, time.perf_counter() - started, lost_race=result is lost_race)
        return result

    def initialize(self, try_init_version: bool = True) -> None:
        self._timed("initialize", lambda: self.inner.initialize(try_init_version))

    def read_all(self) -> MembershipTableData:
        return self._timed("read_all", self.inner.read_all)

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self._timed("read_row", lambda: self.inner.read_row(silo_address))

    def read_rows(self, silos: Sequence[SiloAddress]) -> MembershipTableData:
        return self._timed("read_rows", lambda: self.inner.read_rows(silos))

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        return self._timed("insert_row", lambda: self.inner.insert_row(entry, version))

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        return self._timed("update_row", lambda: self.inner.update_row(entry, etag, version))

    def read_version(self) -> TableVersion:
        return self._timed("read_version", self.inner.read_version)

    def read_changes(self, since: int) -> MembershipTableData:
        return self._timed("read_changes", lambda: self.inner.read_changes(since))

    def update_rows(self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion) -> bool:
        return self._timed("update_rows", lambda: self.inner.update_rows(updates, version))

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        return self._timed(
            "insert_row_with_etags", lambda: self.inner.insert_row_with_etags(entry, version), lost_race=None
        )

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        return self._timed(
            "insert_row_at_next_version", lambda: self.inner.insert_row_at_next_version(entry), lost_race=None
        )

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        return self._timed(
            "update_row_at_next_version", lambda: self.inner.update_row_at_next_version(entry, etag), lost_race=None
        )

    def update_rows_with_etags(
        self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion
    ) -> CommittedWrite | None:
        return self._timed(
            "update_rows_with_etags", lambda: self.inner.update_rows_with_etags(updates, version), lost_race=None
        )

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self._timed("update_i_am_alive", lambda: self.inner.update_i_am_alive(silo_address, when))

    def cleanup_defunct_entries(self, before: datetime) -> int:
        return self._timed("cleanup_defunct_entries", lambda: self.inner.cleanup_defunct_entries(before))

    def delete_cluster_entries(self) -> None:
        self._timed("delete_cluster_entries", self.inner.delete_cluster_entries)

    def close(self) -> None:
        self.inner.close()


class CountingGossipSender:
    """A ``GossipSender`` that counts each message before handing it to ``inner``."""

    def __init__(self, inner: GossipSender, metrics: SiloMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def send(self, target: SiloAddress, message: GossipMessage) -> None:
        self._metrics.gossip_sent()
        await self._inner.send(target, message)

    async def fetch_membership(self, target: SiloAddress, timeout: float) -> MembershipTableData:
        return await self._inner.fetch_membership(target, timeout)

    async def confirm_membership(
        self, target: SiloAddress, timeout: float, known_version: int = 0
    ) -> MembershipConfirmation:
        return await self._inner.confirm_membership(target, timeout, known_version)


class MetricsServer:
    """``/metrics`` over HTTP in a daemon thread (``prometheus_client``'s server)."""

    def __init__(self, metrics: SiloMetrics, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=metrics.registry)
        self.host = host
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def backend_label(uri: str | None, table: MembershipTable) -> str:
    """The ``backend`` label: the URI scheme without its driver (``postgresql+psycopg`` ->
    ``postgresql``), or the table class when no URI is known."""
    if uri and "://" in uri:
        return uri.split("://", 1)[0].split("+", 1)[0]
    return type(table).__name__.removesuffix("MembershipTable").lower() or "table"
