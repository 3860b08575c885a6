"""``silo run --health-port``: ``/livez`` and ``/readyz`` over plain HTTP beside a mutual-TLS silo, and
systemd's ``NOTIFY_SOCKET`` (``READY=1`` once Active, ``STOPPING=1`` on drain), on real processes."""

from __future__ import annotations

import signal
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from silo.exit_codes import ExitCode
from silo.runtime.health_http import STALL_SECONDS, LoopHeartbeat, answer
from silo.runtime.sd_notify import notify
from silo.wire.peer_identity import Role
from silo.work.client import SyncWorkClient, WorkUnavailableError
from testbed.cluster_harness import Cluster, sqlite_cluster
from testbed.services.process import free_port, wait_until
from tests.silo.certificates import TestCa, tls_flags

CLUSTER = "health"
SLOW_CALL = 4.0
"""Seconds the Work call in flight during the drain takes: the drain must wait for it."""


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """The status and body of a GET of ``url`` (an error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_answers_follow_the_loop_heartbeat_and_the_readiness() -> None:
    now = [100.0]
    heartbeat = LoopHeartbeat(monotonic=lambda: now[0])
    assert answer("/livez", heartbeat, lambda: None) == (200, "ok\n")
    now[0] += STALL_SECONDS + 1
    status, body = answer("/livez", heartbeat, lambda: None)
    assert status == 503
    assert "stalled" in body
    heartbeat.beat()
    assert answer("/livez", heartbeat, lambda: None).status == 200
    assert answer("/readyz", heartbeat, lambda: None) == (200, "ready\n")
    assert answer("/readyz", heartbeat, lambda: "draining") == (503, "not ready: draining\n")
    assert answer("/metrics", heartbeat, lambda: None).status == 404


def test_notify_sends_one_datagram_to_the_socket_named_in_the_environment(tmp_path: Path) -> None:
    assert not notify("READY=1", environ={})
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        assert notify("READY=1", environ={"NOTIFY_SOCKET": str(path)})
        assert receiver.recv(100) == b"READY=1"
    assert not notify("READY=1", environ={"NOTIFY_SOCKET": str(tmp_path / "gone")})  # logged, not raised


@pytest.mark.slow
def test_readyz_is_200_only_while_active_and_503_while_draining_on_a_tls_silo(tmp_path: Path) -> None:
    """The join is held up (another process holds the SQLite write lock): ``/readyz`` is 503 and
    ``/livez`` 200 meanwhile. Once Active, ``/readyz`` is 200. On SIGTERM with a slow Work call in
    flight, ``/readyz`` turns 503 (draining), a new Work call is refused as draining, the call in
    flight completes, and the silo writes ShuttingDown, then Dead, and exits 0."""
    ca = TestCa(tmp_path / "ca")
    client_tls = ca.issue("client", CLUSTER, Role.CLIENT)
    port = free_port()
    health = f"http://127.0.0.1:{port}"
    with sqlite_cluster(tmp_path, CLUSTER) as cluster:
        cluster.table.initialize()
        holder = sqlite3.connect(tmp_path / "membership.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            (silo,) = cluster.start(
                1,
                "--health-port",
                str(port),
                "--handler",
                "sleep=tests.silo.work_handlers:sleep_for_payload",
                "--shutdown-grace",
                "20s",
                *tls_flags(ca.issue("silo-0", CLUSTER)),
            )
            wait_until(lambda: get(f"{health}/livez")[0] == 200, 30, "/livez answers", silo.log)
            status, body = get(f"{health}/readyz")
            assert status == 503
            assert "not ACTIVE" in body, body
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        wait_until(lambda: get(f"{health}/readyz") == (200, "ready\n"), 60, "/readyz 200", silo.log)
        assert cluster.statuses([silo]) == [SiloStatus.ACTIVE]
        assert silo.address is not None
        address = silo.address
        client = SyncWorkClient(CLUSTER, tls=client_tls)
        results: list[object] = []
        slow = threading.Thread(
            target=lambda: results.append(client.process(address, "sleep", [("k", str(SLOW_CALL).encode())], 30))
        )
        slow.start()
        time.sleep(1.0)  # the slow call is running in the silo
        silo.send(signal.SIGTERM)
        wait_until(lambda: "draining" in get(f"{health}/readyz")[1], 10, "/readyz says draining", silo.log)
        assert get(f"{health}/readyz")[0] == 503
        with pytest.raises(WorkUnavailableError, match="draining"):
            client.process(address, "sleep", [("k2", b"0")], 10)
        slow.join(30)
        assert results == [[str(SLOW_CALL).encode()]], silo.log_tail()
        assert silo.wait_exit(30) == ExitCode.OK
        client.close()
        assert_left_in_order(cluster, silo.log_text())


def assert_left_in_order(cluster: Cluster, log: str) -> None:
    """ShuttingDown was written before Dead, Dead is in the table, and nothing was logged as an error."""
    assert log.index("as SHUTTING_DOWN") < log.index("as DEAD"), log
    assert [entry.status for entry in cluster.read().entries] == [SiloStatus.DEAD]
    assert " ERROR " not in log, log
    assert "Traceback" not in log, log


@pytest.mark.slow
def test_livez_does_not_answer_for_a_frozen_process(tmp_path: Path) -> None:
    """A stopped event loop (here the whole process, SIGSTOP) answers nothing: the probe times out."""
    port = free_port()
    with sqlite_cluster(tmp_path, CLUSTER) as cluster:
        (silo,) = cluster.start(1, "--health-port", str(port))
        wait_until(lambda: get(f"http://127.0.0.1:{port}/livez")[0] == 200, 30, "/livez answers", silo.log)
        silo.freeze()
        try:
            with pytest.raises((TimeoutError, urllib.error.URLError)):
                get(f"http://127.0.0.1:{port}/livez", timeout=1.0)
        finally:
            silo.thaw()
        assert get(f"http://127.0.0.1:{port}/livez")[0] == 200


@pytest.mark.slow
def test_systemd_hears_ready_once_the_silo_is_active_and_stopping_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver, sqlite_cluster(tmp_path, CLUSTER) as cluster:
        receiver.bind(str(path))
        receiver.settimeout(60)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        (silo,) = cluster.start(1)
        assert receiver.recv(100) == b"READY=1"
        assert cluster.statuses([silo]) == [SiloStatus.ACTIVE]  # written before READY=1 was sent
        silo.send(signal.SIGTERM)
        assert receiver.recv(100) == b"STOPPING=1"
        assert silo.wait_exit(30) == ExitCode.OK
        assert_left_in_order(cluster, silo.log_text())
