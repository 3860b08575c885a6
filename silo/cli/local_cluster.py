"""A cluster of real ``silo run`` processes on this machine, for the demo and local experiments.

Each silo is a child process (this interpreter, ``-m silo run``) in its own process group with
its log in a file, so a terminal's Ctrl-C reaches only the parent, which then decides what to
stop. ``close()`` stops every silo it started gracefully (SIGTERM: the silo writes Dead for
itself, so the table is left clean), SIGKILLs any that does not exit in time, and reaps them
all: nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from membership_tables import MembershipTable, MembershipTableData, SiloAddress, SiloStatus, TableUnavailableError
from silo.errors import SiloError

__all__ = ["LocalCluster", "LocalClusterError"]

POLL = 0.1
STOP_TIMEOUT = 10.0
"""Seconds ``close()`` gives the silos to leave gracefully before it SIGKILLs them."""


class LocalClusterError(SiloError, RuntimeError):
    """A silo exited while starting, or the silos did not become Active in time."""


class LocalCluster:
    """Silos named by the caller, on one table and cluster id, started with a preset (default ``local``)."""

    def __init__(
        self, table: MembershipTable, table_uri: str, cluster: str, log_dir: Path, preset: str = "local"
    ) -> None:
        self.table = table
        self.table_uri = table_uri
        self.cluster = cluster
        self.log_dir = log_dir
        self.preset = preset
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, names: Sequence[str], extra_args: Mapping[str, Sequence[str]] | None = None) -> None:
        """Start one silo per name at once (returns without waiting for them to join).

        ``extra_args``: more ``silo run`` arguments per name (e.g. its TLS files)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GRPC_VERBOSITY": "ERROR"}
        for name in names:
            argv = [sys.executable, "-m", "silo", "run", "--table", self.table_uri, "--cluster", self.cluster]
            argv += ["--preset", self.preset, "--name", name, *(extra_args or {}).get(name, ())]
            with (self.log_dir / f"{name}.log").open("ab") as log:
                self._processes[name] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )

    def wait_active(self, timeout: float) -> dict[str, SiloAddress]:
        """Each started silo's address once all are Active in the table; raises ``LocalClusterError``."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_running()
            with contextlib.suppress(TableUnavailableError):
                active = self.active(self.table.read_all())
                if set(self._processes) <= set(active):
                    return {name: active[name] for name in self._processes}
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"the silos were not all Active after {timeout:.0f}s; see their logs in {self.log_dir}"
                )
            time.sleep(POLL)

    def active(self, snapshot: MembershipTableData) -> dict[str, SiloAddress]:
        """Name -> address of this cluster's Active silos that this object started."""
        return {
            entry.silo_name: entry.silo_address
            for entry in snapshot.entries
            if entry.status is SiloStatus.ACTIVE and entry.silo_name in self._processes
        }

    def kill(self, name: str) -> None:
        """SIGKILL one silo's process group (no goodbye: the others must notice it died)."""
        process = self._processes[name]
        self._signal(process, signal.SIGKILL)
        process.wait()

    def close(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every silo started (SIGTERM, then SIGKILL after ``timeout`` seconds) and reap it."""
        running = [process for process in self._processes.values() if process.poll() is None]
        for process in running:
            self._signal(process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        try:
            for process in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(max(0.0, deadline - time.monotonic()))
        finally:  # also when a second Ctrl-C cuts the wait short
            for process in running:
                if process.poll() is None:
                    self._signal(process, signal.SIGKILL)
                    process.wait()

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    def _check_running(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                log = self.log_dir / f"{name}.log"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
                raise LocalClusterError(f"silo {name} exited with code {process.returncode} while starting:\n{tail}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
