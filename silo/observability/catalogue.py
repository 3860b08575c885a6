"""Every metric a silo exports: the single list the exporter, the docs and the tests share.

Names follow OpenMetrics: a ``silo_`` prefix, the unit in the name (``_seconds``), counters
ending in ``_total``. ``docs/operations.md`` documents exactly these names (a test compares
them), and ``silo.observability.prometheus`` creates exactly these metrics.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class MetricKind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    """The name as scraped (counters with their ``_total`` suffix)."""
    kind: MetricKind
    labels: tuple[str, ...]
    help: str

    @property
    def family(self) -> str:
        """The metric family name (``prometheus_client`` appends ``_total`` to counters itself)."""
        return self.name.removesuffix("_total") if self.kind is MetricKind.COUNTER else self.name


COUNTER, GAUGE, HISTOGRAM = MetricKind.COUNTER, MetricKind.GAUGE, MetricKind.HISTOGRAM
TABLE_LABELS = ("backend", "operation")

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("silo_probes_sent_total", COUNTER, ("target",), "Direct probes (pings) sent, by target silo."),
    MetricSpec("silo_probes_answered_total", COUNTER, ("target",), "Direct probes the target answered."),
    MetricSpec("silo_probes_refused_total", COUNTER, ("target",), "Direct probes refused (nothing listens: a crash)."),
    MetricSpec("silo_probes_timed_out_total", COUNTER, ("target",), "Direct probes with no answer in time."),
    MetricSpec("silo_probe_round_trip_seconds", HISTOGRAM, (), "Time from sending a direct probe to its outcome."),
    MetricSpec("silo_indirect_probes_total", COUNTER, (), "Intermediaries asked to ping a silo we suspect."),
    MetricSpec(
        "silo_indirect_probe_vetoes_total", COUNTER, (), "Indirect rounds vetoed: an intermediary reached the target."
    ),
    MetricSpec("silo_suspicions_total", COUNTER, ("target",), "Times this silo started to suspect a target."),
    MetricSpec("silo_votes_cast_total", COUNTER, ("target",), "Suspicion votes this silo wrote to the table."),
    MetricSpec("silo_deaths_declared_total", COUNTER, ("target",), "Silos this silo's vote declared Dead."),
    MetricSpec("silo_local_health_score", GAUGE, (), "Local health score (0 = healthy; Lifeguard)."),
    MetricSpec(
        "silo_fenced", GAUGE, (), "1 while the silo is fenced: the table has not confirmed it Active for lease_timeout."
    ),
    MetricSpec(
        "silo_table_operations_total", COUNTER, TABLE_LABELS, "Membership table calls, by backend and operation."
    ),
    MetricSpec("silo_table_operation_duration_seconds", HISTOGRAM, TABLE_LABELS, "Latency of membership table calls."),
    MetricSpec("silo_table_errors_total", COUNTER, TABLE_LABELS, "Table calls that failed (table unreachable)."),
    MetricSpec("silo_table_lost_races_total", COUNTER, TABLE_LABELS, "Conditional writes that lost a race."),
    MetricSpec("silo_gossip_sent_total", COUNTER, (), 'Gossip messages sent ("re-read, the table is at V").'),
    MetricSpec("silo_gossip_received_total", COUNTER, (), "Gossip messages received from peers."),
    MetricSpec("silo_gossip_applied_total", COUNTER, (), "Received gossip that led to reading a newer version."),
    MetricSpec("silo_view_version", GAUGE, (), "Version of the membership table this silo holds."),
    MetricSpec("silo_silos", GAUGE, ("status",), "Silos in this silo's view, by status."),
    MetricSpec("silo_table_refresh_duration_seconds", HISTOGRAM, (), "Full table re-reads, retries included."),
    MetricSpec(
        "silo_table_refreshes_skipped_total",
        COUNTER,
        (),
        "Periodic refreshes that read only the table version, found it unchanged and skipped the full read.",
    ),
)

METRIC_NAMES: tuple[str, ...] = tuple(spec.name for spec in METRICS)
