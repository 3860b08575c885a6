"""The Spark jobs of ``benchmarks.spark_routing``, shared by its local run and the driver of its
multi-host run (``benchmarks.spark_multi_host``, which runs in a network namespace of its own).

``baseline`` applies ``example.checksum`` to JSON rows in a plain ``mapPartitions``; ``routed``
sends the same records through ``route_to_silos`` and adds its output up with ``routing_summary``.
Both end in one action computing the count and an order-independent checksum total.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from silo.spark import encode_payload, route_to_silos, routing_summary, stats_accumulator
from silo.work.columnar_routing import DEFAULT_COLUMNAR_BATCH_SIZE, DEFAULT_IN_FLIGHT
from silo.work.handlers import CHECKSUM_HANDLER, checksum, checksum_total

CLUSTER = "spark-bench"
RECORDS_PER_PARTITION = 62_500
"""With ``--records N``, partitions grow to keep at most this many records each (16 at least)."""


@dataclass(frozen=True)
class Config:
    records: int = 1_000_000
    partitions: int = 16
    silos: int = 4
    runs: int = 3
    batch_size: int = DEFAULT_COLUMNAR_BATCH_SIZE
    in_flight: int = DEFAULT_IN_FLIGHT
    cores: int = 2
    workers: int = 3
    """Worker hosts of the multi-host run (``benchmarks.spark_multi_host``)."""
    multi_host: bool = True
    """Also run on a Spark standalone cluster whose workers are hosts of their own (needs root)."""

    @classmethod
    def sized(cls, records: int) -> Config:
        return cls(records=records, partitions=max(cls.partitions, -(-records // RECORDS_PER_PARTITION)))

    @classmethod
    def quick(cls) -> Config:
        return cls(records=20_000, partitions=4, runs=1, multi_host=False)


Totals = tuple[int, int]
"""(records, checksum total)."""


def partition_totals(results: Iterable[Any]) -> Iterator[Totals]:
    digests = [bytes(result) for result in results]
    yield len(digests), checksum_total(digests)


def merge(left: Totals, right: Totals) -> Totals:
    return left[0] + right[0], (left[1] + right[1]) % (1 << 64)


def local_checksums(rows: Iterable[Any]) -> Iterator[bytes]:
    for key, value in rows:
        yield checksum(key, encode_payload([value]))


def records(spark: Any, config: Config) -> Any:
    return spark.range(config.records, numPartitions=config.partitions).selectExpr(
        "concat('k', CAST(id AS STRING)) AS key", "id AS value"
    )


def baseline(spark: Any, config: Config) -> tuple[float, Totals]:
    started = time.perf_counter()
    totals: Totals = (
        records(spark, config).rdd.mapPartitions(local_checksums).mapPartitions(partition_totals).reduce(merge)
    )
    return time.perf_counter() - started, totals


def routed(
    spark: Any,
    config: Config,
    table: str,
    kill_after: float | None = None,
    victim: Any = None,
    *,
    count_keys: bool = False,
) -> dict[str, Any]:
    """One routed run; with ``kill_after`` and ``victim``, ``victim.kill()`` that many seconds in.

    With a fault (or ``count_keys``) the output is persisted and its distinct keys counted:
    ``records_lost`` and ``duplicates`` (else None)."""
    killing = kill_after is not None and victim is not None
    counting = killing or count_keys
    timer = threading.Timer(kill_after or 0.0, victim.kill) if killing else None
    stats = stats_accumulator(spark)
    started = time.perf_counter()
    if timer is not None:
        timer.start()
    out = route_to_silos(
        records(spark, config),
        "key",
        CHECKSUM_HANDLER,
        table=table,
        cluster=CLUSTER,
        batch_size=config.batch_size,
        in_flight=config.in_flight,
        stats=stats,
    )
    if counting:
        out = out.persist()  # the keys are counted below: route them once
    try:
        summary = routing_summary(out, checksum=True)
        elapsed = time.perf_counter() - started
        distinct = out.select("key").distinct().count() if counting else None
    finally:
        if counting:
            out.unpersist()
        if timer is not None:
            timer.cancel()
    return {
        "seconds": elapsed,
        "records_out": summary.records,
        "checksum_total": summary.checksum,
        "records_lost": None if distinct is None else config.records - distinct,
        "duplicates": None if distinct is None else summary.records - distinct,
        "rerouted": summary.rerouted,
        "via_sidecar": summary.via_sidecar,
        "stayed_on_host_fraction": summary.stayed_on_host_fraction,
        "per_silo": dict(summary.per_silo),
        "cost": stats.value.as_dict(),
    }
