"""Stopping ``silo run`` processes: the drain under a routed job, a stop with the table frozen, a
stop of many silos at once, and ``silo drain``, on real processes (``testbed.cluster_harness``)."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from membership_tables import SiloAddress, SiloStatus
from silo.cli.commands import main
from silo.cli.drain import DRAIN_FAILED
from silo.client.topology import ClusterView
from silo.exit_codes import ExitCode
from silo.runtime.process import EXIT_GRACE, STOP_ROLES_SECONDS
from silo.wire.peer_identity import Role
from silo.work.client import SyncWorkClient
from silo.work.handlers import checksum_handler
from silo.work.routing import Record, Router
from testbed.cluster_harness import Cluster, SiloProcess, sqlite_cluster
from testbed.services.freezing_proxy import FreezingProxy
from testbed.services.postgres import PostgresServer
from tests.silo.certificates import TestCa, tls_flags
from tests.silo.work_handlers import CALLS_ENV

pytestmark = pytest.mark.slow

RECORDS = 2000
BATCH = 10
CALLS_BEFORE_DRAIN = 10
"""Calls the silo to drain has run when the test signals it: the job is well under way."""
LOAD_SLACK = 5.0
"""Seconds a loaded two-core machine may add to a bound of the protocol's."""
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ", re.MULTILINE)


def logged_at(log: str, text: str) -> float:
    """The wall-clock time of the first log line that contains ``text``."""
    line = next(line for line in log.splitlines() if text in line)
    match = LOG_TIME.match(line)
    assert match is not None, line
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(match.group(2)) / 1000


def assert_quiet(silo: SiloProcess) -> None:
    """A normal stop logs no error and no traceback."""
    log = silo.log_text()
    for marker in (" ERROR ", "Traceback", "never retrieved", "CancelledError"):
        assert marker not in log, f"{marker!r} in {silo.log.name}:\n{log}"


def test_a_drain_under_a_routed_job_loses_duplicates_and_misroutes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router sends batches (one at a time) to three silos; once one of them has run a few, it is
    sent SIGTERM. Every record comes back once with its handler's result, every key ran once (a
    draining silo refuses new calls and finishes the one in flight, it does not drop it), and the
    draining silo ran no batch that started after its ShuttingDown row was written, but the one
    it may have admitted just before: the router learns of the drain from the refusal."""
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv(CALLS_ENV, str(calls))
    with sqlite_cluster(tmp_path, "drain") as cluster:
        silos = cluster.start_active(3, "--handler", "rec=tests.silo.work_handlers:checksum_and_record")
        victim = silos[0]
        client = SyncWorkClient("drain")

        def refresh() -> ClusterView:
            return ClusterView.from_table_data("drain", cluster.read())

        def send(
            silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], /, *, view_version: int
        ) -> list[bytes]:
            return client.process(silo, handler, items, 30, view_version=view_version)

        router: Router[int] = Router(refresh(), "rec", send, refresh)
        signalled = threading.Event()

        def drain_mid_job() -> None:
            while not signalled.is_set():
                if calls.exists() and _calls_by(calls, victim.pid) >= CALLS_BEFORE_DRAIN:
                    victim.send(signal.SIGTERM)
                    signalled.set()
                time.sleep(0.02)

        trigger = threading.Thread(target=drain_mid_job, daemon=True)
        trigger.start()
        records = [Record(index, f"key-{index}", str(index).encode()) for index in range(RECORDS)]
        try:
            routed = list(router.route(records, BATCH))
        finally:
            signalled.set()
            client.close()
        assert victim.wait_exit(30) == ExitCode.OK
        assert sorted(result.key for result in routed) == list(range(RECORDS))
        for result in routed:
            assert result.result == checksum_handler([(f"key-{result.key}", str(result.key).encode())])[0]
        lines = [json.loads(line) for line in calls.read_text().splitlines()]
        runs = Counter(key for line in lines for key in line["keys"])
        assert set(runs.values()) == {1}, [key for key, count in runs.items() if count > 1]
        assert len(runs) == RECORDS
        shutting_down = logged_at(victim.log_text(), "as SHUTTING_DOWN")
        late = [line for line in lines if line["pid"] == victim.pid and line["at"] > shutting_down]
        assert len(late) <= 1, late  # one call at a time: at most the one admitted before the drain
        assert victim.address not in router.view
        assert cluster.statuses([victim]) == [SiloStatus.DEAD]
        assert_quiet(victim)


def _calls_by(calls: Path, pid: int) -> int:
    return sum(1 for line in calls.read_text().splitlines() if line.strip() and json.loads(line)["pid"] == pid)


def test_sigterm_with_the_table_frozen_exits_within_the_grace(tmp_path: Path, postgres_server: PostgresServer) -> None:
    """The table stops answering (a proxy holds every byte, TCP notices nothing): the silo cannot
    write ShuttingDown nor Dead, says so at WARNING, and exits 0 within its shutdown grace."""
    grace = 3.0
    direct = postgres_server.create_database(f"silo_{uuid.uuid4().hex[:12]}")
    with FreezingProxy("127.0.0.1", postgres_server.port) as proxy:
        proxied = direct.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        cluster = Cluster(tmp_path, proxied, "frozen", watch_uri=direct)
        try:
            (silo,) = cluster.start_active(1, "--shutdown-grace", f"{grace}s")
            proxy.freeze()
            silo.send(signal.SIGTERM)
            signalled = time.monotonic()
            code = silo.wait_exit(grace + EXIT_GRACE + STOP_ROLES_SECONDS + LOAD_SLACK)
            took = time.monotonic() - signalled
        finally:
            cluster.close()
    assert code == ExitCode.OK, silo.log_tail()
    assert took < grace + EXIT_GRACE + STOP_ROLES_SECONDS + LOAD_SLACK
    log = silo.log_text()
    assert re.search(r"WARNING .*could not write itself SHUTTING_DOWN", log), log
    assert_quiet(silo)


def test_ten_silos_stopped_at_once_exit_0_and_log_no_error(tmp_path: Path) -> None:
    with sqlite_cluster(tmp_path, "many") as cluster:
        silos = cluster.start_active(10, timeout=120)
        for silo in silos:
            silo.send(signal.SIGTERM)
        codes = [silo.wait_exit(60) for silo in silos]
        assert codes == [ExitCode.OK] * 10, cluster.describe()
        for silo in silos:
            assert_quiet(silo)
        assert set(cluster.statuses(silos)) == {SiloStatus.DEAD}


def test_silo_drain_asks_a_tls_silo_to_drain_and_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``silo drain`` drains the silo as SIGTERM does; under mutual TLS a client certificate may not."""
    ca = TestCa(tmp_path / "ca")
    silo_tls = ca.issue("silo-0", "admin")
    with sqlite_cluster(tmp_path, "admin") as cluster:
        (silo,) = cluster.start_active(1, *tls_flags(silo_tls))
        endpoint = str(silo.address).partition("@")[0]
        drain = ["drain", endpoint, "--cluster", "admin", "--timeout", "5s"]
        assert main([*drain, *tls_flags(ca.issue("app", "admin", Role.CLIENT))]) == DRAIN_FAILED
        assert "PERMISSION_DENIED" in capsys.readouterr().err
        assert silo.running
        assert main([*drain, *tls_flags(ca.issue("operator", "admin"))]) == ExitCode.OK
        assert f"silo {silo.address} is draining" in capsys.readouterr().out
        assert silo.wait_exit(30) == ExitCode.OK
        log = silo.log_text()
        assert log.index("asked to drain") < log.index("as SHUTTING_DOWN") < log.index("as DEAD"), log
        assert_quiet(silo)
        assert main([*drain, *tls_flags(silo_tls)]) == DRAIN_FAILED  # nobody answers any more
        assert "UNAVAILABLE" in capsys.readouterr().err


def test_silo_drain_says_what_is_wrong_with_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drain", "10.0.0.5", "--cluster", "c", "--insecure"]) == ExitCode.BAD_CONFIGURATION
    assert "expected the silo's host:port" in capsys.readouterr().err
    assert main(["drain", "10.0.0.5:11111", "--cluster", "c"]) == ExitCode.BAD_CONFIGURATION
    assert "or --insecure for a plaintext silo" in capsys.readouterr().err


def test_sigterm_while_the_first_table_read_hangs_exits_at_once(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """The table is frozen from the start, so the silo's first read (the generation, before it binds)
    hangs: SIGTERM still ends the process at once, with code 0 and nothing logged as an error."""
    direct = postgres_server.create_database(f"silo_{uuid.uuid4().hex[:12]}")
    with FreezingProxy("127.0.0.1", postgres_server.port) as proxy:
        proxy.freeze()
        cluster = Cluster(tmp_path, direct.replace(f":{postgres_server.port}/", f":{proxy.port}/"), "early")
        try:
            silo = cluster.launch()
            time.sleep(3)  # the process has started and waits for the table
            assert silo.running, silo.log_tail()
            silo.send(signal.SIGTERM)
            assert silo.wait_exit(EXIT_GRACE + LOAD_SLACK) == ExitCode.OK
        finally:
            cluster.close()
    assert "signalled while reading the table at start-up" in silo.log_text(), silo.log_tail()
    assert_quiet(silo)
