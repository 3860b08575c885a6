"""Spark routing: records through ``silo.spark.route_to_silos`` to 4 silos vs a plain ``mapPartitions``.

Spark in local mode (``local[2]``, ``silo.spark.jobs.local_session``) and 4 ``silo run`` processes on
SQLite. The job: 1M records ``(k<i>, i)``; the handler is the built-in ``example.checksum``.
Routed, each record goes to the silo that owns its key: rows leave Spark as Arrow record batches
(``mapInArrow``), travel to the silos as Arrow IPC in batches of ``batch_size`` with ``in_flight``
calls per task, and the results come back as Arrow. The baseline applies the very same function
(``silo.work.handlers.checksum`` of the same JSON payload) in a ``mapPartitions`` without silos.
Both jobs end in one action computing the count and an order-independent checksum total of the
results, which must agree (the routed one reads its output with ``silo.spark.routing_summary``,
one ``mapInArrow`` pass as a columnar consumer does; the baseline's output is an RDD of bytes).

**The floor** (``benchmarks.spark_jobs.floor``) is the honest lower bound of the routed job: the
same Arrow batches in a ``mapInArrow``, the same conversion a silo makes for the handler, the
same handler and the same ``routing_summary`` pass, with no silos (no hashing, no Arrow IPC, no
network). ``floor_ratio_median`` (routed / floor, median runs) is what routing itself costs;
``overhead_ratio_median`` (routed / ``mapPartitions``) also counts the columnar path's gains.
Baseline, floor and routed runs alternate. Then one more routed run with a silo SIGKILLed half-way
through (by the time of the routed runs), persisted so its keys can be counted: records lost
(keys missing from the output) and duplicates must be 0; records moved elsewhere are counted too.

The executors name silo 0 as their sidecar (``SILO_SIDECAR_ADDRESS``), so the share of records
that stayed on their host through the sidecar is reported (in local mode every silo is on the
same host; the sidecar share is what a cluster with one silo per worker keeps local). The cost
breakdown comes from ``silo.spark.stats_accumulator``: executor time hashing and grouping,
encoding Arrow IPC, waiting; silo time in the handler and in (de)serialization; and the rest of
each call's latency (network, gRPC and queueing in the silos).

Then, as root (``Config.multi_host``; not in ``--quick``), the same jobs on a Spark standalone
cluster whose 3 workers are hosts of their own (network namespaces), each with a sidecar silo,
the table on PostgreSQL: routed vs ``mapPartitions`` in the same run, the share of records that
stayed on their host beside the ring's prediction, and a routed run with a worker host
partitioned away half-way (``results.multi_host``; see ``benchmarks/spark_multi_host.py``).

    python -m benchmarks.spark_routing [--quick] [--records N]
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
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
from benchmarks.spark_jobs import CLUSTER, Config, compare, rounds, routed, totals
from benchmarks.spark_multi_host import measure_multi_host
from silo.spark import SIDECAR_ENV, local_session
from testbed.cluster_harness import Cluster
from testbed.netfaults import lab_unavailable_reason

NAME = "spark_routing"


@contextlib.contextmanager
def sidecar_for_executors(endpoint: str) -> Iterator[None]:
    """Local-mode executors inherit the driver's environment: name ``endpoint`` their sidecar."""
    saved = os.environ.get(SIDECAR_ENV)
    os.environ[SIDECAR_ENV] = endpoint
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(SIDECAR_ENV, None)
        else:
            os.environ[SIDECAR_ENV] = saved


def measure(config: Config, root: Path) -> dict[str, Any]:
    cluster = Cluster(root, f"sqlite:///{root / 'membership.db'}", CLUSTER)
    try:
        silos = cluster.start_active(config.silos)
        assert silos[0].address is not None
        with (
            sidecar_for_executors(silos[0].address.endpoint),
            local_session("silo-spark-routing-bench", cores=config.cores) as spark,
        ):
            measured = rounds(spark, config, lambda sized: routed(spark, sized, cluster.table_uri))
            kill_after = summarize([run["seconds"] for run in measured.routed_runs])["median"] / 2
            killed = routed(spark, config, cluster.table_uri, kill_after, silos[1])
            killed["killed_after_s"] = kill_after
            killed["victim_exited"] = not silos[1].running
    finally:
        cluster.close()
    results = {
        **compare(config, measured),
        "with_a_silo_killed": {**killed, "results_match_baseline": totals(killed) == measured.expected},
    }
    if config.multi_host:
        reason = lab_unavailable_reason()
        results["multi_host"] = {"skipped": reason} if reason else measure_multi_host(config, root)
    return results


def report(results: dict[str, Any]) -> None:
    killed = results["with_a_silo_killed"]
    matches = results["results_match_baseline"]
    print_table(
        "Spark: routed to silos vs plain mapPartitions (same handler)",
        ["job", "median s", "p99 s", "records/s", "vs baseline", "lost", "duplicates", "rerouted", "results match"],
        [
            ["mapPartitions", results["baseline_seconds"]["median"], results["baseline_seconds"]["p99"],
             results["baseline_records_per_s"], 1.0, 0, 0, 0, True],
            ["floor: mapInArrow, no silos", results["floor_seconds"]["median"], results["floor_seconds"]["p99"],
             results["floor_records_per_s"], ratio(results["floor_seconds"]["median"],
             results["baseline_seconds"]["median"]), 0, 0, 0, results["floor_matches_baseline"]],
            ["route_to_silos", results["routed_seconds"]["median"], results["routed_seconds"]["p99"],
             results["routed_records_per_s"], results["overhead_ratio_median"],
             0 if matches else "?", 0 if matches else "?", 0, matches],
            ["route_to_silos, 1 killed", killed["seconds"], killed["seconds"], results["records"] / killed["seconds"],
             ratio(killed["seconds"], results["baseline_seconds"]["median"]), killed["records_lost"],
             killed["duplicates"], killed["rerouted"], killed["results_match_baseline"]],
        ],
    )  # fmt: skip
    cost = results["cost_of_median_run"]
    print_table(
        "Where the routed time went (median run; seconds summed over tasks and calls, calls overlap)",
        ["part", "seconds"],
        [
            ["executor: hashing keys, grouping rows, building output", cost["executor_routing_seconds"]],
            ["executor: writing Arrow IPC (serialization)", cost["encode_seconds"]],
            ["executor: waiting for results", cost["waiting_seconds"]],
            ["silos: handler", cost["silo_handler_seconds"]],
            ["silos: reading batches, items for the handler, writing results (serialization)",
             cost["silo_serialization_seconds"]],
            ["calls: network, gRPC and queueing in silos", cost["network_and_queue_seconds"]],
            ["tasks: wall time, summed", cost["task_seconds"]],
        ],
    )  # fmt: skip
    print(
        f"calls: {cost['calls']:.0f} ({cost['failed_calls']:.0f} failed), "
        f"{cost['request_bytes'] / max(1.0, cost['records']):.1f} request bytes per record; "
        f"records that stayed on their host (sent to the executor's sidecar): "
        f"{results['stayed_on_host_fraction']:.1%}; routed / floor: {results['floor_ratio_median']:.2f} x"
    )
    multi = results.get("multi_host")
    if multi is not None and "skipped" in multi:
        print(f"multi-host run skipped: {multi['skipped']}")
    elif multi is not None:
        cut = multi["with_a_worker_partitioned"]
        print_table(
            f"Spark standalone, {multi['workers']} worker hosts of their own with a sidecar each",
            ["job", "median s", "records/s", "vs baseline", "lost", "duplicates", "rerouted", "results match"],
            [
                ["mapPartitions", multi["baseline_seconds"]["median"], multi["baseline_records_per_s"], 1.0, 0, 0, 0,
                 True],
                ["floor: mapInArrow, no silos", multi["floor_seconds"]["median"], multi["floor_records_per_s"],
                 ratio(multi["floor_seconds"]["median"], multi["baseline_seconds"]["median"]), 0, 0, 0,
                 multi["floor_matches_baseline"]],
                ["route_to_silos", multi["routed_seconds"]["median"], multi["routed_records_per_s"],
                 multi["overhead_ratio_median"], 0, 0, 0, multi["results_match_baseline"]],
                ["route_to_silos, a host cut", cut["seconds"], multi["records"] / cut["seconds"],
                 ratio(cut["seconds"], multi["baseline_seconds"]["median"]), cut["records_lost"], cut["duplicates"],
                 cut["rerouted"], cut["results_match_baseline"]],
            ],
        )  # fmt: skip
        print(
            f"stayed on host: {multi['stayed_on_host_fraction']:.1%}, "
            f"the ring predicts {multi['expected_on_host_fraction']:.1%}; "
            f"routed / floor: {multi['floor_ratio_median']:.2f} x"
        )


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    series = {
        "local[2], 4 silos": [
            results["baseline_records_per_s"],
            results["floor_records_per_s"],
            results["routed_records_per_s"],
            results["records"] / results["with_a_silo_killed"]["seconds"],
        ]
    }
    multi = results.get("multi_host") or {}
    if "workers" in multi:
        series[f"{multi['workers']} worker hosts, a sidecar each"] = [
            multi["baseline_records_per_s"],
            multi["floor_records_per_s"],
            multi["routed_records_per_s"],
            multi["records"] / multi["with_a_worker_partitioned"]["seconds"],
        ]
    grouped_bars(
        axis,
        [
            "mapPartitions (no silos)",
            "floor: mapInArrow (no silos)",
            "route_to_silos",
            "route_to_silos, a silo killed / a host cut",
        ],
        series,
        "records per second (median run)",
    )
    axis.set_title(f"{results['records']:,} records")
    save_figure(figure, path)


class _Sized:
    """``Config`` with ``--records N`` (``benchmark_main`` calls ``config_type()`` or ``.quick()``)."""

    def __init__(self, records: int) -> None:
        self.records = records

    def __call__(self) -> Config:
        return Config.sized(self.records)

    def quick(self) -> Config:
        return Config.quick()


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    arguments = list(given)
    config_type: Any = Config
    if "--records" in arguments:
        at = arguments.index("--records")
        config_type = _Sized(int(arguments[at + 1]))
        del arguments[at : at + 2]

    def run(config: Config) -> dict[str, Any]:
        with workdir(NAME) as root:
            return {"records": config.records, **measure(config, root)}

    return benchmark_main(NAME, __doc__, arguments, config_type, run, report, plot, {"arguments": given})


if __name__ == "__main__":
    sys.exit(main())
