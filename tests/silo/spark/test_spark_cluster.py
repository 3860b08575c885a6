"""Sidecars on a real Spark standalone cluster: one ``silo run`` per worker, named to the worker's
executors by ``SILO_SIDECAR_ADDRESS``; each executor sends the records its sidecar owns to it.

Each input row is tagged, in the same task that routes it, with the sidecar its executor was
given; the ``example.echo`` handler sends the tag back, so every output row says which
executor routed it and which silo processed it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from silo.spark import SIDECAR_ENV, read_view, route_to_silos, routing_summary
from silo.work.handlers import ECHO_HANDLER
from silo.work.hashring import HashRing
from testbed.cluster_harness import Cluster
from testbed.services.spark import spark_session, start_spark_cluster
from tests.silo.spark import UNDER_SPARK_LOAD

pytestmark = pytest.mark.slow

CLUSTER = "sidecars"
RECORDS = 2000
PARTITIONS = 8


def test_each_executor_sends_the_keys_its_sidecar_owns_to_that_sidecar(tmp_path: Path) -> None:
    silos = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    try:
        sidecars = [silo.address for silo in silos.start_active(2, *UNDER_SPARK_LOAD)]
        assert None not in sidecars
        endpoints = [address.endpoint for address in sidecars if address is not None]
        envs = [{SIDECAR_ENV: endpoint} for endpoint in endpoints]
        (tmp_path / "spark").mkdir()
        with (
            start_spark_cluster(tmp_path / "spark", envs) as spark_cluster,
            spark_session(spark_cluster, "sidecar-test") as spark,
        ):

            def tag(numbers: Iterable[int]) -> Iterator[tuple[str, str]]:
                local = os.environ[SIDECAR_ENV]
                for number in numbers:
                    yield f"k{number}", local

            rows = spark.sparkContext.parallelize(range(RECORDS), PARTITIONS).mapPartitions(tag)
            frame = spark.createDataFrame(rows, "key string, executor_sidecar string")
            routed = route_to_silos(frame, "key", ECHO_HANDLER, table=silos.table_uri, cluster=CLUSTER).persist()
            out = routed.collect()
            summary = routing_summary(routed)
        view = read_view(silos.table_uri, CLUSTER)
    finally:
        silos.close()

    ring = HashRing(view.addresses)
    assert sorted(row["key"] for row in out) == sorted(f"k{number}" for number in range(RECORDS))
    seen: dict[str, dict[bool, int]] = {endpoint: {True: 0, False: 0} for endpoint in endpoints}
    for row in out:
        (executor_sidecar,) = json.loads(row["result"])
        owner = ring.owner(row["key"])
        assert row["silo"] == str(owner)
        local = owner.endpoint == executor_sidecar
        assert row["via_sidecar"] is local, row  # owned by the local sidecar <=> sent to it
        seen[executor_sidecar][local] += 1
    local = sum(counts[True] for counts in seen.values())
    assert (summary.records, summary.via_sidecar) == (RECORDS, local)
    assert summary.stayed_on_host_fraction == local / RECORDS
    for endpoint, counts in seen.items():
        assert counts[True] > 0, f"the executor beside {endpoint} never used its sidecar: {seen}"
        assert counts[False] > 0, f"the executor beside {endpoint} never sent a key to the other silo: {seen}"
