"""PySpark integration: ``route_to_silos`` sends each record to the silo owning its key.

May import: ``membership_tables``, ``silo.client``, ``silo.work``, ``silo.errors``.
Never ``silo.membership``, ``silo.runtime`` or ``silo.cli``. PySpark itself loads lazily.
"""

from silo.spark.jobs import (
    DEFAULT_TIMEOUT,
    OUTPUT_COLUMNS,
    SIDECAR_ENV,
    RoutingJob,
    ViewSource,
    encode_payload,
    local_session,
    read_view,
    route_to_silos,
    routing_key,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "OUTPUT_COLUMNS",
    "SIDECAR_ENV",
    "RoutingJob",
    "ViewSource",
    "encode_payload",
    "local_session",
    "read_view",
    "route_to_silos",
    "routing_key",
]
