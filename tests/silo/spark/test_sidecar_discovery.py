"""Executors find their host's sidecar with ``SILO_SIDECAR_ADDRESS`` unset, on real silos and Spark.

The silos of these tests share one loopback interface, so none is recognised by its address
(they all are local): the ``spark.host`` property each advertises tells them apart, as on a
cluster whose silos run with ``--property spark.host=<host name>``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from pathlib import Path

import pytest

from silo.spark import SIDECAR_ENV, local_session, read_view, route_to_silos
from silo.spark.sidecar import SIDECAR_HOST_ENV
from silo.work.handlers import CHECKSUM_HANDLER
from silo.work.hashring import HashRing
from testbed.cluster_harness import Cluster
from tests.silo.spark import UNDER_SPARK_LOAD
from tests.silo.spark.standalone import route_tagged

pytestmark = pytest.mark.slow

CLUSTER = "discovery"
RECORDS = 2000
PARTITIONS = 6


def start_host_silos(cluster: Cluster, hosts: Iterable[str]) -> dict[str, str]:
    """One Active silo per host name, advertising it as ``spark.host``; host -> the silo's endpoint."""
    endpoints = {}
    for host in hosts:
        (silo,) = cluster.start_active(1, *UNDER_SPARK_LOAD, "--property", f"spark.host={host}")
        assert silo.address is not None
        endpoints[host] = silo.address.endpoint
    return endpoints


def test_a_local_executor_finds_the_silo_that_advertises_its_host_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``SILO_SIDECAR_ADDRESS``: the executor's host name picks its sidecar among three silos."""
    monkeypatch.delenv(SIDECAR_ENV, raising=False)
    monkeypatch.delenv(SIDECAR_HOST_ENV, raising=False)
    here = socket.gethostname()
    cluster = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    try:
        endpoints = start_host_silos(cluster, [f"elsewhere-1.{here}", here, "elsewhere-2"])
        with local_session("silo-sidecar-discovery", cores=2) as spark:
            frame = spark.range(RECORDS).selectExpr("concat('k', id) AS key", "id AS value").repartition(PARTITIONS)
            routed = route_to_silos(frame, "key", CHECKSUM_HANDLER, table=cluster.table_uri, cluster=CLUSTER)
            out = routed.collect()
        view = read_view(cluster.table_uri, CLUSTER)
    finally:
        cluster.close()
    sidecar = endpoints[here]
    ring = HashRing(view.addresses)
    assert len(out) == RECORDS
    for row in out:
        assert row["silo"] == str(ring.owner(row["key"]))
        assert row["via_sidecar"] is row["silo"].startswith(f"{sidecar}@"), row
    local = sum(row["via_sidecar"] for row in out)
    assert 0 < local < RECORDS


def test_standalone_executors_each_find_their_workers_silo_by_host(tmp_path: Path) -> None:
    """Two workers, each with the host name its executors know it by (``SILO_SIDECAR_HOST``, as a
    Kubernetes node name would be), one silo per host name: each executor finds its own."""
    silos = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    hosts = ["worker-a", "worker-b"]
    try:
        endpoints = start_host_silos(silos, hosts)
        envs = [{SIDECAR_HOST_ENV: host} for host in hosts]
        run = route_tagged(
            tmp_path, silos, envs, SIDECAR_HOST_ENV, records=RECORDS, partitions=PARTITIONS, unset_env=SIDECAR_ENV
        )
    finally:
        silos.close()
    ring = HashRing(run.view.addresses)
    seen: dict[str, list[bool]] = {host: [] for host in hosts}
    for row in run.rows:
        (executor_host,) = json.loads(row["result"])
        owner = ring.owner(row["key"])
        assert owner is not None
        assert row["silo"] == str(owner)
        local = owner.endpoint == endpoints[executor_host]
        assert row["via_sidecar"] is local, row
        seen[executor_host].append(local)
    assert (run.summary.records, run.summary.via_sidecar) == (RECORDS, sum(sum(marks) for marks in seen.values()))
    for host, marks in seen.items():
        assert any(marks), f"the executor on {host} never found its sidecar"
        assert not all(marks), f"the executor on {host} sent every key to its sidecar"
