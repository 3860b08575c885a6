"""Sidecars on a real Spark standalone cluster: one ``silo run`` per worker, named to the worker's
executors by ``SILO_SIDECAR_ADDRESS``; each executor sends the records its sidecar owns to it.

Each input row is tagged, in the same task that routes it, with the sidecar its executor was
given; the ``example.echo`` handler sends the tag back, so every output row says which
executor routed it and which silo processed it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from silo.spark import SIDECAR_ENV
from silo.work.hashring import HashRing
from testbed.cluster_harness import Cluster
from tests.silo.spark import UNDER_SPARK_LOAD
from tests.silo.spark.standalone import route_tagged

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
        run = route_tagged(tmp_path, silos, envs, SIDECAR_ENV, records=RECORDS, partitions=PARTITIONS)
    finally:
        silos.close()

    ring = HashRing(run.view.addresses)
    assert sorted(row["key"] for row in run.rows) == sorted(f"k{number}" for number in range(RECORDS))
    seen: dict[str, dict[bool, int]] = {endpoint: {True: 0, False: 0} for endpoint in endpoints}
    for row in run.rows:
        (executor_sidecar,) = json.loads(row["result"])
        owner = ring.owner(row["key"])
        assert row["silo"] == str(owner)
        local = owner.endpoint == executor_sidecar
        assert row["via_sidecar"] is local, row  # owned by the local sidecar <=> sent to it
        seen[executor_sidecar][local] += 1
    local = sum(counts[True] for counts in seen.values())
    assert (run.summary.records, run.summary.via_sidecar) == (RECORDS, local)
    assert run.summary.stayed_on_host_fraction == local / RECORDS
    for endpoint, counts in seen.items():
        assert counts[True] > 0, f"the executor beside {endpoint} never used its sidecar: {seen}"
        assert counts[False] > 0, f"the executor beside {endpoint} never sent a key to the other silo: {seen}"
