"""A throwaway standalone ZooKeeper from Debian's ``zookeeper`` package, one per test session.

The server runs straight from the jars (what ``zkServer.sh`` would do, minus its
system-wide config): a generated ``zoo.cfg`` with the data dir in a temp dir, a free
client port, no admin server, and log4j logging to ``zookeeper.log`` next to it.
``stop()`` and ``start()`` restart it on the same port and data, so tests can take the
store away for a while.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.services.process import ServerProcess, free_port, wait_until

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JAVA_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest lists its own dependencies; log4j 1.2 and its slf4j binding are
# what Debian's zkEnv.sh/log4j.properties rely on for logging.
JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true")
START_TIMEOUT = 60.0


def classpath() -> str:
    """The server's classpath, or fail the test run saying how to install the package."""
    jars = sorted(Path("/usr/share/zookeeper").glob("*.jar")) + [JAVA_DIR / name for name in JARS]
    missing = [str(jar) for jar in jars if not jar.exists()]
    if missing or shutil.which("java") is None:
        pytest.fail(
            f"ZooKeeper or Java is not installed (missing {missing or ['java']}); run `make system-packages` "
            "(installs Debian's zookeeper and openjdk-17-jre-headless)"
        )
    return ":".join(str(jar) for jar in jars)


def four_letter_word(port: int, command: str) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``) and return the answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(command.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")


TICK_MS = 200
"""ZooKeeper's tick: sessions are checked for expiry every tick, so 200 ms keeps an expiration
within a tick of a 1.5 s session timeout."""


def write_server_files(workdir: Path, port: int, log: Path, client_address: str | None) -> tuple[Path, Path]:
    """Write a throwaway standalone server's ``zoo.cfg`` and log4j settings into ``workdir``.

    ``client_address`` None listens on every address of the host (e.g. inside a lab namespace).
    """
    config = workdir / "zoo.cfg"
    lines = [
        f"tickTime={TICK_MS}",
        f"dataDir={workdir / 'data'}",
        f"clientPort={port}",
        *([f"clientPortAddress={client_address}"] if client_address else []),
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr",
        "maxClientCnxns=0",  # every test handle may come from one address
        "minSessionTimeout=400",
        "maxSessionTimeout=60000",  # honour the client's requested session timeout
        "forceSync=no",  # throwaway data: no fsync per write
        "preAllocSize=1024",
        "",
    ]
    config.write_text("\n".join(lines))
    log4j = workdir / "log4j.properties"
    log4j.write_text(
        "\n".join(
            [
                "log4j.rootLogger=INFO, FILE",
                "log4j.appender.FILE=org.apache.log4j.FileAppender",
                f"log4j.appender.FILE.File={log}",
                "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
                "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n",
                "",
            ]
        )
    )
    return config, log4j


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1; ``hosts`` and ``uri()`` say how to reach it."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.log = workdir / "zookeeper.log"
        self._classpath = classpath()
        self._process: ServerProcess | None = None
        (workdir / "data").mkdir(exist_ok=True)
        self._config, self._log4j = write_server_files(workdir, port, self.log, client_address="127.0.0.1")

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, chroot: str = "") -> str:
        """``zookeeper://127.0.0.1:PORT/chroot`` (the backend's default chroot if empty)."""
        return f"zookeeper://{self.hosts}/{chroot.strip('/')}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def start(self) -> None:
        """Start (or restart) the server on the same port and data; return once it serves."""
        if self.running:
            return
        argv = [
            "java",
            *JVM_FLAGS,
            f"-Dlog4j.configuration=file:{self._log4j}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            self._classpath,
            MAIN_CLASS,
            str(self._config),
        ]
        # The JVM's own output (start-up errors) goes next to the log4j file.
        self._process = ServerProcess(argv, self.workdir / "zookeeper.out")
        wait_until(self._serving, START_TIMEOUT, f"ZooKeeper to serve on port {self.port}", self.log)

    def _serving(self) -> bool:
        if not self.running:
            output = (self.workdir / "zookeeper.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"ZooKeeper exited during start-up; see {self.log}\n{output}")
        return "Mode: standalone" in four_letter_word(self.port, "srvr")

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A running ZooKeeper for the whole session; stopped at the end."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
