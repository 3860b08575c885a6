"""The ZooKeeper baseline inside a ``NetworkLab``: a server on a lab host, members and an observer.

Why: the accuracy benchmark's real-network runs thin every link of the lab with iptables
loss (``NetworkLab.set_loss``) and must put ZooKeeper through exactly the same network as the
silos. On loopback a ZooKeeper client cannot lose a packet, so here everything that talks to
ZooKeeper over the network sits in a lab namespace:

* ``LabZooKeeper``: a standalone server (Debian's jars, as ``testbed/services/zookeeper.py``
  runs them) on a lab host of its own, listening on every address of that host (its lab
  address for the members, its loopback for the observer). Its host gets the same loss as
  every other host, so a member's request and the server's answer each cross one lossy hop,
  as a silo's probe and its answer do.
* ``LabZkGroup``: one member process per given lab host (``python -m benchmarks.zk_netns
  member``; the accuracy benchmark puts one beside each silo, so a member and its silo share
  their host's loss), each holding an ephemeral znode in its own kazoo session with the
  session timeout the benchmark asks for. kazoo's defaults otherwise (connection retry
  0.1 s doubling, read timeout 2/3 of the session): the membership a Python user gets from
  kazoo. When its session expires the member opens a new one and registers again, so the
  group keeps N members for the whole run and every expiration is counted, not just the
  first (as the silo side restarts a silo that was declared dead).
* an observer (``python -m benchmarks.zk_netns observe``) on the server's own host, connected
  over loopback: iptables loss spares ``lo``, so the observer's session never suffers the
  loss it measures. It keeps an ``exists`` watch on every member's znode and logs each
  deletion with its wall time. A deletion while the member's process lives (nobody is
  killed during a run) is a session expiration: a false positive of ZooKeeper's detector.

Two more counts cross-check the observer: the server's own ``Expiring session 0x...`` log
lines for the members' sessions, and the sessions each member reports having registered
with (every session after the first replaced an expired one).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from benchmarks.common import ROOT, wall
from testbed.netfaults import Host
from testbed.services.process import ServerProcess, wait_until
from testbed.services.zookeeper import JARS, JAVA_DIR, JVM_FLAGS, MAIN_CLASS, write_server_files

PORT = 2181
"""The client port on the server's host (each lab host has its own network stack)."""
START_TIMEOUT = 60.0
REGISTER_TIMEOUT = 60.0
EXPIRING_RE = re.compile(r"Expiring session 0x([0-9a-f]+), timeout of (\d+)ms exceeded")

_SRVR = """
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1.0) as sock:
        sock.sendall(b"srvr")
        print(b"".join(iter(lambda: sock.recv(4096), b"")).decode(errors="replace"))
except OSError:
    pass
"""


def zookeeper_unavailable_reason() -> str | None:
    """None if the ZooKeeper jars and java are installed, else why not (without failing like pytest)."""
    jars = sorted(Path("/usr/share/zookeeper").glob("*.jar")) + [JAVA_DIR / name for name in JARS]
    missing = [str(jar) for jar in jars if not jar.exists()]
    if shutil.which("java") is None:
        missing.append("java")
    if missing:
        return f"ZooKeeper or Java not installed (missing {', '.join(missing)}); run `make system-packages`"
    return None


def _classpath() -> str:
    jars = sorted(Path("/usr/share/zookeeper").glob("*.jar")) + [JAVA_DIR / name for name in JARS]
    return ":".join(str(jar) for jar in jars)


class LabZooKeeper:
    """One standalone ZooKeeper server inside lab host ``host``; ``hosts`` is the members' connect string."""

    def __init__(self, host: Host, workdir: Path) -> None:
        self.host = host
        self.workdir = workdir
        self.log = workdir / "zookeeper.log"
        self._process: ServerProcess | None = None
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        # No clientPortAddress: the server must answer on the lab address (members) and on
        # loopback (the observer); the namespace has no other interface.
        self._config, self._log4j = write_server_files(workdir, PORT, self.log, client_address=None)

    @property
    def hosts(self) -> str:
        """The connect string for clients on other lab hosts."""
        return f"{self.host.address}:{PORT}"

    @property
    def pid(self) -> int | None:
        return self._process.process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the JVM inside the host and return once it serves (checked from inside the host)."""
        argv = [
            "java",
            *JVM_FLAGS,
            f"-Dlog4j.configuration=file:{self._log4j}",
            "-Dzookeeper.jmx.log4j.disable=true",
            *("-cp", _classpath(), MAIN_CLASS, str(self._config)),
        ]
        self._process = ServerProcess(self.host.command(argv), self.workdir / "zookeeper.out")
        wait_until(self._serving, timeout, f"ZooKeeper to serve in {self.host.name}", self.log)

    def _serving(self) -> bool:
        if not self.running:
            output = (self.workdir / "zookeeper.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"ZooKeeper exited during start-up; see {self.log}\n{output}")
        answer = self.host.run([sys.executable, "-I", "-c", _SRVR, str(PORT)], timeout=10).stdout
        return "Mode: standalone" in answer

    def expired_sessions(self) -> list[str]:
        """Hex ids of every session the server has expired so far (from its log)."""
        if not self.log.exists():
            return []
        return [match.group(1) for match in EXPIRING_RE.finditer(self.log.read_text(errors="replace"))]

    def stop(self) -> None:
        if self._process is not None:
            self._process.signal(signal.SIGKILL)  # throwaway data: no need for a clean shutdown
            self._process.stop()
            self._process = None


def read_events(log: Path) -> list[dict[str, Any]]:
    """The JSON event lines of a member's or the observer's log (kazoo's own log lines are skipped)."""
    events = []
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
    return events


@dataclass
class GroupTally:
    """What the ZooKeeper side did up to a cut-off time."""

    expired: dict[str, int] = field(default_factory=dict)
    """Per member: znode deletions the observer saw (each one a live member's session expired)."""
    server_expired: int = 0
    """The server's ``Expiring session`` lines for the sessions the members registered in. Can
    be lower than the observer's count: a member whose ``create`` succeeded but whose answer was
    lost with the connection never learns it registered in that session, yet its node vanishes
    when the session expires."""
    reregistered: int = 0
    """Sessions the members registered with after their first (each replaced an expired one)."""
    connection_drops: int = 0
    """Times a member's connection dropped (kazoo SUSPENDED): a drop becomes an expiry when the
    member cannot reconnect to the server within the session timeout."""
    session_timeouts_ms: list[int] = field(default_factory=list)
    """The session timeouts the server granted (distinct values)."""
    observer_disconnected: bool = False
    """The observer's own session was interrupted: its watches may have missed deletions."""
    members_exited: int = 0
    """Member processes that died (none should: a member outlives its expired sessions)."""

    @property
    def total_expired(self) -> int:
        return sum(self.expired.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "live_sessions_expired": self.total_expired,
            "expired_per_member": self.expired,
            "server_expired_member_sessions": self.server_expired,
            "members_reregistered": self.reregistered,
            "connection_drops": self.connection_drops,
            "session_timeouts_ms": self.session_timeouts_ms,
            "observer_disconnected": self.observer_disconnected,
            "members_exited": self.members_exited,
        }


class LabZkGroup:
    """One ZooKeeper member per lab host (named after the host) and an observer on the server's host."""

    def __init__(
        self, server: LabZooKeeper, hosts: Sequence[Host], group: str, session_timeout: float, workdir: Path
    ) -> None:
        self.server = server
        self.hosts = list(hosts)
        self.group = group
        self.session_timeout = session_timeout
        self.workdir = workdir
        self.members: dict[str, ServerProcess] = {}
        self.observer: ServerProcess | None = None
        self.killed: dict[str, float] = {}
        """Members killed on purpose, with the wall time of the SIGKILL."""
        workdir.mkdir(parents=True, exist_ok=True)

    def _spawn(self, host: Host, name: str, *args: str) -> ServerProcess:
        argv = [sys.executable, "-m", "benchmarks.zk_netns", *args]
        env = {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        return ServerProcess(host.command(argv), self.workdir / f"{name}.log", env=env)

    def start(self, timeout: float = REGISTER_TIMEOUT) -> None:
        """Start the observer, then every member; return once each member has registered its znode."""
        names = [host.name for host in self.hosts]
        local = f"127.0.0.1:{PORT}"
        self.observer = self._spawn(self.server.host, "observer", "observe", local, self.group, *names)
        observer_log = self.workdir / "observer.log"
        wait_until(lambda: self._has_event(observer_log, "watching"), timeout, "the ZooKeeper observer", observer_log)
        for host in self.hosts:
            self.members[host.name] = self._spawn(
                host, host.name, "member", self.server.hosts, f"{self.group}/{host.name}", str(self.session_timeout)
            )
        wait_until(self._all_registered, timeout, f"{len(names)} ZooKeeper members to register")

    def _has_event(self, log: Path, kind: str) -> bool:
        process = self.observer if log.name == "observer.log" else self.members.get(log.stem)
        if process is not None and not process.running:
            raise RuntimeError(f"{log.stem} exited; see {log}\n{log.read_text(errors='replace')[-2000:]}")
        return any(event["event"] == kind for event in read_events(log))

    def _all_registered(self) -> bool:
        return all(self._has_event(self.workdir / f"{name}.log", "registered") for name in self.members)

    def pids(self) -> dict[str, int]:
        """Pid of each running member (``ip netns exec`` execs in place: the pid is the member's)."""
        return {name: process.process.pid for name, process in self.members.items() if process.running}

    def kill(self, name: str) -> float:
        """SIGKILL member ``name`` now; returns the wall time. Its session's expiry from then on is the
        detection, not a false one (``tally`` leaves it out)."""
        killed_at = wall()
        self.killed[name] = killed_at
        self.members[name].signal(signal.SIGKILL)
        return killed_at

    def registered_at(self, name: str, when: float) -> bool:
        """Whether member ``name``'s znode existed at wall time ``when``, as the observer saw it (under heavy loss a
        member spends part of its time between an expired session and its next registration)."""
        changes = [e["event"] for e in read_events(self.workdir / "observer.log")
                   if e["event"] in ("created", "deleted") and e.get("member") == name and e["t"] <= when]  # fmt: skip
        return bool(changes) and changes[-1] == "created"

    def expired_after(self, name: str, bound: float) -> float | None:
        """Seconds from killed member ``name``'s kill to the observer's sight of its znode's deletion,
        waiting up to ``bound`` seconds after the kill; None if not seen by then."""
        killed_at = self.killed[name]

        def deleted() -> float | None:
            times = [e["t"] for e in read_events(self.workdir / "observer.log")
                     if e["event"] == "deleted" and e["member"] == name and e["t"] >= killed_at]  # fmt: skip
            return min(times) - killed_at if times else None

        while (found := deleted()) is None and wall() < killed_at + bound:
            time.sleep(0.1)
        return found

    def _counted(self, name: str, event: dict[str, Any]) -> bool:
        """Whether ``event`` (about member ``name``) happened while ``name`` was alive: a false expiry can only
        happen then."""
        return name not in self.killed or event["t"] < self.killed[name]

    def tally(self, until: float) -> GroupTally:
        """Count expirations up to wall time ``until`` (read the server log at the cut-off, before killing anyone).

        A killed member's deletion after its kill is left out, and so is the session it held at the kill
        (whose expiry in the server's log is the detection)."""
        tally = GroupTally()
        observer = read_events(self.workdir / "observer.log")
        for name in self.members:
            tally.expired[name] = sum(
                1
                for e in observer
                if e["event"] == "deleted" and e["member"] == name and e["t"] <= until and self._counted(name, e)
            )
        tally.observer_disconnected = any(e["event"] == "state" and e["state"] != "CONNECTED" for e in observer)
        sessions: set[str] = set()
        timeouts: set[int] = set()
        for name in self.members:
            events = [e for e in read_events(self.workdir / f"{name}.log") if e["t"] <= until]
            registered = [e for e in events if e["event"] == "registered"]
            tally.connection_drops += sum(1 for e in events if e["event"] == "state" and e["state"] == "SUSPENDED")
            tally.reregistered += max(0, len(registered) - 1)
            sessions.update(e["session"] for e in registered)
            timeouts.update(int(e["timeout_ms"]) for e in registered)
            if name in self.killed and registered:
                sessions.discard(registered[-1]["session"])
        tally.server_expired = sum(1 for session in self.server.expired_sessions() if session in sessions)
        tally.session_timeouts_ms = sorted(timeouts)
        tally.members_exited = sum(
            not process.running for name, process in self.members.items() if name not in self.killed
        )
        return tally

    def close(self) -> None:
        for process in [*self.members.values(), *([self.observer] if self.observer else [])]:
            process.signal(signal.SIGKILL)
            process.stop()


# --- the processes ------------------------------------------------------------------


_print_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    """One JSON event line on stdout, stamped with wall time (comparable across processes)."""
    line = json.dumps({"t": time.time(), "event": event, **fields})
    with _print_lock:
        print(line, flush=True)


def _register(client: KazooClient, path: str, session: int) -> bool:
    """Create the ephemeral znode in ``session``; False if the connection failed on the way (try again).

    A create whose answer was lost with the connection leaves the node in place: it counts if its
    owner is this session. The check itself can fail with the connection too (it used to escape,
    killing the member under heavy loss, which then counted no more expiries)."""
    try:
        client.create(path, ephemeral=True, makepath=True)
    except NodeExistsError:
        try:
            stat = client.exists(path)
        except KazooException:
            return False
        return stat is not None and stat.owner_session_id == session
    except KazooException:
        return False
    return True


def run_member(hosts: str, path: str, session_timeout: float) -> int:
    """Hold an ephemeral znode at ``path``; register again in every new session after an expiry."""
    client = KazooClient(hosts=hosts, timeout=session_timeout)
    wake = threading.Event()

    def listener(state: str) -> None:
        emit("state", state=str(state))
        wake.set()

    client.add_listener(listener)
    client.start(timeout=30)
    registered: int | None = None
    while True:
        client_id = client.client_id
        session = client_id[0] if client_id else None
        if session is not None and session != registered:
            if not _register(client, path, session):
                time.sleep(0.05)
                continue
            registered = session
            # kazoo keeps the timeout the server granted (not the one asked for) in _session_timeout
            emit("registered", session=f"{session:x}", timeout_ms=int(client._session_timeout))
        wake.wait(1.0)
        wake.clear()


def run_observer(hosts: str, group: str, names: Sequence[str]) -> int:
    """Log every creation and deletion of the members' znodes (one ``exists`` watch each, re-armed)."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.add_listener(lambda state: emit("state", state=str(state)) if state != KazooState.CONNECTED else None)
    client.start(timeout=30)
    client.ensure_path(group)

    def arm(name: str) -> None:
        def watch(event: WatchedEvent) -> None:
            if event.type == EventType.DELETED:
                emit("deleted", member=name)
            elif event.type == EventType.CREATED:
                emit("created", member=name)
            with contextlib.suppress(KazooException):
                arm(name)

        client.exists(f"{group}/{name}", watch=watch)

    for name in names:
        arm(name)
    emit("watching", members=list(names))
    threading.Event().wait()
    return 0


def main(argv: Sequence[str]) -> int:
    """``member HOSTS PATH TIMEOUT`` or ``observe HOSTS GROUP NAME...``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(argv) >= 4 and argv[0] == "member":
        return run_member(argv[1], argv[2], float(argv[3]))
    if len(argv) >= 3 and argv[0] == "observe":
        return run_observer(argv[1], argv[2], argv[3:])
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
