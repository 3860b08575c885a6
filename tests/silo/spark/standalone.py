"""A routed job on a Spark standalone cluster on loopback, shared by the sidecar tests.

``route_tagged`` starts one worker per environment, routes ``records`` keys ``k<i>`` with
``example.echo``, each row tagged in the task that routes it with its executor's ``tag_env``
(the sidecar it was given, or its host name), so every output row says which executor routed
it (the echoed tag) and which silo processed it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from silo.client.topology import ClusterView
from silo.spark import RoutingSummary, read_view, route_to_silos, routing_summary
from silo.work.handlers import ECHO_HANDLER
from testbed.cluster_harness import Cluster
from testbed.services.spark import spark_session, start_spark_cluster


@dataclass(frozen=True)
class TaggedRun:
    rows: list[Any]
    """The routed output rows (key, result: the echoed tag as JSON, silo, rerouted, via_sidecar)."""
    summary: RoutingSummary
    view: ClusterView
    """The view after the job (no silo changed during it)."""


def route_tagged(
    tmp_path: Path,
    silos: Cluster,
    worker_envs: Sequence[Mapping[str, str]],
    tag_env: str,
    *,
    records: int,
    partitions: int,
    unset_env: str | None = None,
) -> TaggedRun:
    """Route ``records`` tagged keys on a standalone cluster of ``len(worker_envs)`` workers.

    ``unset_env``: a variable the executors must not see (the task fails if they do)."""
    (tmp_path / "spark").mkdir()
    with (
        start_spark_cluster(tmp_path / "spark", worker_envs) as spark_cluster,
        spark_session(spark_cluster, f"tagged-{tag_env.lower()}") as spark,
    ):

        def tag(numbers: Iterable[int]) -> Iterator[tuple[str, str]]:
            assert unset_env is None or unset_env not in os.environ, f"{unset_env} is set on the executor"
            local = os.environ[tag_env]
            for number in numbers:
                yield f"k{number}", local

        rows = spark.sparkContext.parallelize(range(records), partitions).mapPartitions(tag)
        frame = spark.createDataFrame(rows, "key string, executor_tag string")
        routed = route_to_silos(frame, "key", ECHO_HANDLER, table=silos.table_uri, cluster=silos.cluster_id).persist()
        out = routed.collect()
        summary = routing_summary(routed)
    return TaggedRun(out, summary, read_view(silos.table_uri, silos.cluster_id))
