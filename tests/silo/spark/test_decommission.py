"""``deploy/spark/decommission-worker.sh`` mid-job on a real Spark standalone cluster with TLS sidecars.

Two workers, each with a sidecar silo (found by host, ``SILO_SIDECAR_ADDRESS`` unset), and a
third silo. While a routed job runs, the script decommissions worker 0: it drains worker 0's
silo (``silo drain --wait``, with that silo's own certificate, as on the host) and then sends the
worker Spark's decommission signal (``spark.decommission.enabled``). The job finishes with every
record once, the silo is Dead, the worker DECOMMISSIONED, and no batch started on the silo after
its ShuttingDown row was written but those already admitted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from membership_tables import SiloStatus
from silo.spark import SIDECAR_ENV, route_to_silos
from silo.spark.sidecar import SIDECAR_HOST_ENV
from silo.wire.peer_identity import Role
from silo.work.columnar_routing import DEFAULT_IN_FLIGHT
from silo.work.columns import encode_payload
from silo.work.handlers import checksum
from testbed.cluster_harness import Cluster, SiloProcess
from testbed.services.process import wait_until
from testbed.services.spark import spark_session, start_spark_cluster
from tests.silo.certificates import TestCa, tls_flags
from tests.silo.runtime.test_drain import logged_at
from tests.silo.spark import UNDER_SPARK_LOAD
from tests.silo.work_handlers import CALLS_ENV

pytestmark = pytest.mark.slow

CLUSTER = "decommission"
RECORDS = 6000
PARTITIONS = 12
BATCH = 20
PACE = 0.004
"""Seconds each task waits per record it feeds: the job runs about 12 s, in a steady stream of batches."""
CALLS_BEFORE = 10
"""Calls worker 0's silo has run when the test decommissions the worker: the job is under way."""
SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "spark" / "decommission-worker.sh"
HOSTS = ("worker-a", "worker-b")
EXECUTORS = len(HOSTS)


def silo_command(tmp_path: Path) -> Path:
    """``SILO_BIN`` for the script: this interpreter running the ``silo`` command of this checkout."""
    wrapper = tmp_path / "silo"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m silo "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def env_file(tmp_path: Path, silo: SiloProcess, tls: list[str]) -> Path:
    """The host's ``/etc/silo/sidecar.env`` (as ``deploy/systemd/sidecar.env`` writes it) for ``silo``."""
    assert silo.address is not None
    cert, key, ca = tls[1], tls[3], tls[5]
    path = tmp_path / "sidecar.env"
    path.write_text(
        f"SILO_CLUSTER={CLUSTER}\nSILO_HOST={silo.address.host}\nSILO_PORT={silo.address.port}\n"
        f"SILO_TLS_CERT={cert}\nSILO_TLS_KEY={key}\nSILO_TLS_CA={ca}\nSILO_SHUTDOWN_GRACE=10s\n"
    )
    return path


def test_a_decommissioned_worker_drains_its_sidecar_first_and_the_job_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv(CALLS_ENV, str(calls))
    monkeypatch.delenv(SIDECAR_ENV, raising=False)
    ca = TestCa(tmp_path / "ca")
    job_tls = ca.issue("job", CLUSTER, Role.CLIENT)
    silos = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    handler = ("--handler", "rec=tests.silo.work_handlers:checksum_and_record")
    try:
        started = []
        for index, host in enumerate((*HOSTS, "no-worker")):
            flags = tls_flags(ca.issue(f"silo-{index}", CLUSTER))
            (silo,) = silos.start_active(1, *UNDER_SPARK_LOAD, *handler, *flags, "--property", f"spark.host={host}")
            started.append((silo, flags))
        (victim, victim_tls) = started[0]
        assert victim.address is not None
        victim_endpoint = victim.address.endpoint
        (tmp_path / "spark").mkdir()
        decommissionable = {"JAVA_TOOL_OPTIONS": "-Dspark.decommission.enabled=true"}
        envs = [{SIDECAR_HOST_ENV: host, **decommissionable} for host in HOSTS]
        with start_spark_cluster(tmp_path / "spark", envs) as spark_cluster:
            worker = spark_cluster.workers[0].process.process.pid
            script_env = {
                **os.environ,
                "SILO_ENV_FILE": str(env_file(tmp_path, victim, victim_tls)),
                "SILO_BIN": str(silo_command(tmp_path)),
                "SILO_DRAIN_WAIT": "40s",
                "SPARK_DECOMMISSION_COMMAND": f"kill -{int(signal.SIGPWR)} {worker}",
            }
            outcome: dict[str, Any] = {}

            def decommission_mid_job() -> None:
                wait_until(lambda: _calls_by(calls, victim.pid) >= CALLS_BEFORE, 120, "the job to reach the victim")
                outcome["script"] = subprocess.run(
                    ["sh", str(SCRIPT)], env=script_env, capture_output=True, text=True, timeout=90, check=False
                )

            trigger = threading.Thread(target=decommission_mid_job, daemon=True)
            # Arrow batches of 100 rows reach the router while the task still feeds the rest.
            conf = {"spark.decommission.enabled": "true", "spark.sql.execution.arrow.maxRecordsPerBatch": "100"}
            pace = PACE

            def paced(numbers: Iterable[int]) -> Iterator[tuple[str, int]]:
                for number in numbers:
                    time.sleep(pace)
                    yield f"k{number}", number

            with spark_session(spark_cluster, "decommission-test", conf) as spark:
                rows = spark.sparkContext.parallelize(range(RECORDS), PARTITIONS).mapPartitions(paced)
                frame = spark.createDataFrame(rows, "key string, n long")
                trigger.start()
                out = route_to_silos(
                    frame, "key", "rec", table=silos.table_uri, cluster=CLUSTER, batch_size=BATCH, tls=job_tls
                ).collect()
                trigger.join(120)

            def states() -> list[str]:
                return sorted(entry["state"] for entry in spark_cluster.state()["workers"])

            wait_until(lambda: states() == ["ALIVE", "DECOMMISSIONED"], 60, f"worker 0 to decommission: {states()}")
        script = outcome["script"]
        assert script.returncode == 0, f"{script.stdout}\n{script.stderr}"
        assert "has exited" in script.stdout
        assert script.stdout.index("has exited") < script.stdout.index("decommission-worker: kill")
        assert silos.statuses([victim]) == [SiloStatus.DEAD]
    finally:
        silos.close()

    assert Counter(row["key"] for row in out) == Counter(f"k{number}" for number in range(RECORDS))
    for row in out:
        number = int(row["key"][1:])
        assert row["result"] == checksum(row["key"], encode_payload([number])), row
    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    assert {key for line in lines for key in line["keys"]} == {f"k{number}" for number in range(RECORDS)}
    shutting_down = logged_at(victim.log_text(), "as SHUTTING_DOWN")
    late = [line for line in lines if line["pid"] == victim.pid and line["at"] > shutting_down]
    assert len(late) <= EXECUTORS * DEFAULT_IN_FLIGHT, late  # admitted before the drain began, at most
    assert 0 < sum(row["silo"].startswith(f"{victim_endpoint}@") for row in out) < RECORDS
    moved = sum(row["rerouted"] for row in out)  # the drained silo's keys, sent on to their next owners
    assert moved > 0, "the drain came after the job had sent every key it owned: it did not land mid-job"
    print(f"{moved} of {RECORDS} records rerouted; {len(late)} calls began on the silo after its ShuttingDown row")


def _calls_by(calls: Path, pid: int) -> int:
    """Calls ``pid`` has recorded (complete lines only: the silos append while the test reads)."""
    text = calls.read_text() if calls.exists() else ""
    return sum(1 for line in text[: text.rfind("\n") + 1].splitlines() if json.loads(line)["pid"] == pid)
