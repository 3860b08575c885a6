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

**Hosts.** By default every daemon runs on this machine's loopback (``LOOPBACK``). Give
``start_spark_cluster`` a ``master_host`` and ``worker_hosts`` (any ``Machine``, e.g. a
``testbed.netfaults.Host``: a network namespace with its own address) and each daemon runs
there instead (``ip netns exec``), binds that host's address (``--host``, ``SPARK_LOCAL_IP``)
and is reached through it; the executors a worker launches run on the worker's host.
``testbed/spark_lab.py`` builds such a cluster with one sidecar silo per worker host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from silo.spark.jobs import driver_environment
from testbed.services.process import ServerProcess, free_port, wait_until

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


class Machine(Protocol):
    """Where a daemon runs: an address it binds and a way to run a command there."""

    @property
    def address(self) -> str: ...

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run on this machine (e.g. ``ip netns exec NS argv``)."""
        ...


@dataclass(frozen=True)
class Loopback:
    """This machine's own network stack, at 127.0.0.1."""

    address: str = "127.0.0.1"

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)


LOOPBACK = Loopback()

_FETCH_JSON = (
    "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
)
"""Prints the body at ``argv[1]``; run on the master's machine, whose address may be reachable only there."""


@dataclass(frozen=True)
class SparkWorker:
    host: Machine
    port: int
    """The worker's RPC port (the master knows it as ``host.address:port``)."""
    webui_port: int
    env: Mapping[str, str]
    """The variables this worker (and so each executor it launches) gets on top of ours."""
    work_dir: Path
    process: ServerProcess


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    """``spark://ADDRESS:PORT``: what a driver connects to."""
    master_webui_port: int
    master: ServerProcess
    workers: tuple[SparkWorker, ...]
    master_host: Machine = LOOPBACK

    @property
    def processes(self) -> tuple[ServerProcess, ...]:
        return (self.master, *(worker.process for worker in self.workers))

    def state(self) -> dict[str, Any]:
        """The master's JSON status: workers, cores, applications (fetched on the master's machine)."""
        url = f"http://{self.master_host.address}:{self.master_webui_port}/json/"
        result = subprocess.run(
            self.master_host.command([sys.executable, "-I", "-c", _FETCH_JSON, url]),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise OSError(f"reading {url} failed: {result.stderr.strip()[-500:]}")
        state: dict[str, Any] = json.loads(result.stdout)
        return state

    def alive_worker_endpoints(self) -> list[str]:
        """``host:port`` of every worker the master has ALIVE, sorted (empty while the master is not up)."""
        try:
            workers = self.state()["workers"]
        except (OSError, ValueError, KeyError):
            return []  # not up yet, or another process answered on that port while it started
        return sorted(f"{worker['host']}:{worker['port']}" for worker in workers if worker["state"] == "ALIVE")

    def alive_workers(self) -> int:
        return len(self.alive_worker_endpoints())

    def session_conf(
        self, app_name: str, driver_host: str = LOOPBACK.address, executors: int | None = None
    ) -> dict[str, str]:
        """Driver settings for this cluster: one 1-core executor per worker (or ``executors``), small
        and UI-less, for a driver on ``driver_host`` (an address the workers can reach).

        The scheduler waits for every executor before running the first job, so work spreads
        over all workers from the first task on.
        """
        count = len(self.workers) if executors is None else executors
        return {
            "spark.master": self.master_url,
            "spark.app.name": app_name,
            "spark.driver.host": driver_host,
            "spark.driver.bindAddress": driver_host,
            "spark.driver.memory": EXECUTOR_MEMORY,
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(count),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{int(START_TIMEOUT)}s",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(max(2, count)),
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


def daemon_env(home: Path, local_ip: str = LOOPBACK.address) -> dict[str, str]:
    return {
        "SPARK_HOME": str(home),
        "SPARK_SCALA_VERSION": scala_version(home),
        "SPARK_LOCAL_IP": local_ip,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
    }


def daemon_argv(home: Path, main_class: str, *args: str, properties: Mapping[str, str] | None = None) -> list[str]:
    """The JVM command of a Spark daemon; ``properties`` become ``-Dkey=value`` settings."""
    # The REST submission server would take the fixed port 6066; tests never use it.
    return [
        java_executable(),
        f"-Xmx{DAEMON_MEMORY}",
        "-Dspark.master.rest.enabled=false",
        *(f"-D{key}={value}" for key, value in (properties or {}).items()),
        "-cp",
        str(home / "jars" / "*"),
        main_class,
        *args,
    ]


def start_worker(
    home: Path,
    master_url: str,
    host: Machine,
    work_dir: Path,
    log: Path,
    env: Mapping[str, str],
    properties: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Launch one worker JVM on ``host`` (1 core, 1 GB); ``env`` goes to it and to its executors,
    ``properties`` are its Spark settings.

    Returns at once; ``bound_port(process, "WorkerUI")`` waits until it is up.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = daemon_argv(
        home,
        "org.apache.spark.deploy.worker.Worker",
        master_url,
        *("--host", host.address, "--cores", "1", "--memory", "1g"),
        *("--webui-port", str(free_port()), "--work-dir", str(work_dir)),
        properties=properties,
    )
    return ServerProcess(host.command(argv), log, env={**daemon_env(home, host.address), **env})


@contextlib.contextmanager
def start_spark_cluster(
    tmp: Path,
    worker_envs: Sequence[Mapping[str, str]],
    *,
    master_host: Machine = LOOPBACK,
    worker_hosts: Sequence[Machine] | None = None,
    daemon_properties: Mapping[str, str] | None = None,
) -> Iterator[SparkCluster]:
    """Start a master and one worker per entry of ``worker_envs``; stop every JVM on exit.

    ``master_host`` and ``worker_hosts`` (one per worker; default all on ``LOOPBACK``) say
    where each daemon runs; ``daemon_properties`` are Spark settings of the master and the
    workers (e.g. ``spark.worker.timeout``, which both must agree on: a worker heartbeats every
    quarter of it). Returns once every worker has registered with the master.
    """
    hosts = list(worker_hosts) if worker_hosts is not None else [LOOPBACK] * len(worker_envs)
    if len(hosts) != len(worker_envs):
        raise ValueError(
            f"{len(worker_envs)} worker environments but {len(hosts)} worker hosts; give one host per worker"
        )
    home = spark_home()
    port, webui_port = free_port(), free_port()
    started: list[ServerProcess] = []
    try:
        master = ServerProcess(
            master_host.command(
                daemon_argv(
                    home,
                    "org.apache.spark.deploy.master.Master",
                    *("--host", master_host.address, "--port", str(port), "--webui-port", str(webui_port)),
                    properties=daemon_properties,
                )
            ),
            tmp / "master.log",
            env=daemon_env(home, master_host.address),
        )
        started.append(master)
        port, webui_port = bound_port(master, "sparkMaster"), bound_port(master, "MasterUI")
        master_url = f"spark://{master_host.address}:{port}"
        launched: list[tuple[Machine, Mapping[str, str], Path, ServerProcess]] = []
        for index, (host, extra) in enumerate(zip(hosts, worker_envs, strict=True)):
            work_dir = tmp / f"worker-{index}"
            log = tmp / f"worker-{index}.log"
            process = start_worker(home, master_url, host, work_dir, log, extra, daemon_properties)
            started.append(process)
            launched.append((host, extra, work_dir, process))
        workers = [
            SparkWorker(
                host,
                bound_port(process, "sparkWorker"),
                bound_port(process, "WorkerUI"),
                dict(extra),
                work_dir,
                process,
            )
            for host, extra, work_dir, process in launched
        ]
        cluster = SparkCluster(master_url, webui_port, master, tuple(workers), master_host)
        expected = sorted(f"{worker.host.address}:{worker.port}" for worker in workers)
        wait_until(
            lambda: cluster.alive_worker_endpoints() == expected,
            START_TIMEOUT,
            f"{len(workers)} Spark workers to register",
            master.log,
        )
        yield cluster
    finally:
        for process in reversed(started):
            process.stop()


GATEWAY_ATTEMPTS = 2
"""Tries at starting a driver's JVM. pyspark forks it from this process (``preexec_fn``); in a
full suite, where this process already holds gRPC channels, it once exited before it started,
printing nothing, while gRPC's poller logged ``epoll_wait error: Bad file descriptor``: the fork,
not Spark or the job, which the next try runs as usual."""


@contextlib.contextmanager
def spark_session(
    cluster: SparkCluster, app_name: str, conf: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    """A SparkSession on ``cluster`` (``conf`` overrides ``session_conf``); stopped on exit.

    The driver and its executors run this interpreter (``PYSPARK_PYTHON``), and the driver
    JVM binds to 127.0.0.1 (``SPARK_LOCAL_IP``); pyspark reads both from the environment.
    """
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("a SparkContext is already running in this process; stop it before starting another")
    settings = {**cluster.session_conf(app_name), **(conf or {})}
    with driver_environment():
        for attempt in range(1, GATEWAY_ATTEMPTS + 1):
            try:
                session = SparkSession.builder.config(map=settings).getOrCreate()
                break
            except PySparkRuntimeError as exc:
                if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == GATEWAY_ATTEMPTS:
                    raise
                print(f"spark_session: the driver's JVM exited before it started ({exc}); again", file=sys.stderr)
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
