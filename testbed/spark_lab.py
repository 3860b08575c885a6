"""A Spark standalone cluster on hosts of its own: every daemon in a network namespace of a ``NetworkLab``.

Why: on loopback every executor, sidecar and the table share one network stack, so "stayed on
its host" and sidecar discovery never cross a real address, and no network fault can be
injected between Spark and the silos. Here (``SparkLab(workdir, workers=3)``)::

    host "pg"      10.213.0.1   PostgreSQL: the membership table (NetCluster(table="postgres"))
    host "master"  10.213.0.2   the Spark standalone master
    host "driver"  10.213.0.3   the driver (a process of its own: ``run_driver``)
    host "s1".."sN" 10.213.0.4..  one Spark worker (and the executors it launches) and its sidecar
                                  silo, ``silo run --host <address> --property spark.host=<address>``

Each worker's environment, which its executors inherit, names its host's sidecar
(``SILO_SIDECAR_ADDRESS=<address>:11111``), as ``deploy/systemd/spark-env.sh`` does on a real
worker host. Everything crosses the lab's bridge, where ``lab.isolate(host)`` cuts a worker
host from the rest (its silo, worker and executor keep running, unreachable), and
``kill_host`` crashes it (every process in its namespace SIGKILLed). ``restore`` brings a
faulted host back with a new silo and a new worker, so one lab serves several fault scenarios.

The test's own process stays in the root namespace, which cannot reach the lab; it reads the
table through the PostgreSQL unix socket (``net.observer_uri``), asks the master through
``ip netns exec`` (``SparkCluster.state``) and talks to the driver through files: the job
specification in, the results out (``testbed/spark_driver.py``).

Spark's failure detection is shortened so that a partitioned executor is given up in seconds,
not the default two minutes: ``DRIVER_FAULT_CONF`` for the driver, ``spark.worker.timeout`` for
the master and the workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from silo.client.topology import ClusterView
from silo.spark import SIDECAR_ENV, read_view
from testbed.cluster_harness import ROOT, START_TIMEOUT
from testbed.net_cluster import NetCluster, NetSilo
from testbed.netfaults import Host
from testbed.services.process import ServerProcess, wait_until
from testbed.services.spark import (
    SparkCluster,
    SparkWorker,
    bound_port,
    spark_home,
    start_spark_cluster,
    start_worker,
)

UNDER_SPARK_LOAD = ("--set", "probe_timeout=2s", "--set", "probe_interval=0.5s", "--set", "death_vote_expiration=12s")
"""Detection timings for silos sharing two cores with Spark's JVMs and Python workers: the local
preset suspects a silo after 1.5 s of silence, which a busy machine can cause; a live silo
declared Dead would leave the job and move its keys, which is not what a Spark test looks at."""

WORKER_TIMEOUT_S = 10
"""``spark.worker.timeout``: seconds without a heartbeat before the master loses a worker (which
heartbeats every quarter of it)."""
DAEMON_PROPERTIES = {"spark.worker.timeout": str(WORKER_TIMEOUT_S), "spark.decommission.enabled": "true"}
"""Workers also decommission on SIGPWR, as ``deploy/spark/decommission-worker.sh`` expects (a
driver that lets its executors leave gracefully sets ``spark.decommission.enabled`` too)."""

DRIVER_FAULT_CONF = {
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "2s",
    "spark.executor.heartbeatInterval": "2s",
    "spark.ui.showConsoleProgress": "false",
}
"""The driver gives up an executor it has not heard from for 20 s (checked every 2 s) and
re-runs its tasks elsewhere; Spark's defaults (120 s, checked every 60 s) outlast a test."""

DRIVER_TIMEOUT = 600.0
"""Seconds a driver process may run before the lab gives up on it."""


class SidecarCluster(NetCluster):
    """A ``NetCluster`` whose silos also advertise their host as ``spark.host`` (as deploy/ does)."""

    def __init__(self, workdir: Path, **options: Any) -> None:
        super().__init__(workdir, **options)
        self._common_args = list(self.extra_args)

    def _spawn(self, host: Host) -> NetSilo:
        self.extra_args = [*self._common_args, "--property", f"spark.host={host.address}"]
        return super()._spawn(host)


class SparkLab:
    """PostgreSQL, a Spark master, a driver host and ``workers`` worker hosts with a sidecar each.

    Skips the test (``pytest.skip``) when the lab cannot run here; a caller outside pytest
    checks ``testbed.netfaults.lab_unavailable_reason()`` first. Use as a context manager:
    leaving it stops every process and deletes the lab.
    """

    def __init__(
        self,
        workdir: Path,
        workers: int = 3,
        *,
        cluster_id: str = "spark-lab",
        silo_args: Sequence[str] = UNDER_SPARK_LOAD,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a Spark lab needs at least one worker host, got {workers}")
        self.workdir = workdir
        self.cluster_id = cluster_id
        self.net = SidecarCluster(workdir, cluster_id=cluster_id, table="postgres", extra_args=silo_args)
        self._stack = contextlib.ExitStack()
        self._replacements: list[ServerProcess] = []
        self._runs = 0
        try:
            self.master_host = self.net.lab.add_host("master")
            self.driver_host = self.net.lab.add_host("driver")
            self.net.start(workers)
            (workdir / "spark").mkdir(exist_ok=True)
            self.spark: SparkCluster = self._stack.enter_context(
                start_spark_cluster(
                    workdir / "spark",
                    [self.worker_env(host) for host in self.net.hosts],
                    master_host=self.master_host,
                    worker_hosts=self.net.hosts,
                    daemon_properties=DAEMON_PROPERTIES,
                )
            )
            self.workers: list[SparkWorker] = list(self.spark.workers)
            """The current worker of each worker host, in ``net.hosts`` order (``restore`` replaces one)."""
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> SparkLab:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # --- lookups -------------------------------------------------------------------

    @property
    def table_uri(self) -> str:
        """The table as the lab's hosts reach it (over the bridge)."""
        return self.net.table_uri

    def sidecar_endpoint(self, host: Host) -> str:
        """The advertised ``host:port`` of the sidecar silo on ``host``."""
        return f"{host.address}:{self.net.port}"

    def worker_env(self, host: Host) -> dict[str, str]:
        """What a worker on ``host`` passes to its executors: its sidecar, and this checkout to import."""
        return {SIDECAR_ENV: self.sidecar_endpoint(host), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

    def host_of_sidecar(self, endpoint: str) -> Host:
        for host in self.net.hosts:
            if self.sidecar_endpoint(host) == endpoint:
                return host
        raise KeyError(
            f"no worker host has the sidecar {endpoint}; sidecars: {[self.sidecar_endpoint(h) for h in self.net.hosts]}"
        )

    def view(self) -> ClusterView:
        """The Active silos, read through the table's unix socket (no lab fault cuts it)."""
        return read_view(self.net.observer_uri, self.cluster_id)

    def driver_conf(self, app_name: str) -> dict[str, str]:
        """The Spark settings of a driver on the driver host: one executor per live worker host."""
        live = len(self.spark.alive_worker_endpoints())
        return {
            **self.spark.session_conf(app_name, self.driver_host.address, executors=live),
            **DRIVER_FAULT_CONF,
        }

    # --- the driver ----------------------------------------------------------------

    def start_driver(
        self, module: str, spec: Mapping[str, Any], name: str = "driver", conf: Mapping[str, str] | None = None
    ) -> DriverRun:
        """Run ``python -m module SPEC OUT`` on the driver host; ``spec`` gains ``conf`` (``driver_conf``
        with ``conf`` over it), ``driver_host``, ``table``, ``cluster`` and ``signals`` (a directory
        for marker files, shared with the tasks)."""
        self._runs += 1
        run_dir = self.workdir / f"{name}-{self._runs}"
        signals = run_dir / "signals"
        signals.mkdir(parents=True)
        full = {
            "conf": {**self.driver_conf(f"{name}-{self._runs}"), **(conf or {})},
            "driver_host": self.driver_host.address,
            "table": self.table_uri,
            "cluster": self.cluster_id,
            "signals": str(signals),
            **spec,
        }
        spec_path, out_path = run_dir / "spec.json", run_dir / "out.json"
        spec_path.write_text(json.dumps(full, indent=1))
        log = (run_dir / "driver.log").open("ab")
        process = self.driver_host.popen(
            [sys.executable, "-m", module, str(spec_path), str(out_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        return DriverRun(process, signals, out_path, run_dir / "driver.log")

    def run_driver(self, module: str, spec: Mapping[str, Any], name: str = "driver") -> dict[str, Any]:
        """``start_driver`` and wait for its results."""
        return self.start_driver(module, spec, name).result()

    # --- faults --------------------------------------------------------------------

    def kill_host(self, host: Host) -> None:
        """Crash a worker host: SIGKILL its silo, its worker and the executor and Python workers under it."""
        host.kill_processes()

    def restore(self, host: Host, timeout: float = START_TIMEOUT) -> None:
        """Heal every fault, then give ``host`` a new silo and a new worker (whatever ran there is
        killed first); return once the table has one Active silo per worker host and the master
        has exactly the current workers ALIVE."""
        self.net.lab.heal()
        host.kill_processes()
        index = self.net.hosts.index(host)
        self.net.replace_silo(host.name, timeout)
        old = self.workers[index]
        log = self.workdir / "spark" / f"worker-{index}.{len(self._replacements) + 1}.log"
        process = start_worker(spark_home(), self.spark.master_url, host, old.work_dir, log, old.env, DAEMON_PROPERTIES)
        self._replacements.append(process)
        self.workers[index] = SparkWorker(
            host, bound_port(process, "sparkWorker"), bound_port(process, "WorkerUI"), old.env, old.work_dir, process
        )
        expected = sorted(f"{worker.host.address}:{worker.port}" for worker in self.workers)
        wait_until(
            lambda: self.spark.alive_worker_endpoints() == expected,
            timeout + WORKER_TIMEOUT_S * 2,
            f"the Spark master to have exactly the workers {expected} ALIVE",
            self.spark.master.log,
        )
        self.net.wait_for(
            lambda _: len(self.view().addresses) == len(self.workers),
            timeout,
            "one Active silo per worker host",
        )

    def close(self) -> None:
        """Stop the Spark daemons, the silos and the table, and delete the lab; safe to call twice."""
        try:
            for process in self._replacements:
                process.stop()
            self._stack.close()
        finally:
            self.net.close()


class DriverRun:
    """A driver process on the driver host, and the files it shares with the test."""

    def __init__(self, process: subprocess.Popen[bytes], signals: Path, out: Path, log: Path) -> None:
        self.process = process
        self.signals = signals
        self.out = out
        self.log = log

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_signal(self, name: str, timeout: float = DRIVER_TIMEOUT) -> str:
        """Wait until the driver or a task leaves the marker ``name``; return its contents."""
        marker = self.signals / name
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the driver exited ({self.process.returncode}) before {name!r}:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {name!r} from the driver after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)
        time.sleep(0.05)  # the writer creates the file, then fills it
        return marker.read_text()

    def send_signal(self, name: str) -> None:
        """Leave the marker ``name`` for the driver's tasks (e.g. ``go`` to resume a paused task)."""
        (self.signals / name).write_text("")

    def result(self, timeout: float = DRIVER_TIMEOUT) -> dict[str, Any]:
        """Wait for the driver to exit; its results, or an ``AssertionError`` with its log."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the driver ran over {timeout:.0f}s:\n{self.log_tail()}") from None
        if code != 0 or not self.out.exists():
            raise AssertionError(f"the driver exited with {code}:\n{self.log_tail()}")
        results: dict[str, Any] = json.loads(self.out.read_text())
        return results
