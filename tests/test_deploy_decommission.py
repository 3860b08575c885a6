"""``deploy/spark/decommission-worker.sh`` against real TLS silos: it drains the host's silo with the
host's own certificate, waits until the silo has left, and only then runs Spark's decommission step;
a silo it cannot drain still lets the Spark step run, and the script says it failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from testbed.cluster_harness import sqlite_cluster
from tests.silo.certificates import TestCa, tls_flags

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "deploy" / "spark" / "decommission-worker.sh"
CLUSTER = "decommission-script"


def run_script(tmp_path: Path, env_lines: str, spark_step: str) -> subprocess.CompletedProcess[str]:
    """The script with ``env_lines`` as the host's ``sidecar.env`` and this checkout's ``silo`` as ``SILO_BIN``."""
    wrapper = tmp_path / "silo"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m silo "$@"\n')
    wrapper.chmod(0o755)
    env_file = tmp_path / "sidecar.env"
    env_file.write_text(env_lines)
    env = {
        **os.environ,
        "SILO_ENV_FILE": str(env_file),
        "SILO_BIN": str(wrapper),
        "SILO_DRAIN_WAIT": "30s",
        "SPARK_DECOMMISSION_COMMAND": spark_step,
    }
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=90, check=False)


def test_the_script_drains_the_hosts_silo_then_decommissions_the_worker(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "ca")
    with sqlite_cluster(tmp_path, CLUSTER) as cluster:
        host_tls = ca.issue("silo-0", CLUSTER)
        (victim, other) = [
            cluster.start_active(1, *tls_flags(tls))[0] for tls in (host_tls, ca.issue("silo-1", CLUSTER))
        ]
        assert victim.address is not None
        marker = tmp_path / "spark-step"
        result = run_script(
            tmp_path,
            f"SILO_CLUSTER={CLUSTER}\nSILO_HOST={victim.address.host}\nSILO_PORT={victim.address.port}\n"
            f"SILO_TLS_CERT={host_tls.cert}\nSILO_TLS_KEY={host_tls.key}\nSILO_TLS_CA={host_tls.ca}\n",
            # Spark's step sees the silo gone: its port answers no more.
            f"{sys.executable} -c \"import socket; socket.create_connection(('{victim.address.host}', "
            f'{victim.address.port}), 2)" 2>/dev/null && echo silo-still-up > {marker} || echo silo-gone > {marker}',
        )
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        assert f"silo {victim.address} is draining" in result.stdout
        assert result.stdout.index("has exited") < result.stdout.index("decommission-worker: ")
        assert marker.read_text().strip() == "silo-gone"
        assert victim.wait_exit(10) == 0
        assert cluster.statuses([victim, other]) == [SiloStatus.DEAD, SiloStatus.ACTIVE]
        log = victim.log_text()
        assert log.index("asked to drain") < log.index("as SHUTTING_DOWN") < log.index("as DEAD"), log


def test_a_silo_that_cannot_be_drained_still_lets_the_worker_go_and_the_script_fails(tmp_path: Path) -> None:
    marker = tmp_path / "spark-step"
    result = run_script(
        tmp_path,
        f"SILO_CLUSTER={CLUSTER}\nSILO_HOST=127.0.0.1\nSILO_PORT=9\n",  # nothing listens on the discard port
        f"touch {marker}",
    )
    assert result.returncode == 1
    assert "did not drain; decommissioning the Spark worker anyway" in result.stderr
    assert marker.exists()
