"""Hostile input against clusters of real ``silo run`` processes: a malformed row, fuzzed RPCs.

Each test ends the way a failure detector is judged: a SIGKILLed silo is still declared
Dead and every other silo keeps running.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership_tables import SiloAddress, SiloStatus, open_table
from membership_tables.testing import StoreMalformedRow
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from testbed.cluster_harness import ROOT, Cluster, SiloProcess, death_bound
from testbed.services.zookeeper import ZooKeeperServer
from tests.membership_tables.malformed_rows import sql_store, zookeeper_store

pytestmark = pytest.mark.slow

JOIN_TIMEOUT = 60.0
HOSTILE = SiloAddress("10.66.6.6", 6666, 6)
"""The silo whose row is written malformed by hand (no such silo runs)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", "hostile")
    try:
        yield made
    finally:
        made.close()


def kill_one_and_expect_it_dead(cluster: Cluster, silos: list[SiloProcess]) -> None:
    victim, survivors = silos[-1], silos[:-1]
    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * len(survivors)
    assert all(silo.running for silo in survivors)


@pytest.mark.parametrize("store", ["sqlite", "zookeeper"])
def test_a_malformed_row_is_reported_once_and_failure_detection_goes_on(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store == "sqlite":
        uri = f"sqlite:///{tmp_path / 'membership.db'}"
        write_malformed: StoreMalformedRow = sql_store(uri)
    else:
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper_server")
        uri, write_malformed = zookeeper.uri(f"hostile-{uuid.uuid4().hex[:8]}"), zookeeper_store(zookeeper.hosts)
    cluster = Cluster(tmp_path, uri, "hostile")
    try:
        silos = cluster.start_active(3, timeout=JOIN_TIMEOUT)
        with open_table(uri, "hostile") as table:
            write_malformed(table, HOSTILE)
            (malformed,) = table.read_all().malformed

        def reported_by_all() -> bool:
            return all(malformed.key in silo.log_text() for silo in silos)

        deadline = time.monotonic() + 3 * cluster.options.table_refresh_timeout + 20
        while not reported_by_all():
            assert time.monotonic() < deadline, "\n".join(silo.log_tail() for silo in silos)
            time.sleep(0.2)
        time.sleep(2 * cluster.options.table_refresh_timeout)  # a few more refreshes: still one report each
        for silo in silos:
            assert silo.log_text().count(malformed.key) == 1, silo.log_tail()

        status = subprocess.run(
            [sys.executable, "-m", "silo", "status", "--table", uri, "--cluster", "hostile", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=True,
        )
        document = json.loads(status.stdout)
        assert document["malformed"] == [{"key": malformed.key, "reason": malformed.reason}]
        assert len(document["silos"]) == 3

        kill_one_and_expect_it_dead(cluster, silos)
    finally:
        cluster.close()


def hostile_requests() -> st.SearchStrategy[tuple[str, bytes]]:
    """(method path, request bytes): valid messages with hostile fields, and raw random bytes."""
    header = st.builds(pb.RequestHeader, cluster_id=st.sampled_from(["hostile", "other", ""]))
    gossip = st.builds(pb.GossipRequest, header=header, version=st.integers(-(2**63), 2**63 - 1))
    probe = st.builds(
        pb.ProbeIndirectlyRequest,
        header=header,
        target=st.builds(pb.SiloAddress, host=st.sampled_from(["127.0.0.1", "", "x@y"]), port=st.integers(0, 70000)),
        timeout_seconds=st.sampled_from([math.nan, math.inf, -1.0, 0.0, 1e300, 0.01]),
    )
    valid = st.one_of(
        gossip.map(lambda m: (codec.GOSSIP.path, m.SerializeToString())),
        probe.map(lambda m: (codec.PROBE_INDIRECTLY.path, m.SerializeToString())),
        header.map(lambda h: (codec.PING.path, pb.PingRequest(header=h).SerializeToString())),
    )
    paths = st.sampled_from([codec.PING.path, codec.GOSSIP.path, codec.GET_MEMBERSHIP.path, codec.PROCESS.path])
    return st.one_of(valid, st.tuples(paths, st.binary(max_size=256)))


def test_fuzzed_silo_processes_keep_running_and_detecting_failures(cluster: Cluster) -> None:
    silos = cluster.start_active(3, timeout=JOIN_TIMEOUT)
    assert silos[0].address is not None
    codes: list[grpc.StatusCode] = []

    with grpc.insecure_channel(silos[0].address.endpoint) as channel:

        @given(hostile_requests())
        def send(request: tuple[str, bytes]) -> None:
            path, data = request
            rpc: Callable[..., bytes] = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            try:
                rpc(data, timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())  # type: ignore[attr-defined]
            assert codes[-1] not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (path, data)

        send()

    assert codes, "hypothesis sent nothing"
    assert all(silo.running for silo in silos), "\n".join(silo.log_tail() for silo in silos)
    assert cluster.statuses(silos) == [SiloStatus.ACTIVE] * 3
    kill_one_and_expect_it_dead(cluster, silos)
