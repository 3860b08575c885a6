"""The multi-host run of ``benchmarks.spark_routing``: the same jobs on a Spark standalone cluster
whose workers are hosts of their own.

A ``testbed.spark_lab.SparkLab`` (network namespaces on one bridge, needs root): PostgreSQL,
the master and the driver each on a host, and ``workers`` worker hosts, each with one 1-core
executor and a sidecar silo advertising the host's address (``SILO_SIDECAR_ADDRESS``). The
driver is this module run on the driver host (``python -m benchmarks.spark_multi_host SPEC OUT``):
warm-up, then ``runs`` rounds of the plain ``mapPartitions`` baseline and the routed job, then
one routed run during which the benchmark process cuts a worker host from everything (iptables
DROP both ways, ``NetworkLab.isolate``) half-way through (by the routed median): records lost
and duplicated are counted from the persisted output.

**On host.** ``stayed_on_host_fraction`` is the share of records an executor sent to its own
sidecar. The ring predicts it (``expected_on_host_fraction``): an executor keeps the keys its
sidecar owns, so the prediction is each worker host's share of the job's tasks (completed
tasks per executor, from Spark's status store; partitions are equal) times its sidecar's share
of the keys on the ring (every key hashed on the driver, or a 200,000-key sample).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import summarize
from benchmarks.spark_jobs import CLUSTER, Config, Rounds, compare, median_run, rounds, routed, totals
from silo.client.topology import ClusterView
from silo.spark import read_view
from silo.work.hashring import HashRing
from testbed.spark_driver import driver_session, mark
from testbed.spark_lab import SparkLab

MODULE = "benchmarks.spark_multi_host"
SHARE_SAMPLE = 200_000
"""Keys hashed on the driver to measure each silo's share of the ring."""
SECONDS_PER_MILLION = 300.0
"""The driver's time limit per million records (at least 600 s): every run, with room to spare."""


def measure_multi_host(config: Config, root: Path) -> dict[str, Any]:
    """Build the lab, run the driver on it, cut a worker host during its last run; the results."""
    with SparkLab(root / "multi-host", config.workers, cluster_id=CLUSTER) as lab:
        run = lab.start_driver(MODULE, {"config": asdict(config)}, "bench")
        limit = max(600.0, config.records / 1e6 * SECONDS_PER_MILLION)
        partition_after = float(run.wait_signal("faulting", limit))
        victim = lab.net.hosts[-1]
        time.sleep(partition_after)
        lab.net.lab.isolate(victim)
        raw = run.result(limit)
    partitioned = raw["with_a_worker_partitioned"]
    measured = Rounds(**{**raw["rounds"], "expected": tuple(raw["rounds"]["expected"])})
    return {
        "workers": config.workers,
        "records": config.records,
        **compare(config, measured),
        "expected_on_host_fraction": median_run(measured.routed_runs)["expected_on_host_fraction"],
        "ring_shares": raw["ring_shares"],
        "with_a_worker_partitioned": {
            **partitioned,
            "victim": victim.name,
            "partitioned_after_s": partition_after,
            "results_match_baseline": totals(partitioned) == measured.expected,
        },
    }


# --- the driver, on the lab's driver host ---------------------------------------------


def tasks_by_host(spark: Any) -> Counter[str]:
    """Completed tasks per executor host so far, from Spark's status store (the driver excluded)."""
    summaries = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    tasks: Counter[str] = Counter()
    for index in range(summaries.size()):
        summary = summaries.apply(index)
        if summary.id() != "driver":
            tasks[str(summary.hostPort()).rsplit(":", 1)[0]] += int(summary.completedTasks())
    return tasks


def tasks_of_job(spark: Any, before: Counter[str], tasks: int, timeout: float = 30.0) -> Counter[str]:
    """Tasks per host since ``before``, once the status store (updated asynchronously) has all ``tasks``."""
    deadline = time.monotonic() + timeout
    while True:
        done = tasks_by_host(spark) - before
        if done.total() >= tasks or time.monotonic() >= deadline:
            return done
        time.sleep(0.1)


def ring_shares(view: ClusterView, records: int) -> dict[str, float]:
    """Each silo host's share of the job's keys (``k<i>``) on the view's ring."""
    ring = HashRing(view.addresses)
    step = max(1, records // SHARE_SAMPLE)
    keys = [f"k{number}" for number in range(0, records, step)]
    owners = Counter(ring.owner_indices(keys).tolist())
    return {ring.addresses[index].host: count / len(keys) for index, count in owners.items()}


def expected_on_host(shares: dict[str, float], tasks: Counter[str]) -> float:
    total = tasks.total()
    return sum(count / total * shares.get(host, 0.0) for host, count in tasks.items()) if total else 0.0


def drive(spec: dict[str, Any]) -> dict[str, Any]:
    config = Config(**spec["config"])
    table = spec["table"]
    with driver_session(spec) as spark:
        shares = ring_shares(read_view(table, CLUSTER), config.records)

        def run_routed(sized: Config) -> dict[str, Any]:
            """A routed run, with the tasks each host ran and the share of records the ring keeps on host."""
            before = tasks_by_host(spark)
            run = routed(spark, sized, table)
            run["tasks_by_host"] = dict(tasks_of_job(spark, before, sized.partitions))
            run["expected_on_host_fraction"] = expected_on_host(shares, Counter(run["tasks_by_host"]))
            return run

        measured = rounds(spark, config, run_routed)
        median = summarize([run["seconds"] for run in measured.routed_runs])["median"]
        mark(spec, "faulting", str(median / 2))
        partitioned = routed(spark, config, table, count_keys=True)
    return {
        "rounds": asdict(measured),
        "ring_shares": shares,
        "with_a_worker_partitioned": partitioned,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python -m {MODULE} SPEC.json OUT.json (run by benchmarks.spark_routing)", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(drive(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
