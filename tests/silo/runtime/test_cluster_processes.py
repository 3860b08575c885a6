"""Whole clusters of real ``silo run`` processes talking gRPC over 127.0.0.1, on SQLite and PostgreSQL.

Bounds come from the options (``death_bound``) plus generous slack: they check that a
failure is detected at all and that nobody else is harmed, never how fast.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from membership_tables import MembershipTableData, SiloStatus
from silo.exit_codes import ExitCode
from silo.work.client import SyncWorkClient, WorkError
from silo.work.handlers import CHECKSUM_HANDLER, checksum
from testbed.cluster_harness import ROOT, SLACK, Cluster, death_bound
from testbed.services.process import free_port

pytestmark = pytest.mark.slow

JOIN_TIMEOUT = 60.0


class DatabaseServer(Protocol):
    def create_database(self, name: str) -> str: ...
    def stop(self) -> None: ...
    def start(self) -> None: ...


@pytest.fixture(params=["sqlite", "postgres"])
def table_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'membership.db'}"
    server: DatabaseServer = request.getfixturevalue("postgres_server")
    return server.create_database(f"silo_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Callable[[str, str], Cluster]]:
    """A factory of clusters; every process any of them started is killed at teardown."""
    made: list[Cluster] = []

    def make(table_uri: str, cluster_id: str = "main") -> Cluster:
        cluster = Cluster(tmp_path, table_uri, cluster_id)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()
    for cluster in made:  # after a passing test: the writes it made obey the protocol's invariants
        cluster.check_history()


def no_votes(snapshot: MembershipTableData) -> bool:
    return all(not entry.suspect_times for entry in snapshot.entries)


def test_five_silos_join_a_killed_one_is_declared_dead_and_sigterm_leaves_its_own_dead_row(
    table_uri: str, clusters: Callable[[str, str], Cluster]
) -> None:
    cluster = clusters(table_uri, "main")
    neighbour = clusters(table_uri, "neighbour")
    silos = cluster.start(5)
    (stranger,) = neighbour.start(1)
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, JOIN_TIMEOUT)
    neighbour.wait_statuses([stranger], SiloStatus.ACTIVE, JOIN_TIMEOUT)

    leaving, victim, survivors = silos[4], silos[0], silos[1:4]
    leaving.send(signal.SIGTERM)
    assert leaving.wait_exit(JOIN_TIMEOUT) == ExitCode.OK
    own_row = cluster.row(leaving)
    assert own_row.status == SiloStatus.DEAD
    assert own_row.suspect_times == (), "a graceful stop must not need anybody's votes"

    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * 3
    assert all(silo.running for silo in survivors)

    # The other cluster on the same table was never probed or gossiped to, and never refused anything.
    assert neighbour.statuses([stranger]) == [SiloStatus.ACTIVE]
    assert no_votes(neighbour.read())
    for silo in [*silos, stranger]:
        assert "refused" not in silo.log_text(), silo.log_tail()
        assert "FAILED_PRECONDITION" not in silo.log_text(), silo.log_tail()


def test_three_of_five_killed_at_once_are_all_declared_dead(
    table_uri: str, clusters: Callable[[str, str], Cluster]
) -> None:
    cluster = clusters(table_uri, "main")
    silos = cluster.start_active(5)

    victims, survivors = silos[:3], silos[3:]
    for victim in victims:
        victim.kill()
    cluster.wait_statuses(victims, SiloStatus.DEAD, death_bound(cluster.options))
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * 2


def test_a_frozen_silo_is_declared_dead_and_exits_by_itself_once_thawed(
    table_uri: str, clusters: Callable[[str, str], Cluster]
) -> None:
    cluster = clusters(table_uri, "main")
    silos = cluster.start_active(4)

    frozen = silos[0]
    frozen.freeze()
    cluster.wait_statuses([frozen], SiloStatus.DEAD, death_bound(cluster.options))
    frozen.thaw()
    assert frozen.wait_exit(cluster.options.table_refresh_timeout + SLACK) == ExitCode.DECLARED_DEAD
    assert cluster.statuses(silos[1:]) == [SiloStatus.ACTIVE] * 3


def test_a_table_outage_longer_than_detection_declares_nobody_dead(
    postgres_server: DatabaseServer, clusters: Callable[[str, str], Cluster]
) -> None:
    cluster = clusters(postgres_server.create_database(f"silo_{uuid.uuid4().hex[:12]}"), "main")
    silos = cluster.start_active(3)
    options = cluster.options
    outage = max(options.detection_time, options.stale_after) + options.table_refresh_timeout + 2.0

    postgres_server.stop()
    try:
        time.sleep(outage)  # every silo keeps running and probing; none may give up or be voted against
        assert all(silo.running for silo in silos), cluster.describe()
    finally:
        postgres_server.start()

    # Give the silos time to reach the table again and act on anything they might have concluded.
    cluster.wait_for(no_votes, options.table_refresh_timeout + SLACK, "a table with no votes")
    time.sleep(options.detection_time + options.table_refresh_timeout)
    assert cluster.statuses(silos) == [SiloStatus.ACTIVE] * 3
    assert no_votes(cluster.read())
    assert all(silo.running for silo in silos)


def test_a_gateway_silo_advertises_its_gateway_serves_health_there_and_shows_in_status(
    tmp_path: Path, clusters: Callable[[str, str], Cluster]
) -> None:
    table_uri = f"sqlite:///{tmp_path / 'gateway.db'}"
    cluster = clusters(table_uri, "gw")
    gateway = free_port()
    (silo,) = cluster.start_active(1, "--gateway-port", str(gateway))

    assert cluster.row(silo).proxy_port == gateway
    assert asyncio.run(health_status(gateway)) == health_pb2.HealthCheckResponse.SERVING
    status = subprocess.run(
        [sys.executable, "-m", "silo", "status", "--table", table_uri, "--cluster", "gw", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert [(s["address"], s["status"], s["proxy_port"]) for s in document["silos"]] == [
        (str(silo.address), "ACTIVE", gateway)
    ]

    silo.send(signal.SIGTERM)
    assert silo.wait_exit(JOIN_TIMEOUT) == ExitCode.OK


async def health_status(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10.0)
        return int(response.status)


def test_a_silo_serves_the_handlers_given_by_handler_flags_and_the_builtins(
    tmp_path: Path, clusters: Callable[[str, str], Cluster]
) -> None:
    cluster = clusters(f"sqlite:///{tmp_path / 'work.db'}", "work")
    handlers = [
        "--handler",
        "rev=tests.silo.work_handlers:reverse",
        "--handler",
        "crash=tests.silo.work_handlers:crash",
    ]
    (silo,) = cluster.start_active(1, *handlers)
    assert silo.address is not None
    with SyncWorkClient("work") as client:
        assert client.process(silo.address, "rev", [("k", b"abc")], timeout=30) == [b"cba"]
        assert client.process(silo.address, CHECKSUM_HANDLER, [("k", b"abc")], timeout=30) == [checksum("k", b"abc")]
        with pytest.raises(WorkError, match="INTERNAL: handler 'crash' raised RuntimeError"):
            client.process(silo.address, "crash", [("k", b"")], timeout=30)
        with pytest.raises(WorkError, match="NOT_FOUND"):
            client.process(silo.address, "nosuch", [("k", b"")], timeout=30)
    assert "crash handler always fails" in silo.log_text(), "a failing handler is logged with its traceback"
