"""The Spark fixture itself: a real standalone cluster whose executors see their worker's env."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from testbed.services.spark import SparkCluster, spark_session, start_spark_cluster

pytestmark = pytest.mark.slow


def test_both_workers_registered_with_the_master(spark_cluster: SparkCluster) -> None:
    state = spark_cluster.state()
    assert state["status"] == "ALIVE"
    assert state["url"] == spark_cluster.master_url
    assert sorted(worker["webuiaddress"] for worker in state["workers"] if worker["state"] == "ALIVE") == sorted(
        f"http://127.0.0.1:{worker.webui_port}" for worker in spark_cluster.workers
    )


def test_each_executor_inherits_its_workers_environment_and_runs_our_python(spark_cluster: SparkCluster) -> None:
    with spark_session(spark_cluster, "fixture-env-check", {"spark.sql.shuffle.partitions": "3"}) as spark:
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        seen = (
            spark.sparkContext.parallelize(range(4), 4)
            .map(lambda _: (os.environ.get("SILO_TEST_WORKER"), sys.executable))
            .collect()
        )
        frame = spark.createDataFrame([(i % 3, i) for i in range(30)], ["key", "value"])
        sums = {row["key"]: row["total"] for row in frame.groupBy("key").sum("value").toDF("key", "total").collect()}
    assert {worker for worker, _ in seen} == {"worker-0", "worker-1"}
    assert {python for _, python in seen} == {sys.executable}
    assert sums == {0: 135, 1: 145, 2: 155}


def test_leaving_the_context_stops_every_jvm(tmp_path: Path) -> None:
    with start_spark_cluster(tmp_path, [{}]) as cluster:
        assert cluster.alive_workers() == 1
        assert all(process.running for process in cluster.processes)
    assert not any(process.running for process in cluster.processes)
