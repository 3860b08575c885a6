"""A real local Spark standalone cluster for tests: one master and N workers, from the
installed pyspark package's own jars (nothing is downloaded).

Each worker runs with its own environment, and the executors a worker launches inherit it;
that is how a test gives every "host" its own sidecar (``SILO_SIDECAR_ADDRESS``). Use the
default session fixture ``spark_cluster`` (two workers, ``SILO_TEST_WORKER=worker-0/1``), or
start one with your own worker environments::

    with start_spark_cluster(tmp, [{"SILO_SIDECAR_ADDRESS": a}, {"SILO_SIDECAR_ADDRESS": b}]) as cluster:
        with spark_session(cluster, "my-test") as spark:
            ...

Everything stays small for a shared 2-core machine: daemons get 256 MB, each worker one core
and each executor 512 MB, and the driver has no UI.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from silo.spark.jobs import driver_environment
from testbed.services.process import ServerProcess, free_port, port_is_open, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START_TIMEOUT = 90.0
DAEMON_MEMORY = "256m"
EXECUTOR_MEMORY = "512m"


def spark_home() -> Path:
    """The installed pyspark package directory: it holds ``jars/`` like a Spark distribution."""
    try:
        import pyspark
    except ImportError:
        pytest.fail("the Spark tests need pyspark; install the 'spark' extra: pip install -e '.[spark]'")
    return Path(pyspark.__file__).parent


def scala_version(home: Path) -> str:
    """The Scala version of the bundled jars (e.g. ``2.13``).

    A worker builds its executors' command with Spark's launcher, which needs this to find
    the jars when it is not run from a source build (``SPARK_SCALA_VERSION``).
    """
    for jar in (home / "jars").glob("spark-core_*.jar"):
        return jar.name.removeprefix("spark-core_").split("-", 1)[0]
    raise RuntimeError(f"no spark-core jar in {home / 'jars'}; reinstall pyspark")


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        raise RuntimeError("Spark needs Java 17: install openjdk-17-jre-headless or set JAVA_HOME")
    return java


@dataclass(frozen=True)
class SparkWorker:
    webui_port: int
    env: Mapping[str, str]
    """The variables this worker (and so each executor it launches) gets on top of ours."""
    work_dir: Path
    process: ServerProcess


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    """``spark://127.0.0.1:PORT``: what a driver connects to."""
    master_webui_port: int
    master: ServerProcess
    workers: tuple[SparkWorker, ...]

    @property
    def processes(self) -> tuple[ServerProcess, ...]:
        return (self.master, *(worker.process for worker in self.workers))

    def state(self) -> dict[str, Any]:
        """The master's JSON status: workers, cores, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_webui_port}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def alive_workers(self) -> int:
        try:
            workers = self.state()["workers"]
        except (OSError, ValueError, KeyError):
            return 0  # not up yet, or another process answered on that port while it started
        return sum(1 for worker in workers if worker["state"] == "ALIVE")

    def session_conf(self, app_name: str) -> dict[str, str]:
        """Driver settings for this cluster: one 1-core executor per worker, small and UI-less.

        The scheduler waits for every executor before running the first job, so work spreads
        over all workers from the first task on.
        """
        return {
            "spark.master": self.master_url,
            "spark.app.name": app_name,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": EXECUTOR_MEMORY,
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(len(self.workers)),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{int(START_TIMEOUT)}s",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(max(2, len(self.workers))),
        }


def bound_port(process: ServerProcess, service: str) -> int:
    """The port a Spark daemon's ``service`` actually bound, read from its log.

    Spark moves silently to the next port when the one asked for was taken between our
    ``free_port()`` and its bind, so the port asked for is only a hint.
    """
    pattern = re.compile(rf"Successfully started service '{re.escape(service)}' on port (\d+)")
    found: list[int] = []

    def logged() -> bool:
        match = pattern.search(process.log.read_text(errors="replace")) if process.log.exists() else None
        if match:
            found.append(int(match.group(1)))
        return match is not None

    wait_until(logged, START_TIMEOUT, f"Spark's {service} to start", process.log)
    return found[0]


def daemon_env(home: Path) -> dict[str, str]:
    return {
        "SPARK_HOME": str(home),
        "SPARK_SCALA_VERSION": scala_version(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
    }


def daemon_argv(home: Path, main_class: str, *args: str) -> list[str]:
    # The REST submission server would take the fixed port 6066; tests never use it.
    return [
        java_executable(),
        f"-Xmx{DAEMON_MEMORY}",
        "-Dspark.master.rest.enabled=false",
        "-cp",
        str(home / "jars" / "*"),
        main_class,
        *args,
    ]


@contextlib.contextmanager
def start_spark_cluster(tmp: Path, worker_envs: Sequence[Mapping[str, str]]) -> Iterator[SparkCluster]:
    """Start a master and one worker per entry of ``worker_envs``; stop every JVM on exit.

    Returns once every worker has registered with the master.
    """
    home = spark_home()
    env = daemon_env(home)
    port, webui_port = free_port(), free_port()
    started: list[ServerProcess] = []
    try:
        master = ServerProcess(
            daemon_argv(
                home,
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui_port)),
            ),
            tmp / "master.log",
            env=env,
        )
        started.append(master)
        port, webui_port = bound_port(master, "sparkMaster"), bound_port(master, "MasterUI")
        wait_until(lambda: port_is_open(port), START_TIMEOUT, "the Spark master", master.log)
        launched: list[tuple[Mapping[str, str], Path, ServerProcess]] = []
        for index, extra in enumerate(worker_envs):
            work_dir = tmp / f"worker-{index}"
            work_dir.mkdir()
            worker_webui_port = free_port()
            argv = daemon_argv(
                home,
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(worker_webui_port), "--work-dir", str(work_dir)),
            )
            process = ServerProcess(argv, tmp / f"worker-{index}.log", env={**env, **extra})
            started.append(process)
            launched.append((extra, work_dir, process))
        workers = [
            SparkWorker(bound_port(process, "WorkerUI"), dict(extra), work_dir, process)
            for extra, work_dir, process in launched
        ]
        cluster = SparkCluster(f"spark://127.0.0.1:{port}", webui_port, master, tuple(workers))
        wait_until(
            lambda: cluster.alive_workers() == len(workers),
            START_TIMEOUT,
            f"{len(workers)} Spark workers to register",
            master.log,
        )
        yield cluster
    finally:
        for process in reversed(started):
            process.stop()


@contextlib.contextmanager
def spark_session(
    cluster: SparkCluster, app_name: str, conf: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    """A SparkSession on ``cluster`` (``conf`` overrides ``session_conf``); stopped on exit.

    The driver and its executors run this interpreter (``PYSPARK_PYTHON``), and the driver
    JVM binds to 127.0.0.1 (``SPARK_LOCAL_IP``); pyspark reads both from the environment.
    """
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("a SparkContext is already running in this process; stop it before starting another")
    with driver_environment():
        session = SparkSession.builder.config(map={**cluster.session_conf(app_name), **(conf or {})}).getOrCreate()
        try:
            yield session
        finally:
            session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """Two workers; each tells its executors which one it is through ``SILO_TEST_WORKER``."""
    envs = [{"SILO_TEST_WORKER": f"worker-{index}"} for index in range(2)]
    with start_spark_cluster(tmp_path_factory.mktemp("spark"), envs) as cluster:
        yield cluster
