"""Spark routing: records through ``silo.spark.jobs.route_to_silos`` to 4 silos vs a plain ``mapPartitions``.

Spark in local mode (``local[2]``, ``silo.spark.jobs.local_session``) and 4 ``silo run`` processes on
SQLite. The job: 1M records ``(k<i>, i)``; the handler is the built-in ``example.checksum``.
Routed, each record goes to the silo that owns its key (batches over gRPC ``Work.Process``);
the baseline applies the very same function (``silo.work.handlers.checksum`` of the same payload)
in a ``mapPartitions`` without silos. Both jobs end in the same action (count and an
order-independent checksum total of the results), which must agree. Routed and baseline runs
alternate. Then one more routed run with a silo SIGKILLed half-way through (by the time of the
routed runs): records lost (keys missing from the output) must be 0; duplicates and records
moved to another silo are counted too.

    python -m benchmarks.spark_routing [--quick]
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    benchmark_main,
    grouped_bars,
    print_table,
    pyplot,
    ratio,
    save_figure,
    summarize,
    workdir,
)
from silo.spark import encode_payload, local_session, route_to_silos
from silo.work.handlers import CHECKSUM_HANDLER, checksum, checksum_total
from tests.silo.cluster_harness import Cluster

NAME = "spark_routing"
CLUSTER = "spark-bench"


@dataclass(frozen=True)
class Config:
    records: int = 1_000_000
    partitions: int = 16
    silos: int = 4
    runs: int = 3
    batch_size: int = 500
    cores: int = 2

    @classmethod
    def quick(cls) -> Config:
        return cls(records=20_000, partitions=4, runs=1)


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
    spark: Any, config: Config, table: str, kill_after: float | None = None, victim: Any = None
) -> dict[str, Any]:
    timer = threading.Timer(kill_after, victim.kill) if kill_after is not None and victim is not None else None
    started = time.perf_counter()
    if timer is not None:
        timer.start()
    out = route_to_silos(
        records(spark, config), "key", CHECKSUM_HANDLER, table=table, cluster=CLUSTER, batch_size=config.batch_size
    ).persist()
    try:
        totals: Totals = out.rdd.map(lambda row: row["result"]).mapPartitions(partition_totals).reduce(merge)
        elapsed = time.perf_counter() - started
        distinct = out.select("key").distinct().count()
        moved = out.filter("rerouted").count()
    finally:
        out.unpersist()
        if timer is not None:
            timer.cancel()
    return {
        "seconds": elapsed,
        "records_out": totals[0],
        "checksum_total": totals[1],
        "records_lost": config.records - distinct,
        "duplicates": totals[0] - distinct,
        "rerouted": moved,
    }


def measure(config: Config, root: Path) -> dict[str, Any]:
    cluster = Cluster(root, f"sqlite:///{root / 'membership.db'}", CLUSTER)
    try:
        silos = cluster.start_active(config.silos)
        with local_session("silo-spark-routing-bench", cores=config.cores) as spark:
            baseline(spark, config)  # warm-up: JVM, Python workers
            base_times, routed_runs = [], []
            expected: Totals | None = None
            for _ in range(config.runs):
                seconds, expected = baseline(spark, config)
                base_times.append(seconds)
                routed_runs.append(routed(spark, config, cluster.table_uri))
            routed_times = [run["seconds"] for run in routed_runs]
            kill_after = summarize(routed_times)["median"] / 2
            killed = routed(spark, config, cluster.table_uri, kill_after, silos[1])
            killed["killed_after_s"] = kill_after
            killed["victim_exited"] = not silos[1].running
    finally:
        cluster.close()
    assert expected is not None
    base, route = summarize(base_times), summarize(routed_times)
    return {
        "baseline_seconds": base,
        "routed_seconds": route,
        "baseline_records_per_s": config.records / base["median"],
        "routed_records_per_s": config.records / route["median"],
        "overhead_ratio_median": ratio(route["median"], base["median"]),
        "results_match_baseline": all((run["records_out"], run["checksum_total"]) == expected for run in routed_runs),
        "routed_runs": routed_runs,
        "baseline_runs_s": base_times,
        "with_a_silo_killed": {
            **killed,
            "results_match_baseline": (killed["records_out"], killed["checksum_total"]) == expected,
        },
    }


def report(results: dict[str, Any]) -> None:
    killed = results["with_a_silo_killed"]
    print_table(
        "Spark: routed to silos vs plain mapPartitions (same handler)",
        ["job", "median s", "p99 s", "records/s", "vs baseline", "lost", "duplicates", "rerouted", "results match"],
        [
            ["mapPartitions", results["baseline_seconds"]["median"], results["baseline_seconds"]["p99"],
             results["baseline_records_per_s"], 1.0, 0, 0, 0, True],
            ["route_to_silos", results["routed_seconds"]["median"], results["routed_seconds"]["p99"],
             results["routed_records_per_s"], results["overhead_ratio_median"],
             max(run["records_lost"] for run in results["routed_runs"]),
             max(run["duplicates"] for run in results["routed_runs"]), 0, results["results_match_baseline"]],
            ["route_to_silos, 1 killed", killed["seconds"], killed["seconds"], results["records"] / killed["seconds"],
             ratio(killed["seconds"], results["baseline_seconds"]["median"]), killed["records_lost"],
             killed["duplicates"], killed["rerouted"], killed["results_match_baseline"]],
        ],
    )  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    grouped_bars(
        axis,
        ["mapPartitions (no silos)", "route_to_silos", "route_to_silos, silo killed"],
        {
            "records/s": [
                results["baseline_records_per_s"],
                results["routed_records_per_s"],
                results["records"] / results["with_a_silo_killed"]["seconds"],
            ]
        },
        "records per second (median run)",
    )
    axis.set_title(f"{results['records']:,} records, 4 silos, local[2]")
    save_figure(figure, path)


def main(argv: Sequence[str] | None = None) -> int:
    def run(config: Config) -> dict[str, Any]:
        with workdir(NAME) as root:
            return {"records": config.records, **measure(config, root)}

    return benchmark_main(NAME, __doc__, argv, Config, run, report, plot)


if __name__ == "__main__":
    sys.exit(main())
