"""Helpers for starting throwaway servers in tests: free ports, readiness, clean stop.

Every ``ServerProcess`` started and not yet stopped is kept in a registry, so that whatever a
fixture failed to stop can still be stopped at the end of a test run (``stop_all``, called by
``testbed.pytest_signals``), or killed at once (``kill_all``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def wait_until(condition: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``condition`` until it holds; on timeout fail with the server's log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    tail = ""
    if log is not None and log.exists():
        tail = "\n--- log tail ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}{tail}")


_started: set[ServerProcess] = set()
"""The servers started and not yet stopped, in this process."""


def stop_all(timeout: float = 10.0) -> list[ServerProcess]:
    """Stop every server started and not stopped yet; return those that were still running."""
    leftover = [server for server in list(_started) if server.running]
    for server in list(_started):
        with contextlib.suppress(subprocess.TimeoutExpired):  # unkillable: nothing more to do
            server.stop(timeout)
    return leftover


def kill_all() -> None:
    """SIGKILL every running server's process group, without waiting (safe in a signal handler)."""
    for server in list(_started):
        if server.running:
            server.signal(signal.SIGKILL)


class ServerProcess:
    """A child server process with its output in a log file; stopped by ``stop()``.

    The child gets its own process group so that ``stop()`` also ends anything it forked.
    ``prefix`` wraps the whole command, outside the switch to ``user``: ``ip netns exec NS``
    runs the server in a network namespace (that needs root, which ``runuser`` then drops).
    """

    def __init__(
        self,
        argv: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        user: str | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.log = log
        command = list(argv)
        if user is not None and os.geteuid() == 0:
            command = ["runuser", "-u", user, "--", *command]
        command = [*prefix, *command]
        self._log_file = log.open("ab")
        self.process = subprocess.Popen(
            command,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        _started.add(self)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def stop(self, timeout: float = 10.0) -> None:
        if self.running:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait(timeout)
        self._log_file.close()
        _started.discard(self)
