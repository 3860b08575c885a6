"""The Spark jobs of ``benchmarks.spark_routing``, shared by its local run and the driver of its
multi-host run (``benchmarks.spark_multi_host``, which runs in a network namespace of its own).

``baseline`` applies ``example.checksum`` to JSON rows in a plain ``mapPartitions``; ``routed``
sends the same records through ``route_to_silos`` and adds its output up with ``routing_summary``;
``floor`` is the routed job without the silos: the same Arrow batches (``mapInArrow``), the
same conversion a silo makes for the handler (``batch_items``), the same handler and the same
``routing_summary`` pass, all in the task, with no hashing, no Arrow IPC and no network. Each
ends in one action computing the count and an order-independent checksum total.

``rounds`` runs them the same way locally and on the multi-host cluster (warm-up, then
``runs`` rounds of baseline, floor, routed) and ``compare`` turns the rounds into the figures
both report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from benchmarks.common import ratio, summarize
from silo.spark import encode_payload, route_to_silos, routing_summary, stats_accumulator
from silo.work.columnar_routing import DEFAULT_COLUMNAR_BATCH_SIZE, DEFAULT_IN_FLIGHT
from silo.work.columns import batch_items, result_array, routing_keys
from silo.work.handlers import BUILTIN_HANDLERS, CHECKSUM_HANDLER, checksum, checksum_total, is_columnar

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


FLOOR_SCHEMA = "key string, result binary, silo string, rerouted boolean, via_sidecar boolean"
"""``route_to_silos``'s output columns, so that ``floor`` ends in the very same ``routing_summary``."""
WARM_UP_RECORDS = 100_000


def handle_in_task(handler_name: str, batches: Iterable[Any]) -> Iterator[Any]:
    """What a silo does with each batch, done in the task: routing keys, the handler's argument
    (items for an item handler), the handler, its results as Arrow; output as ``route_to_silos``."""
    import pyarrow as pa

    handler = BUILTIN_HANDLERS[handler_name]
    for batch in batches:
        size = batch.num_rows
        wire = pa.RecordBatch.from_arrays([routing_keys(batch.column(0)), *batch.columns[1:]], names=batch.schema.names)
        results = result_array(handler(wire if is_columnar(handler) else batch_items(wire)), size)
        yield pa.RecordBatch.from_arrays(
            [batch.column(0), results, pa.repeat(pa.scalar("", pa.string()), size),
             pa.repeat(pa.scalar(False), size), pa.repeat(pa.scalar(False), size)],
            names=["key", "result", "silo", "rerouted", "via_sidecar"],
        )  # fmt: skip


def floor(spark: Any, config: Config) -> tuple[float, Totals]:
    """The routed job's floor: the same handler on the same Arrow batches in the task, no silos."""
    started = time.perf_counter()
    out = records(spark, config).mapInArrow(partial(handle_in_task, CHECKSUM_HANDLER), FLOOR_SCHEMA)
    summary = routing_summary(out, checksum=True)
    assert summary.checksum is not None
    return time.perf_counter() - started, (summary.records, summary.checksum)


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


RoutedRun = Callable[[Config], dict[str, Any]]
"""One routed run of a config (``routed`` with the cluster's table, plus what the caller observes)."""


@dataclass
class Rounds:
    """Seconds of every baseline, floor and routed run, and the totals the baseline computed."""

    baseline_s: list[float] = field(default_factory=list)
    floor_s: list[float] = field(default_factory=list)
    routed_runs: list[dict[str, Any]] = field(default_factory=list)
    expected: Totals = (0, 0)
    floor_matches_baseline: bool = True


def rounds(spark: Any, config: Config, run_routed: RoutedRun) -> Rounds:
    """Warm up (JVMs, Python workers, the silos' channels), then ``config.runs`` rounds of
    baseline, floor and routed, alternating so that a slow spell of the machine hits all three."""
    small = replace(config, records=min(config.records, WARM_UP_RECORDS))
    baseline(spark, config)
    floor(spark, small)
    run_routed(small)
    measured = Rounds()
    for _ in range(config.runs):
        seconds, measured.expected = baseline(spark, config)
        measured.baseline_s.append(seconds)
        seconds, totals = floor(spark, config)
        measured.floor_s.append(seconds)
        measured.floor_matches_baseline &= totals == measured.expected
        measured.routed_runs.append(run_routed(config))
    return measured


def compare(config: Config, measured: Rounds) -> dict[str, Any]:
    """The figures of ``measured``: medians, records per second, routed / baseline and routed / floor."""
    runs = measured.routed_runs
    base, low = summarize(measured.baseline_s), summarize(measured.floor_s)
    route = summarize([run["seconds"] for run in runs])
    median = median_run(runs)
    return {
        "baseline_seconds": base,
        "floor_seconds": low,
        "routed_seconds": route,
        "baseline_records_per_s": config.records / base["median"],
        "floor_records_per_s": config.records / low["median"],
        "routed_records_per_s": config.records / route["median"],
        "overhead_ratio_median": ratio(route["median"], base["median"]),
        "floor_ratio_median": ratio(route["median"], low["median"]),
        "results_match_baseline": all(totals(run) == measured.expected for run in runs),
        "floor_matches_baseline": measured.floor_matches_baseline,
        "stayed_on_host_fraction": median["stayed_on_host_fraction"],
        "cost_of_median_run": median["cost"],
        "routed_runs": runs,
        "baseline_runs_s": measured.baseline_s,
        "floor_runs_s": measured.floor_s,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The routed run of median seconds (the upper one of an even count)."""
    return sorted(runs, key=lambda run: run["seconds"])[len(runs) // 2]


def totals(run: dict[str, Any]) -> Totals:
    """The (records, checksum total) a routed run computed."""
    return run["records_out"], run["checksum_total"]
