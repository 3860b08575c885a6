"""Structured Streaming: ``route_stream`` routes every micro-batch of a stream to the live silos.

::

    from silo.spark import route_stream

    def save(routed: DataFrame, batch_id: int) -> None:   # runs on the driver, once per micro-batch
        routed.write.mode("overwrite").parquet(f"/data/out/batch={batch_id}")

    query = (
        route_stream(events, "user_id", "enrich", save, table="sqlite:///m.db", cluster="prod")
        .option("checkpointLocation", "/data/checkpoints/enrich")
        .start()
    )

Each micro-batch goes through ``route_to_silos`` (``foreachBatch``): the driver reads the
view afresh for every micro-batch, so a silo declared Dead between two batches gets none of
the next one and a silo that joined gets its share; a silo that dies during a batch is failed
over by the executors exactly as in a batch job. The routed micro-batch is persisted while
``sink`` runs, so the records are routed once however many actions ``sink`` takes.

Delivery: Structured Streaming re-runs a micro-batch after a failure or a restart from the
checkpoint, so ``sink`` may see a ``batch_id`` twice: make it idempotent (overwrite by
``batch_id``, as above); handlers, as always, see records at least once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from silo.spark.jobs import DEFAULT_TIMEOUT, check_arguments, route_to_silos, view_source
from silo.wire.tls import TlsSettings
from silo.work.columnar_routing import DEFAULT_COLUMNAR_BATCH_SIZE, DEFAULT_IN_FLIGHT, RoutingStats
from silo.work.hashring import DEFAULT_VIRTUAL_NODES
from silo.work.routing import DEFAULT_MAX_ATTEMPTS

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["Sink", "route_stream"]

Sink = Callable[["DataFrame", int], None]
"""``sink(routed, batch_id)``: what to do with one routed micro-batch (write it out, ...)."""


def route_stream(
    df: DataFrame,
    key_column: str,
    handler: str,
    sink: Sink,
    *,
    cluster: str,
    table: str | None = None,
    gateways: Sequence[str] | str = (),
    value_columns: Sequence[str] | None = None,
    result_column: str = "result",
    batch_size: int = DEFAULT_COLUMNAR_BATCH_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    in_flight: int = DEFAULT_IN_FLIGHT,
    stats: Accumulator[RoutingStats] | None = None,
    tls: TlsSettings | None = None,
) -> DataStreamWriter:
    """A ``DataStreamWriter`` that routes each micro-batch of the streaming ``df`` and hands it to ``sink``.

    The arguments are ``route_to_silos``'s (checked now, before the query starts); ``sink``
    gets the routed micro-batch (the same columns as ``route_to_silos`` returns) and its
    ``batch_id``. Set the checkpoint location, trigger or query name on the returned writer,
    then ``start()`` it. A micro-batch that finds no Active silo fails the query with
    ``NoLiveSiloError``; restarted from its checkpoint, it resumes with that micro-batch.
    """
    if not df.isStreaming:
        raise ValueError(
            "route_stream takes a streaming DataFrame (spark.readStream...); "
            "route a batch DataFrame with route_to_silos"
        )
    if not callable(sink):
        raise ValueError(f"sink must be a function (routed: DataFrame, batch_id: int) -> None, got {sink!r}")
    counts = {
        "batch_size": batch_size,
        "max_attempts": max_attempts,
        "virtual_nodes": virtual_nodes,
        "in_flight": in_flight,
    }
    check_arguments(df, key_column, value_columns, result_column, timeout=timeout, **counts)
    view_source(cluster, table, gateways, tls)  # refuses a missing or doubled view source now

    def route_batch(batch: DataFrame, batch_id: int) -> None:
        routed = route_to_silos(
            batch,
            key_column,
            handler,
            cluster=cluster,
            table=table,
            gateways=gateways,
            value_columns=value_columns,
            result_column=result_column,
            batch_size=batch_size,
            timeout=timeout,
            max_attempts=max_attempts,
            virtual_nodes=virtual_nodes,
            in_flight=in_flight,
            stats=stats,
            tls=tls,
        ).persist()
        try:
            sink(routed, batch_id)
        finally:
            routed.unpersist()

    return df.writeStream.foreachBatch(route_batch)
