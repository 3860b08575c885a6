"""What the throwaway PostgreSQL and MariaDB servers share: a data dir, a port, stop and start.

The silo runtime tests stop a table's server for a while and start it again with the same
data and port, so the object a fixture yields offers ``stop()`` and ``start()``.
"""

from __future__ import annotations

import abc
import contextlib
import glob
import re
import shutil
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from testbed.services.process import ServerProcess, free_port, wait_until

START_TIMEOUT = 90.0


def find_binary(name: str, *patterns: str) -> Path:
    """The newest installed ``name`` (on PATH or matching ``patterns``), or fail saying how to install it."""
    candidates = sorted(
        (path for pattern in patterns for path in glob.glob(pattern)),
        key=lambda path: [int(number) for number in re.findall(r"\d+", path)],  # PostgreSQL 15 after 9.6
    )
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if candidates:
        return Path(candidates[-1])
    if found:
        return Path(found)
    pytest.fail(f"{name} is not installed; run `make system-packages` (as root) to install the test servers")


def log_tail(log: Path, lines: int = 30) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def run_to_completion(argv: Sequence[str], log: Path, user: str | None = None, timeout: float = 180.0) -> None:
    """Run a setup command (initdb, install-db) with its output in ``log``; fail with the log tail."""
    process = ServerProcess(argv, log, user=user)
    try:
        code = process.process.wait(timeout)
    finally:
        process.stop()
    if code != 0:
        pytest.fail(f"{argv[0]} exited with {code}:\n{log_tail(log)}")


class ThrowawayServer(abc.ABC):
    """A database server in a temp dir on a free 127.0.0.1 port; ``close()`` removes everything."""

    name = "server"
    user: str | None = None
    """Unix user the server runs as (when the tests run as root)."""
    stop_signal = signal.SIGTERM
    command_prefix: Sequence[str] = ()
    """Wraps the server's command line (``ip netns exec NS`` to run it in a network namespace)."""
    url: str
    """SQLAlchemy URL of the database the tests use."""

    def __init__(self) -> None:
        # not under pytest's tmp dir: that is private to root, and PostgreSQL runs as another user
        self.root = Path(tempfile.mkdtemp(prefix=f"silo-{self.name}-"))
        self.port = free_port()
        self.log = self.root / f"{self.name}.log"
        self._process: ServerProcess | None = None

    @abc.abstractmethod
    def _argv(self) -> list[str]:
        """The command line that runs the server in the foreground."""

    @abc.abstractmethod
    def create_database(self, name: str) -> str:
        """Create an empty database and return its SQLAlchemy URL."""

    @abc.abstractmethod
    def _ready(self) -> bool:
        """True once the server accepts queries."""

    def start(self) -> None:
        """Start (or restart) the server on the same port and data."""
        if self.running:
            return
        process = self._process = ServerProcess(self._argv(), self.log, user=self.user, prefix=self.command_prefix)

        def up() -> bool:
            if not process.running:
                raise RuntimeError(f"{self.name} exited with {process.process.returncode}:\n{log_tail(self.log)}")
            return self._ready()

        wait_until(up, START_TIMEOUT, f"{self.name} on port {self.port}", self.log)

    def stop(self) -> None:
        """Stop the server (clients get connection errors until ``start()``)."""
        if self._process is not None:
            self._process.signal(self.stop_signal)
            self._process.stop()
            self._process = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)
