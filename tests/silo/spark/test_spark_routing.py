"""``route_to_silos`` on real ``silo run`` processes with Spark in local mode.

A silo is killed from inside the job, by the task that feeds the last partition's records: with
two cores the last partition starts only after most others have finished (and sent records
to every silo), so the kill lands mid-job whatever the machine's speed, and that task's
sends meet a dead silo its broadcast view still lists. No sleeps, no timing asserts.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import silo.spark
from membership_tables import SiloStatus
from silo.client.topology import ClusterView
from silo.spark import (
    encode_payload,
    local_session,
    read_view,
    route_to_silos,
    routing_key,
    routing_summary,
    stats_accumulator,
)
from silo.work.handlers import CHECKSUM_HANDLER, ECHO_HANDLER, checksum, checksum_total
from silo.work.hashring import HashRing
from silo.work.routing import NoLiveSiloError
from testbed.cluster_harness import Cluster, SiloProcess
from testbed.services.process import free_port
from tests.silo.spark import UNDER_SPARK_LOAD

CLUSTER = "spark-routing"
RECORDS = 4000
PARTITIONS = 8


def test_public_names() -> None:
    assert set(silo.spark.__all__) == {
        "DEFAULT_TIMEOUT",
        "OUTPUT_COLUMNS",
        "SIDECAR_ENV",
        "RoutingJob",
        "RoutingStats",
        "RoutingSummary",
        "ViewSource",
        "encode_payload",
        "local_session",
        "read_view",
        "route_stream",
        "route_to_silos",
        "routing_key",
        "routing_summary",
        "stats_accumulator",
    }
    assert all(hasattr(silo.spark, name) for name in silo.spark.__all__)


def test_keys_are_strings_and_payloads_compact_json() -> None:
    assert routing_key("k1") == "k1"
    assert routing_key(42) == "42"
    assert encode_payload([1, "é", None, 2.5]) == '[1,"é",null,2.5]'.encode()
    assert encode_payload([]) == b"[]"
    with pytest.raises(ValueError, match=r"key column 'user' is null.*filter nulls out"):
        routing_key(None, "user")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("silo-spark-routing-tests", cores=2) as session:
        yield session


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    silos = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    try:
        yield silos
    finally:
        silos.close()


def keyed_records(spark: Any, kill_pid: int | None = None) -> Any:
    """``RECORDS`` rows (key ``k<i>``, value ``i``) in ``PARTITIONS`` partitions; with ``kill_pid``, the
    task feeding the last partition SIGKILLs that process group half-way through its records."""
    per_partition = RECORDS // PARTITIONS

    def feed(index: int, numbers: Iterator[int]) -> Iterator[tuple[str, int]]:
        for position, number in enumerate(numbers):
            if kill_pid is not None and index == PARTITIONS - 1 and position == per_partition // 2:
                os.killpg(kill_pid, signal.SIGKILL)
            yield f"k{number}", number

    rows = spark.sparkContext.parallelize(range(RECORDS), PARTITIONS).mapPartitionsWithIndex(feed)
    return spark.createDataFrame(rows, "key string, value long")


def expected_checksums() -> dict[str, bytes]:
    return {f"k{number}": checksum(f"k{number}", encode_payload([number])) for number in range(RECORDS)}


@pytest.mark.slow
def test_every_record_goes_to_its_owner_and_comes_back_once(spark: Any, cluster: Cluster) -> None:
    cluster.start_active(3, *UNDER_SPARK_LOAD)
    view = read_view(cluster.table_uri, CLUSTER)
    out = route_to_silos(
        keyed_records(spark), "key", CHECKSUM_HANDLER, table=cluster.table_uri, cluster=CLUSTER, batch_size=200
    ).collect()
    assert sorted(row["key"] for row in out) == sorted(expected_checksums())
    assert {row["key"]: row["result"] for row in out} == expected_checksums()
    ring = HashRing(view.addresses)
    elsewhere = [
        (row["key"], row["silo"], owner, row["rerouted"], row["via_sidecar"])
        for row in out
        if row["silo"] != (owner := str(ring.owner(row["key"])))
    ]
    assert not elsewhere, (
        f"{len(elsewhere)} records not processed by their owner; (key, silo, owner, rerouted, via_sidecar) of the "
        f"first: {elsewhere[:5]}; silos now: {cluster.describe()}"
    )
    assert {row["silo"] for row in out} == {str(address) for address in view.addresses}
    assert not any(row["rerouted"] or row["via_sidecar"] for row in out)


def start_silos(cluster: Cluster, count: int, source: str) -> tuple[list[SiloProcess], dict[str, Any]]:
    """``count`` Active silos, and how ``route_to_silos`` should read their view: ``table`` or ``gateways``."""
    if source == "table":
        return cluster.start_active(count, *UNDER_SPARK_LOAD), {"table": cluster.table_uri}
    ports = [free_port() for _ in range(count)]
    silos = [silo for port in ports for silo in cluster.start(1, *UNDER_SPARK_LOAD, "--gateway-port", str(port))]
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, 60)
    return silos, {"gateways": [f"127.0.0.1:{port}" for port in ports]}


@pytest.mark.slow
@pytest.mark.parametrize("source", ["table", "gateways"])
def test_a_silo_killed_mid_job_loses_and_duplicates_nothing(spark: Any, cluster: Cluster, source: str) -> None:
    silos, where = start_silos(cluster, 3, source)
    victim = silos[1]
    assert victim.address is not None
    view = read_view(cluster.table_uri, CLUSTER)
    out = route_to_silos(
        keyed_records(spark, kill_pid=victim.pid), "key", CHECKSUM_HANDLER, cluster=CLUSTER, batch_size=50, **where
    ).collect()
    assert not victim.running
    survivors = [silo for silo in silos if silo is not victim]
    stopped = [f"{silo.address}:\n{silo.log_tail()}" for silo in survivors if not silo.running]
    assert not stopped, "a silo that was not killed left the cluster during the job:\n" + "\n".join(stopped)
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * len(survivors)
    keys = [row["key"] for row in out]
    assert len(keys) == len(set(keys)) == RECORDS
    assert {row["key"]: row["result"] for row in out} == expected_checksums()
    ring = HashRing(view.addresses)
    moved = [row for row in out if row["rerouted"]]
    assert moved, "records of the killed silo were sent elsewhere after it died"
    for row in out:
        owners = ring.owners(row["key"], 2)
        if row["rerouted"]:  # only the dead silo's keys moved, each to its next owner
            assert (owners[0], row["silo"]) == (victim.address, str(owners[1]))
        else:
            assert row["silo"] == str(owners[0])
    assert any(row["silo"] == str(victim.address) for row in out), "the victim served records before it died"


@pytest.mark.slow
def test_records_of_a_json_payload_reach_the_handler_as_sent(spark: Any, cluster: Cluster) -> None:
    cluster.start_active(1)
    frame = spark.createDataFrame([("a", 1, "x"), ("b", 2, None)], "key string, n long, s string")
    out = route_to_silos(
        frame, "key", ECHO_HANDLER, table=cluster.table_uri, cluster=CLUSTER, result_column="echo"
    ).collect()
    assert {row["key"]: json.loads(row["echo"]) for row in out} == {"a": [1, "x"], "b": [2, None]}
    raw = spark.createDataFrame([(7, bytearray(b"\x00\xff"))], "id long, blob binary")
    (row,) = route_to_silos(raw, "id", ECHO_HANDLER, table=cluster.table_uri, cluster=CLUSTER).collect()
    assert (row["id"], bytes(row["result"])) == (7, b"\x00\xff")


@pytest.mark.slow
def test_no_active_silo_is_refused_on_the_driver(spark: Any, cluster: Cluster) -> None:
    (only,) = cluster.start_active(1)
    only.send(signal.SIGTERM)
    cluster.wait_statuses([only], SiloStatus.DEAD, 60)
    with pytest.raises(NoLiveSiloError, match=r"no silo of cluster 'spark-routing' is Active.*start silos"):
        route_to_silos(keyed_records(spark), "key", CHECKSUM_HANDLER, table=cluster.table_uri, cluster=CLUSTER)


@pytest.mark.slow
def test_a_task_whose_silos_are_all_gone_fails_with_a_clear_error(spark: Any, cluster: Cluster) -> None:
    silos = cluster.start_active(2)
    view: ClusterView = read_view(cluster.table_uri, CLUSTER)
    for process in silos:
        process.kill()
    job = route_to_silos(
        keyed_records(spark),
        "key",
        CHECKSUM_HANDLER,
        table=cluster.table_uri,
        cluster=CLUSTER,
        view=view,
        max_attempts=3,
    )
    with pytest.raises(Exception, match=r"NoLiveSiloError: no live silo could process a batch") as info:
        job.collect()
    assert "Start silos or check that the membership table is reachable" in str(info.value)


@pytest.mark.slow
def test_bad_columns_are_refused_before_any_work(spark: Any) -> None:
    frame = spark.createDataFrame([("a", 1)], "key string, silo long")
    with pytest.raises(ValueError, match=r"no column 'nope'"):
        route_to_silos(frame, "nope", CHECKSUM_HANDLER, table="sqlite://", cluster=CLUSTER)
    with pytest.raises(ValueError, match=r"column name 'silo' would clash"):
        route_to_silos(frame, "silo", CHECKSUM_HANDLER, table="sqlite://", cluster=CLUSTER)
    with pytest.raises(ValueError, match=r"give the membership table .* or the silos' gateways"):
        route_to_silos(frame, "key", CHECKSUM_HANDLER, cluster=CLUSTER)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        route_to_silos(frame, "key", CHECKSUM_HANDLER, table="sqlite://", cluster=CLUSTER, batch_size=0)
    with pytest.raises(ValueError, match=r"timeout must be a positive number of seconds"):
        route_to_silos(frame, "key", CHECKSUM_HANDLER, table="sqlite://", cluster=CLUSTER, timeout=0)


@pytest.mark.slow
def test_a_columnar_handler_gets_the_value_columns_as_they_are(spark: Any, cluster: Cluster) -> None:
    cluster.start_active(2, *UNDER_SPARK_LOAD, "--handler", "seen=tests.silo.work_handlers:columns_seen")
    frame = spark.createDataFrame([(1, "x", 2.5), (2, None, None)], "id long, s string, f double")
    out = route_to_silos(frame, "id", "seen", table=cluster.table_uri, cluster=CLUSTER).collect()
    assert {row["id"]: json.loads(row["result"]) for row in out} == {
        1: {"id": "1", "s": "x", "f": 2.5},
        2: {"id": "2", "s": None, "f": None},
    }


@pytest.mark.slow
def test_the_summary_and_the_stats_add_up_the_job(spark: Any, cluster: Cluster) -> None:
    cluster.start_active(3, *UNDER_SPARK_LOAD)
    view = read_view(cluster.table_uri, CLUSTER)
    stats = stats_accumulator(spark)
    routed = route_to_silos(
        keyed_records(spark), "key", CHECKSUM_HANDLER, table=cluster.table_uri, cluster=CLUSTER, batch_size=300,
        stats=stats,
    ).persist()  # fmt: skip
    summary = routing_summary(routed, checksum=True)
    rows = routed.collect()
    routed.unpersist()
    assert summary.records == RECORDS
    assert summary.checksum == checksum_total(expected_checksums().values())
    assert summary.per_silo == dict(sorted(Counter(row["silo"] for row in rows).items()))
    assert set(summary.per_silo) == {str(address) for address in view.addresses}
    assert summary.rerouted == sum(1 for row in rows if row["rerouted"])
    assert (summary.via_sidecar, summary.stayed_on_host_fraction) == (0, 0.0)
    figures = stats.value
    assert figures.records == RECORDS
    assert figures.calls >= len(view.addresses) * PARTITIONS // 2
    # nobody was killed, but on a loaded machine a call may time out and its keys move on:
    # records are rerouted only after a failed call
    assert figures.failed_calls > 0 or summary.rerouted == 0
    assert figures.request_bytes > 0
    assert figures.silo_handler_seconds > 0
    with pytest.raises(ValueError, match="reads the output of route_to_silos"):
        routing_summary(keyed_records(spark))
