"""PySpark integration: ``route_to_silos`` sends each record to the silo owning its key.

``route_stream`` does the same for every micro-batch of a Structured Streaming query;
``routing_summary`` adds up a routed DataFrame (records per silo, rerouted, locality).

May import: ``membership_tables``, ``silo.client``, ``silo.work``, ``silo.wire.tls`` (``TlsSettings``), ``silo.errors``.
Never ``silo.membership``, ``silo.runtime`` or ``silo.cli``. PySpark itself loads lazily.
"""

from silo.spark.jobs import (
    DEFAULT_TIMEOUT,
    OUTPUT_COLUMNS,
    RoutingJob,
    ViewSource,
    local_session,
    read_view,
    route_to_silos,
    stats_accumulator,
)
from silo.spark.sidecar import SIDECAR_ENV
from silo.spark.streaming import route_stream
from silo.spark.summary import RoutingSummary, routing_summary
from silo.work.columnar_routing import RoutingStats
from silo.work.columns import encode_payload, routing_key

__all__ = [
    "DEFAULT_TIMEOUT",
    "OUTPUT_COLUMNS",
    "SIDECAR_ENV",
    "RoutingJob",
    "RoutingStats",
    "RoutingSummary",
    "ViewSource",
    "encode_payload",
    "local_session",
    "read_view",
    "route_stream",
    "route_to_silos",
    "routing_key",
    "routing_summary",
    "stats_accumulator",
]
