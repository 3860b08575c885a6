"""Real ``silo run`` processes for multi-process tests: start, kill, freeze, and read the table.

Each silo is ``python -m silo run ... --preset local`` in its own process group with its
log in a file; ``Cluster.close()`` SIGKILLs every group it started, frozen ones included,
so a failing test never leaves silos behind.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from membership_tables import (
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    open_table,
)
from membership_tables.history import HistoryRecord, load_history
from silo.membership.history_check import assert_history_ok
from silo.membership.options import SiloOptions
from testbed.services.process import ServerProcess, wait_until

ROOT = Path(__file__).resolve().parents[1]
LISTENING_RE = re.compile(r"silo (\S+@\d+) listening")
START_TIMEOUT = 60.0
POLL = 0.2
SLACK = 20.0
"""Seconds added to protocol bounds for a loaded two-core machine: a correctness bound, not a speed goal."""


def death_bound(options: SiloOptions) -> float:
    """An upper bound on how long after a silo stops answering it is declared Dead.

    Missed probes (``detection_time``), one indirect probe, one table refresh for the
    second voter to see the first vote, plus slack.
    """
    return options.detection_time + 2 * options.probe_timeout + options.table_refresh_timeout + SLACK


class SiloProcess:
    """One ``silo run`` child process."""

    def __init__(self, argv: Sequence[str], log: Path) -> None:
        self.log = log
        self.argv = list(argv)
        self._server = ServerProcess(argv, log, env={"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
        self.address: SiloAddress | None = None

    @property
    def pid(self) -> int:
        return self._server.process.pid

    @property
    def running(self) -> bool:
        return self._server.running

    def wait_listening(self, timeout: float = START_TIMEOUT) -> SiloAddress:
        """The address the silo logged once its server was bound."""

        def listening() -> bool:
            if not self.running:
                raise RuntimeError(f"silo exited with {self._server.process.returncode}:\n{self.log_tail()}")
            match = LISTENING_RE.search(self.log_text())
            if match is not None:
                self.address = SiloAddress.parse(match.group(1))
            return self.address is not None

        wait_until(listening, timeout, f"silo listening ({self.log.name})", self.log)
        assert self.address is not None
        return self.address

    def send(self, signum: int) -> None:
        self._server.signal(signum)

    def kill(self) -> None:
        self.send(signal.SIGKILL)

    def freeze(self) -> None:
        self.send(signal.SIGSTOP)

    def thaw(self) -> None:
        self.send(signal.SIGCONT)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self._server.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"silo {self.address} still running after {timeout}s:\n{self.log_tail()}") from None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def close(self) -> None:
        """SIGKILL the process group (frozen processes die too) and reap it."""
        if self.running:
            self.kill()
            self._server.process.wait(30)
        self._server.stop()


class Cluster:
    """Silos of one cluster id on one table URI, started with the ``local`` preset."""

    def __init__(
        self, workdir: Path, table_uri: str, cluster_id: str, log_level: str = "INFO", watch_uri: str | None = None
    ) -> None:
        """``watch_uri``: the test reads the table through this URI (another role, say) instead of ``table_uri``."""
        self.workdir = workdir
        self.table_uri = table_uri
        self.watch_uri = watch_uri or table_uri
        self.cluster_id = cluster_id
        self.options = SiloOptions.local()
        self.log_level = log_level
        self.silos: list[SiloProcess] = []
        self.history_dir = workdir / f"history-{cluster_id}"
        """Every silo appends its versioned writes here (``--history-file``); see ``check_history``."""
        self._table: MembershipTable | None = None

    @property
    def table(self) -> MembershipTable:
        if self._table is None:
            self._table = open_table(self.watch_uri, self.cluster_id)
        return self._table

    def start(self, count: int, *extra_args: str) -> list[SiloProcess]:
        """Start ``count`` silos at once (``extra_args`` go to ``silo run``) and wait until each has bound its port."""
        started = [self._spawn(extra_args) for _ in range(count)]
        for silo in started:
            silo.wait_listening()
        return started

    def start_active(self, count: int, *extra_args: str, timeout: float = START_TIMEOUT) -> list[SiloProcess]:
        """``start`` and wait until every new silo is Active in the table."""
        started = self.start(count, *extra_args)
        self.wait_statuses(started, SiloStatus.ACTIVE, timeout)
        return started

    def launch(self, *extra_args: str) -> SiloProcess:
        """Start one silo and return at once (for a silo expected to exit before it listens)."""
        return self._spawn(extra_args)

    def _spawn(self, extra_args: Sequence[str]) -> SiloProcess:
        name = f"{self.cluster_id}-{len(self.silos)}"
        argv = [
            sys.executable,
            "-m",
            "silo",
            "run",
            "--table",
            self.table_uri,
            "--cluster",
            self.cluster_id,
            "--preset",
            "local",
            "--name",
            name,
            "--log-level",
            self.log_level,
            "--history-file",
            str(self.history_dir / f"{name}.jsonl"),
            *extra_args,
        ]
        silo = SiloProcess(argv, self.workdir / f"{name}.log")
        self.silos.append(silo)
        return silo

    def read(self) -> MembershipTableData:
        return self.table.read_all()

    def row(self, silo: SiloProcess) -> MembershipEntry:
        assert silo.address is not None
        found = self.read().get(silo.address)
        assert found is not None, f"no row for {silo.address}"
        return found[0]

    def statuses(self, silos: Sequence[SiloProcess]) -> list[SiloStatus | None]:
        snapshot = self.read()
        result: list[SiloStatus | None] = []
        for silo in silos:
            found = snapshot.get(silo.address) if silo.address is not None else None
            result.append(found[0].status if found is not None else None)
        return result

    def wait_for(self, condition: Callable[[MembershipTableData], bool], timeout: float, what: str) -> float:
        """Poll the table until ``condition`` holds; returns the seconds it took. Fails with the table and logs."""
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            try:
                if condition(self.read()):
                    return time.monotonic() - started
            except TableUnavailableError:
                pass
            time.sleep(POLL)
        raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}\n{self.describe()}")

    def wait_statuses(self, silos: Sequence[SiloProcess], status: SiloStatus, timeout: float) -> float:
        names = ", ".join(str(silo.address) for silo in silos)

        def reached(snapshot: MembershipTableData) -> bool:
            rows = [snapshot.get(silo.address) if silo.address is not None else None for silo in silos]
            return all(row is not None and row[0].status == status for row in rows)

        return self.wait_for(reached, timeout, f"{status.name} for {names}")

    def describe(self) -> str:
        """The table and each silo's log tail, for failure messages."""
        try:
            rows = "\n".join(
                f"  {entry.silo_address} {entry.status.name} votes={[str(v) for v, _ in entry.suspect_times]}"
                for entry in self.read().entries
            )
        except TableUnavailableError as exc:
            rows = f"  (table unavailable: {exc})"
        logs = "\n".join(f"--- {silo.log.name} (running={silo.running})\n{silo.log_tail(15)}" for silo in self.silos)
        return f"table:\n{rows}\n{logs}"

    def history(self) -> list[HistoryRecord]:
        return load_history(self.history_dir) if self.history_dir.exists() else []

    def check_history(self, min_voters: int = 1, protected: Sequence[SiloProcess] = ()) -> None:
        """Fail if the recorded writes break an invariant of the protocol (``silo.membership.history_check``).

        ``protected``: silos that must never have been declared Dead by another silo.
        """
        addresses = [silo.address for silo in protected if silo.address is not None]
        assert_history_ok(self.history(), min_voters=min_voters, protected=addresses)

    def close(self) -> None:
        for silo in self.silos:
            silo.close()


@contextlib.contextmanager
def sqlite_cluster(workdir: Path, cluster_id: str) -> Iterator[Cluster]:
    """A ``Cluster`` on a SQLite table in ``workdir``, every silo stopped afterwards, pass or fail."""
    cluster = Cluster(workdir, f"sqlite:///{workdir / 'membership.db'}", cluster_id)
    try:
        yield cluster
    finally:
        cluster.close()
