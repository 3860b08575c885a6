"""A cluster of real ``silo run`` processes, one per host of a ``NetworkLab``, for network-fault tests.

Why: on loopback every silo shares one network stack, so a partition, a one-way cut or packet
loss between two silos cannot be made. Here each silo runs inside its own lab host (a network
namespace, ``testbed/netfaults/lab.py``), listens on ``<host address>:PORT`` and reaches its peers
only through the lab's bridge, where ``NetworkLab.partition``/``block``/``isolate``/``set_loss``
cut or thin the links. All silos use the same fixed port: each host has its own stack.

By default the membership table is one SQLite file in the test's directory. The filesystem is
shared by every namespace, so **the table stays reachable from every side of any partition**: a
network fault cuts silos from each other, never from the table. That is deliberately the
scenario of the bug report: in a partition, both sides keep voting into the same table and race
to declare the other side Dead, and only the failure detector's rules decide who wins.

``NetCluster(workdir, table="postgres")`` puts the table on the network instead: a throwaway
PostgreSQL server (``testbed/services/postgres.py``) runs inside a lab host of its own
(``table_host``, named ``pg``, added before the silos: 10.213.0.1) and the silos connect to it
over the bridge (``postgresql+psycopg://postgres@10.213.0.1:PORT/...``). Then a fault cuts silos
from the table as well: ``lab.isolate(silo_host)`` cuts it from its peers and the table,
``lab.partition([silo_host], [cluster.table_host])`` from the table only,
``lab.partition(cluster.hosts, [cluster.table_host])`` takes the table away from everyone. The
test itself reads the table through the server's unix socket (``observer_uri``), which no lab
fault cuts.

Every silo records its versioned writes (``--history-file <workdir>/history/<name>.jsonl``) and
what it may serve (``--claims-file <workdir>/claims/<name>.jsonl``), so a test can check the
whole run against the protocol's invariants and that no key ever had two owners at once
(``check_history``, which also runs ``check_claims``), not just the final table. Processes run
in their own process groups; ``close()`` SIGKILLs them all and deletes the lab, which also kills
anything left in its namespaces.

Usage::

    with NetCluster(tmp_path) as cluster:
        silos = cluster.start(5)                    # s1..s5, all Active
        cluster.lab.partition(cluster.hosts[:3], cluster.hosts[3:])
        cluster.wait_for(lambda view: view.all_status(["s4", "s5"], SiloStatus.DEAD), 30, "minority Dead")
        cluster.check_history(min_voters=2, protected=["s1", "s2", "s3"])
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

import pytest

from membership_tables import (
    MembershipTable,
    MembershipTableData,
    MembershipTableError,
    SiloAddress,
    SiloStatus,
    open_table,
)
from membership_tables.history import load_history
from silo.membership.history_check import assert_history_ok
from silo.membership.options import SiloOptions
from silo.runtime.claims import ClaimsFile, ServingClaim, check_claims, load_claims
from testbed.cluster_harness import START_TIMEOUT, SiloProcess
from testbed.netfaults import Host, NetworkLab, lab_unavailable_reason
from testbed.services.postgres import PostgresServer

PORT = 11111
"""Every silo listens on this port of its own host's address (each host has its own stack)."""

KILLED_EXIT_WAIT = 10.0
"""Seconds ``replace_silo`` waits for a silo whose host was just killed to be reported exited: the
kill leaves the namespace empty while the process may still be exiting (under the suite's load a
replacement found it "still running")."""

CLUSTER_ID = "net"
TABLE_HOST = "pg"
"""Name of the lab host that runs the PostgreSQL table (``table="postgres"``)."""
TableKind = Literal["sqlite", "postgres"]
POLL = 0.2
"""Seconds between table reads while waiting; a table read is a few milliseconds of SQLite."""

STOP_TIMEOUT = 20.0
"""Seconds a SIGTERMed silo gets to leave gracefully (ShuttingDown, then Dead) before SIGKILL."""

CLOSED_PORT = 9
"""A port nothing in the lab listens on: a TCP connect there is answered by the kernel's RST, so
probing it tests the link both ways (SYN there, RST back) without ever touching a silo."""

REACH_TIMEOUT = 0.5
"""Seconds a connect may go unanswered before the link counts as cut (a healthy veth LAN: ~0.1 ms)."""

_CONNECTS = """
import socket, sys
host, port, timeout, attempts = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
unanswered = 0
for _ in range(attempts):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except ConnectionRefusedError:
        pass  # the RST came back: the link works both ways
    except OSError:
        unanswered += 1  # timed out: the SYN or the RST was dropped
print(unanswered)
"""

HEALTH_CHECK = """
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as channel:
    response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10.0)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
"""
"""Prints the gRPC health status of the server at ``argv[1]`` (``host:port``); run it on a lab host."""


def skip_unless_lab_available() -> None:
    """``pytest.skip`` with the reason when network namespaces or iptables cannot be used here."""
    reason = lab_unavailable_reason()
    if reason is not None:
        pytest.skip(f"network lab unavailable: {reason}")


NOTABLE_LOG_MARKS = (" WARNING ", " ERROR ", "not running for", " votes against ")
"""Log lines worth showing when a history check fails: warnings and errors, the pauses a silo
noticed in itself, and each vote with the silence and health behind it."""


class NetSilo(SiloProcess):
    """One ``silo run`` process inside one lab host; its silo name is the host's name."""

    def __init__(self, host: Host, argv: Sequence[str], log: Path, claims_file: Path) -> None:
        super().__init__(host.command(argv), log)  # ip netns exec execs in place: the pid is the silo's
        self.host = host
        self.name = host.name
        self._claims_file = claims_file

    def kill(self) -> None:
        """SIGKILL the silo; once it is reaped, record in its claims file that it serves nothing from then on.

        A killed process cannot write that claim itself, and its last one stays valid until its
        lease's end; its peers rightly take its keys over as soon as its endpoint refuses
        connections, which is before then. The harness knows when the process was gone (the
        reap, a little after the death: never earlier), so ``check_claims`` sees what happened."""
        super().kill()
        self.wait_exit(STOP_TIMEOUT)
        if self.address is not None:
            reaped = time.monotonic()
            claims = ClaimsFile(self._claims_file)
            try:
                claims.append(ServingClaim(silo=str(self.address), at=reaped, ring=(), valid_until=reaped))
            finally:
                claims.close()

    def __repr__(self) -> str:
        return f"NetSilo({self.name!r}, {self.address}, running={self.running})"

    @property
    def exit_code(self) -> int | None:
        """The process's exit code, or ``None`` while it runs."""
        return self._server.process.poll()


@dataclass(frozen=True)
class ClusterView:
    """One poll of the cluster: a table read plus every process's state, keyed by silo name."""

    table: MembershipTableData
    statuses: Mapping[str, SiloStatus | None]
    """Each silo's row status; ``None`` if it has no row (or its address is not known yet)."""
    exit_codes: Mapping[str, int | None]
    """Each silo's exit code; ``None`` while it runs."""

    def all_status(self, names: Iterable[str], status: SiloStatus) -> bool:
        return all(self.statuses[name] is status for name in names)

    def all_running(self, names: Iterable[str]) -> bool:
        return all(self.exit_codes[name] is None for name in names)

    def all_exited(self, names: Iterable[str], code: int) -> bool:
        return all(self.exit_codes[name] == code for name in names)

    def dead(self) -> list[str]:
        """Names of the silos whose row is Dead."""
        return [name for name, status in self.statuses.items() if status is SiloStatus.DEAD]


Condition = Callable[[ClusterView], bool]


def active_and_running(names: Sequence[str]) -> Condition:
    """Every silo of ``names`` Active in the table, and its process running."""
    return lambda view: view.all_status(names, SiloStatus.ACTIVE) and view.all_running(names)


def nobody_dead(view: ClusterView) -> bool:
    """No row Dead and every process running."""
    return not view.dead() and view.all_running(view.statuses)


class NetCluster:
    """A ``NetworkLab`` plus one silo per lab host, all on one table (see the module docstring).

    ``table``: ``"sqlite"`` (a file every namespace shares, never cut) or ``"postgres"`` (a
    PostgreSQL server on the lab host ``table_host``, reached over the lab's network).

    Skips the test (``pytest.skip``) if the lab cannot run here. Use as a context manager, or
    call ``close()``: it kills every silo, stops the table's server and deletes the lab even
    after a failed test.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        cluster_id: str = CLUSTER_ID,
        port: int = PORT,
        log_level: str = "INFO",
        extra_args: Sequence[str] = (),
        table: TableKind = "sqlite",
    ) -> None:
        skip_unless_lab_available()
        self.workdir = workdir
        self.cluster_id = cluster_id
        self.port = port
        self.log_level = log_level
        self.extra_args = list(extra_args)
        """Passed to every ``silo run`` (e.g. ``["--set", "probe_timeout=1s"]``)."""
        self.options = SiloOptions.local()
        """The options every silo runs with (the ``local`` preset), for tests that derive bounds."""
        self.history_dir = workdir / "history"
        self.claims_dir = workdir / "claims"
        self.claims_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.silos: list[NetSilo] = []
        self._table: MembershipTable | None = None
        self.table_host: Host | None = None
        """The lab host the table's server runs on (``table="postgres"``); None for SQLite."""
        self.postgres: PostgresServer | None = None
        self.lab = NetworkLab(f"net-{cluster_id}")
        try:
            self.table_uri, self.observer_uri = self._start_table(table)
        except BaseException:
            self.close()
            raise

    def _start_table(self, table: TableKind) -> tuple[str, str]:
        """Start the table; return (the URI the silos use, the URI the test reads it through)."""
        if table == "sqlite":
            uri = f"sqlite:///{self.workdir / 'membership.db'}"
            return uri, uri
        host = self.table_host = self.lab.add_host(TABLE_HOST)
        server = self.postgres = PostgresServer(namespace=host.namespace, listen_address=host.address)
        server.start()
        server.create_database(self.cluster_id)
        return server.database_url(self.cluster_id), server.socket_url(self.cluster_id)

    def __enter__(self) -> NetCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # --- starting ------------------------------------------------------------------

    def start(self, count: int, timeout: float = START_TIMEOUT) -> list[NetSilo]:
        """Add ``count`` hosts (``s<k>``, numbered on) with one silo each; wait until all are Active.

        The silos start at once, as a cluster restart would; each binds its port first, then joins
        by pinging every Active silo over the lab, so reaching Active also proves that gRPC flows
        between the namespaces.
        """
        started = [self._spawn(self.lab.add_host(f"s{len(self.silos) + 1}")) for _ in range(count)]
        for silo in started:
            silo.wait_listening(timeout)
        names = [silo.name for silo in started]
        self.wait_for(
            lambda view: view.all_status(names, SiloStatus.ACTIVE),
            timeout,
            f"{', '.join(names)} Active",
            invariant=lambda view: view.all_running(names),
            invariant_what="every new silo running (a silo that cannot join exits with 4 or 5)",
        )
        return started

    def replace_silo(self, name: str, timeout: float = START_TIMEOUT) -> NetSilo:
        """Start a new silo (a new generation) on the host of the exited silo ``name``, in its place
        (``silos`` keeps its order); wait until it is Active. The old log is kept as ``NAME.<k>.log``."""
        old = self.silo(name)
        if old.running:  # a SIGKILLed process leaves its namespace before its exit is reported
            with contextlib.suppress(AssertionError):
                old.wait_exit(KILLED_EXIT_WAIT)
        if old.running:
            raise ValueError(f"{name} is still running; kill it (or its host) before starting another in its place")
        earlier = len(list(self.log_dir.glob(f"{name}.*.log"))) + 1
        old.log.rename(self.log_dir / f"{name}.{earlier}.log")
        silo = self._spawn(old.host)
        self.silos.remove(silo)  # _spawn appended it; it takes the old one's place
        self.silos[self.silos.index(old)] = silo
        silo.wait_listening(timeout)
        self.wait_for(
            lambda view: view.statuses[name] is SiloStatus.ACTIVE,
            timeout,
            f"{name} Active again",
            invariant=lambda view: view.all_running([name]),
            invariant_what=f"the new {name} running",
        )
        return silo

    def _spawn(self, host: Host) -> NetSilo:
        argv = [
            sys.executable,
            *("-m", "silo", "run"),
            *("--table", self.table_uri),
            *("--cluster", self.cluster_id),
            *("--host", host.address),
            *("--port", str(self.port)),
            *("--preset", "local"),
            *("--name", host.name),
            *("--history-file", str(self.history_dir / f"{host.name}.jsonl")),
            *("--claims-file", str(self.claims_dir / f"{host.name}.jsonl")),
            *("--log-level", self.log_level),
            *self.extra_args,
        ]
        silo = NetSilo(host, argv, self.log_dir / f"{host.name}.log", self.claims_dir / f"{host.name}.jsonl")
        self.silos.append(silo)
        return silo

    # --- lookups -------------------------------------------------------------------

    @property
    def hosts(self) -> list[Host]:
        """The lab hosts of the silos, in start order (``hosts[i]`` runs ``silos[i]``)."""
        return [silo.host for silo in self.silos]

    @property
    def names(self) -> list[str]:
        return [silo.name for silo in self.silos]

    def silo(self, name: str) -> NetSilo:
        for silo in self.silos:
            if silo.name == name:
                return silo
        raise KeyError(f"no silo named {name!r}; have {self.names}")

    def host(self, name: str) -> Host:
        """The lab host of the silo ``name``, or the table's host (``TABLE_HOST``)."""
        if self.table_host is not None and name == self.table_host.name:
            return self.table_host
        return self.silo(name).host

    def hosts_of(self, names: Iterable[str]) -> list[Host]:
        return [self.host(name) for name in names]

    def name_of(self, address: SiloAddress) -> str:
        """The silo name of ``address`` (for messages), or the address itself if it is none of ours."""
        for silo in self.silos:
            if silo.address == address:
                return silo.name
        return str(address)

    # --- the table and the processes ------------------------------------------------

    @property
    def table(self) -> MembershipTable:
        if self._table is None:
            self._table = open_table(self.observer_uri, self.cluster_id)
        return self._table

    def read(self) -> MembershipTableData:
        return self.table.read_all()

    def view(self) -> ClusterView:
        """Read the table once and pair it with every process's state."""
        table = self.read()
        statuses: dict[str, SiloStatus | None] = {}
        for silo in self.silos:
            found = table.get(silo.address) if silo.address is not None else None
            statuses[silo.name] = found[0].status if found is not None else None
        return ClusterView(table, statuses, self.exit_codes())

    def statuses(self) -> dict[str, SiloStatus | None]:
        """Each silo's row status by name (``None``: no row)."""
        return dict(self.view().statuses)

    def exit_codes(self) -> dict[str, int | None]:
        """Each silo's exit code by name (``None``: still running)."""
        return {silo.name: silo.exit_code for silo in self.silos}

    def wait_for(
        self,
        condition: Condition,
        timeout: float,
        what: str,
        *,
        invariant: Condition | None = None,
        invariant_what: str = "the invariant",
    ) -> float:
        """Poll until ``condition`` holds; return the seconds it took, or fail with the table and logs.

        ``invariant`` must hold at every poll until then: the wait fails at once when it breaks
        (e.g. a silo that must survive was declared Dead), instead of running out the timeout.
        """
        started = time.monotonic()
        deadline = started + timeout
        while True:
            try:
                view = self.view()
            except MembershipTableError:  # a read that lost to a writer's lock: poll again
                view = None
            if view is not None:
                if invariant is not None and not invariant(view):
                    elapsed = time.monotonic() - started
                    raise AssertionError(
                        f"{invariant_what} broke after {elapsed:.1f}s, while waiting for {what}\n{self.describe()}"
                    )
                if condition(view):
                    return time.monotonic() - started
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}\n{self.describe()}")
            time.sleep(POLL)

    def wait_until_dead(self, victim: str, others: Sequence[str], what: str, timeout: float) -> None:
        """Wait until ``victim`` is Dead in the table, the ``others`` Active and running throughout."""
        self.wait_for(
            lambda view: view.statuses[victim] is SiloStatus.DEAD,
            timeout,
            f"{what} {victim} Dead",
            invariant=active_and_running(others),
            invariant_what="the other silos Active and running",
        )

    def hold(self, condition: Condition, duration: float, what: str) -> None:
        """Poll for ``duration`` seconds and fail at the first poll where ``condition`` does not hold."""
        deadline = time.monotonic() + duration
        started = time.monotonic()
        while time.monotonic() < deadline:
            try:
                view = self.view()
            except MembershipTableError:
                time.sleep(POLL)
                continue
            if not condition(view):
                elapsed = time.monotonic() - started
                raise AssertionError(
                    f"{what} stopped holding after {elapsed:.1f}s of {duration:.0f}s\n{self.describe()}"
                )
            time.sleep(POLL)

    def unanswered(self, source: str, target: str, attempts: int, timeout: float = REACH_TIMEOUT) -> int:
        """How many of ``attempts`` TCP connects from ``source``'s host to ``target``'s got no answer.

        Connects go to ``CLOSED_PORT``, so the answer is the kernel's RST and the silos never see
        them. Proves a lab fault is in effect (or healed) independently of the silos, so that a
        failed scenario is blamed on the protocol only when the network did what the test meant.
        """
        argv = [sys.executable, "-I", "-c", _CONNECTS, self.host(target).address, str(CLOSED_PORT)]
        result = self.host(source).run([*argv, str(timeout), str(attempts)], timeout=attempts * timeout + 30)
        assert result.returncode == 0, f"connect probe from {source} failed: {result.stderr}"
        return int(result.stdout)

    def reachable(self, source: str, target: str) -> bool:
        """True if a packet from ``source``'s host reaches ``target``'s and the answer comes back."""
        return self.unanswered(source, target, attempts=1) == 0

    def describe(self) -> str:
        """The table (voters by name), exit codes and every silo's log tail, for failure messages."""
        try:
            table = self.read()
            rows = "\n".join(
                f"  {self.name_of(entry.silo_address)} {entry.silo_address} {entry.status.name} "
                f"votes={[self.name_of(voter) for voter, _ in entry.suspect_times]}"
                for entry in table.entries
            )
            rows = f"table v{table.version.version}:\n{rows}"
        except MembershipTableError as exc:
            rows = f"table unavailable: {exc}"
        logs = "\n".join(
            f"--- {silo.name} ({silo.host.address}) exit={silo.exit_code}\n{silo.log_tail(12)}" for silo in self.silos
        )
        return f"{rows}\n{logs}"

    # --- history and shutdown -------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM every running silo at once and wait for them; SIGKILL those that do not leave.

        A graceful stop lets each silo finish its in-flight table write and record it, and writes
        only the silo's own ShuttingDown and Dead rows, which the history checker allows.
        """
        running = [silo for silo in self.silos if silo.running]
        for silo in running:
            silo.send(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for silo in running:
            try:
                silo.wait_exit(max(0.1, deadline - time.monotonic()))
            except AssertionError:
                silo.kill()

    def check_history(self, min_voters: int, protected: Collection[str] = ()) -> None:
        """Stop the silos, then fail if their recorded writes break a protocol invariant.

        Stopping first matters: a running silo may have committed a write and not yet recorded
        it, which would look like a gap in the versions. ``protected``: names of the silos that
        must never have been declared Dead by another silo. ``min_voters``: the smallest legal
        death quorum of the run (``num_votes_for_death_declaration`` capped at a majority).
        """
        self.stop()
        addresses = []
        for name in protected:
            address = self.silo(name).address
            assert address is not None, f"{name} never logged its address"
            addresses.append(address)
        records = load_history(self.history_dir) if self.history_dir.exists() else []
        assert records, f"no history recorded in {self.history_dir}"
        try:
            assert_history_ok(records, min_voters=min_voters, protected=addresses)
        except AssertionError as violations:
            named = [silo for silo in self.silos if silo.address is not None and str(silo.address) in str(violations)]
            raise AssertionError(f"{violations}\n{self.notable_log_lines(named)}") from None
        self.check_claims()

    @staticmethod
    def notable_log_lines(silos: Collection[NetSilo], limit: int = 20) -> str:
        """The last lines of each of ``silos``' logs that say what it went through (``NOTABLE_LOG_MARKS``):
        for a silo declared Dead wrongly and its voters (the log tails after ``stop`` show only the
        shutdown)."""
        parts = []
        for silo in silos:
            lines = [line for line in silo.log_text().splitlines() if any(mark in line for mark in NOTABLE_LOG_MARKS)]
            parts.append(f"--- {silo.name} ({silo.address}), notable log lines:\n" + "\n".join(lines[-limit:]))
        return "\n".join(parts)

    def check_claims(self) -> None:
        """Fail if two silos could ever have served the same key at the same moment: the silos'
        serving claims (``--claims-file``, on this machine's monotonic clock) never overlap."""
        claims = load_claims(sorted(self.claims_dir.glob("*.jsonl")))
        assert claims, f"no serving claims recorded in {self.claims_dir}"
        overlaps = check_claims(claims)
        assert not overlaps, f"{len(overlaps)} overlaps of ownership, first: " + "; ".join(overlaps[:3])

    def close(self) -> None:
        """SIGKILL every silo (its process group), close the table, stop its server, delete the lab;
        safe to call twice."""
        try:
            for silo in self.silos:
                with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                    silo.close()
            if self._table is not None:
                self._table.close()
                self._table = None
        finally:
            try:
                if self.postgres is not None:
                    self.postgres.close()  # stops it and removes its data dir
                    self.postgres = None
            finally:
                self.lab.close()
