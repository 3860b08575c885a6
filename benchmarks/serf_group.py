"""The HashiCorp Serf baseline: ``serf agent`` processes, what each of them saw, and when.

Why Serf: it is the gossip alternative to a membership table (memberlist's SWIM with Lifeguard),
and its two timing profiles show the trade-off a failure detector makes. ``local`` (probe
timeout 200 ms, suspicion multiplier 3) finds a dead member sooner than ``lan`` (500 ms, 4), and
should pay for it with false failures under packet loss. Debian's ``serf`` package provides the
agent; there is no per-field timing flag, only ``-profile``.

How the times are read: every agent's log is read through a pipe by a thread of this process,
which stamps each line with the wall time on arrival (resolution: a thread wake-up, about a
millisecond on an idle machine, more under load). The agent logs ``serf: EventMemberFailed: NAME``
the moment its own view marks NAME failed. Event handlers would be later: the agent coalesces
member events for its handlers (3 s coalesce, 1 s quiescent period, hard-coded in ``serf agent``),
so ``member-failed`` reaches a handler 1-3 s after the view changed. Polling ``serf members``
would cost a process per poll per agent. Other log lines counted: ``memberlist: Suspect NAME
has failed, no acks received`` (a probe round that found no ack: the suspicion), ``memberlist:
Marking NAME as failed, suspect timeout reached`` (the agent whose suspicion timer fired: the
declaration itself) and ``memberlist: Refuting a suspect|dead message`` (a live agent told it
was suspected or dead, answering with a higher incarnation).

Where agents run is a ``Seat``: on loopback with ports of their own (``loopback_seat``, for the
crash/hang runs of ``benchmarks.detection``), or on a ``NetworkLab`` host (``lab_seat``, for the
loss runs of ``benchmarks.accuracy``, where each profile has its own ports, so both profiles'
clusters run side by side on the same hosts and the same loss).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.common import wall
from testbed.netfaults import Host
from testbed.services.process import free_port

PROFILES = ("lan", "local")
"""The ``serf agent -profile`` values this baseline runs (``wan`` is for links between data centres)."""
PROFILE_TIMINGS: dict[str, dict[str, float]] = {
    "lan": {"probe_interval_s": 1.0, "probe_timeout_s": 0.5, "suspicion_mult": 4, "suspicion_max_timeout_mult": 6,
            "indirect_checks": 3, "gossip_interval_s": 0.2, "push_pull_interval_s": 30.0},
    "local": {"probe_interval_s": 1.0, "probe_timeout_s": 0.2, "suspicion_mult": 3, "suspicion_max_timeout_mult": 6,
              "indirect_checks": 1, "gossip_interval_s": 0.1, "push_pull_interval_s": 15.0},
}  # fmt: skip
"""memberlist's ``DefaultLANConfig`` / ``DefaultLocalConfig`` (what ``-profile`` selects), recorded with the results."""


def suspicion_timeout(profile: str, members: int) -> tuple[float, float]:
    """memberlist's suspicion timeout bounds in seconds for a cluster of ``members``: (min, max).

    ``min = suspicion_mult x max(1, log10(members)) x probe_interval``; it starts at
    ``suspicion_max_timeout_mult x min`` and falls to ``min`` as other members confirm the suspicion
    (Lifeguard).
    """
    timing = PROFILE_TIMINGS[profile]
    low = timing["suspicion_mult"] * max(1.0, math.log10(max(1, members))) * timing["probe_interval_s"]
    return low, low * timing["suspicion_max_timeout_mult"]


LAB_PORTS = {"lan": (7946, 7373), "local": (7947, 7374)}
"""Gossip and RPC ports per profile on a lab host, so both profiles' agents can share a host."""
JOIN_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0

_EVENT_RE = re.compile(r"\bserf: EventMember(Join|Failed|Leave|Update|Reap): (\S+)")
_MEMBERLIST_RE = re.compile(
    r"\bmemberlist: (?:(Suspect) (\S+) has failed|(Marking) (\S+) as failed, suspect timeout reached"
    r"|(Refuting) a (?:suspect|dead) message)"
)
KINDS = ("join", "failed", "leave", "update", "reap", "suspect", "declared", "refuted")


def serf_unavailable_reason() -> str | None:
    """None if ``serf`` is installed, else why not (for ``pytest.skip`` and benchmark notes)."""
    if shutil.which("serf") is None:
        return "serf not installed; run `make system-packages` (apt-get install serf)"
    return None


@dataclass(frozen=True)
class SerfEvent:
    """One line of interest in ``observer``'s log: ``kind`` (one of ``KINDS``) about ``member``."""

    t: float
    observer: str
    kind: str
    member: str


def parse_line(t: float, observer: str, line: str) -> SerfEvent | None:
    """The event a log line reports, or None for any other line (a refutation is about the observer itself)."""
    match = _EVENT_RE.search(line)
    if match is not None:
        return SerfEvent(t, observer, match.group(1).lower(), match.group(2))
    match = _MEMBERLIST_RE.search(line)
    if match is None:
        return None
    if match.group(1):
        return SerfEvent(t, observer, "suspect", match.group(2))
    if match.group(3):
        return SerfEvent(t, observer, "declared", match.group(4))
    return SerfEvent(t, observer, "refuted", observer)


@dataclass(frozen=True)
class Seat:
    """Where one agent runs: its gossip address, its RPC address, and the host it is launched in."""

    bind: str
    rpc: str
    host: Host | None = None

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv) if self.host is None else self.host.command(argv)


def loopback_seat() -> Seat:
    """An agent on 127.0.0.1 with a gossip port (TCP and UDP) and an RPC port of its own."""
    return Seat(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")


def lab_seat(host: Host, profile: str) -> Seat:
    """An agent on a lab host's address; RPC on the host's own loopback (which the lab's loss spares)."""
    gossip, rpc = LAB_PORTS[profile]
    return Seat(f"{host.address}:{gossip}", f"127.0.0.1:{rpc}", host)


class SerfAgent:
    """One ``serf agent`` process; a reader thread stamps its log lines and reports the events in them."""

    def __init__(
        self, name: str, profile: str, seat: Seat, join: Sequence[str], log: Path, report: Callable[[SerfEvent], None]
    ) -> None:
        self.name = name
        self.seat = seat
        self.log = log
        argv = ["serf", "agent", f"-node={name}", f"-profile={profile}", f"-bind={seat.bind}",
                f"-rpc-addr={seat.rpc}", "-log-level=info", *(f"-join={address}" for address in join)]  # fmt: skip
        self.process = subprocess.Popen(
            seat.command(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._reader = threading.Thread(target=self._read, args=(report,), name=f"serf-{name}", daemon=True)
        self._reader.start()

    def _read(self, report: Callable[[SerfEvent], None]) -> None:
        stream: IO[bytes] | None = self.process.stdout
        assert stream is not None
        with self.log.open("a") as out:
            for raw in iter(stream.readline, b""):
                t = wall()
                line = raw.decode(errors="replace").rstrip()
                out.write(f"{t:.6f} {line}\n")
                out.flush()
                event = parse_line(t, self.name, line)
                if event is not None:
                    report(event)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def stop(self) -> None:
        """SIGKILL (the baseline keeps no state worth a graceful leave, which would not be a failure)."""
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_TIMEOUT)
        self._reader.join(STOP_TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class SerfKill:
    """One crash or hang: seconds from the signal until the first and until every survivor saw ``member`` failed."""

    member: str
    first_failed: float | None
    all_failed: float | None
    observers: int
    already_failed: int = 0
    """Observers that already held ``member`` failed at the signal (a false failure under loss): they log
    nothing more, so "every survivor" means the others."""

    def to_json(self) -> dict[str, Any]:
        return {"member": self.member, "first_failed": self.first_failed, "all_failed": self.all_failed,
                "observers": self.observers, "already_failed": self.already_failed}  # fmt: skip


@dataclass
class SerfTally:
    """What one profile's cluster did between two wall times (nobody was killed in between)."""

    failures: dict[str, int] = field(default_factory=dict)
    """Per member: failure episodes, each a span during which at least one agent held it failed,
    however many agents saw it (the cluster-wide count of live members declared failed)."""
    member_failed_events: int = 0
    """``EventMemberFailed`` lines over every agent's log (each agent's view counted)."""
    declarations: int = 0
    """``Marking ... as failed`` lines: the agents whose suspicion timer fired."""
    suspicions: int = 0
    """``Suspect ... has failed`` lines: probe rounds that ended without an ack."""
    refutations: int = 0
    """``Refuting a suspect|dead message`` lines: live agents that answered a suspicion or death."""
    failed_at_end: int = 0
    """(observer, member) pairs still failed at the end of the span."""
    agents_exited: int = 0

    @property
    def total_failures(self) -> int:
        return sum(self.failures.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "live_members_failed": self.total_failures,
            "failures_per_member": self.failures,
            "member_failed_events": self.member_failed_events,
            "declarations": self.declarations,
            "suspicions": self.suspicions,
            "refutations": self.refutations,
            "failed_at_end": self.failed_at_end,
            "agents_exited": self.agents_exited,
        }


def failure_episodes(events: Iterable[SerfEvent], member: str) -> int:
    """Spans during which at least one other agent held ``member`` failed (a join or leave ends an agent's hold)."""
    holding: set[str] = set()
    episodes = 0
    for event in sorted(events, key=lambda e: e.t):
        if event.member != member or event.observer == member:
            continue
        if event.kind == "failed":
            if not holding:
                episodes += 1
            holding.add(event.observer)
        elif event.kind in ("join", "leave", "reap"):
            holding.discard(event.observer)
    return episodes


class SerfGroup:
    """One Serf cluster of a given profile: agents started, joined, signalled, and their events recorded."""

    def __init__(self, profile: str, workdir: Path) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown Serf profile {profile!r}; choose from {', '.join(PROFILES)}")
        self.profile = profile
        self.workdir = workdir
        self.agents: dict[str, SerfAgent] = {}
        self.killed: dict[str, float] = {}
        """Agents killed (or frozen) on purpose, with the wall time of the signal."""
        self._failed_at_kill: dict[str, set[str]] = {}
        """Per killed agent: the observers that held it failed at the signal."""
        self.events: list[SerfEvent] = []
        self._views: dict[str, dict[str, str]] = {}
        """Per observer, per member: the last of join / failed / leave it logged."""
        self._changed = threading.Condition()
        self._count = 0
        workdir.mkdir(parents=True, exist_ok=True)

    def _report(self, event: SerfEvent) -> None:
        with self._changed:
            self.events.append(event)
            if event.kind in ("join", "failed", "leave"):
                self._views.setdefault(event.observer, {})[event.member] = event.kind
            self._changed.notify_all()

    @property
    def running(self) -> list[str]:
        return [name for name, agent in self.agents.items() if agent.running and name not in self.killed]

    def add(self, name: str, seat: Seat) -> SerfAgent:
        """Start agent ``name`` at ``seat``, joining through up to three running agents."""
        if name in self.agents:
            raise ValueError(f"a Serf agent named {name!r} already ran in this group; names must be unique")
        seeds = [self.agents[other].seat.bind for other in self.running if self._up(other)][:3]
        agent = SerfAgent(name, self.profile, seat, seeds, self.workdir / f"{name}.log", self._report)
        self.agents[name] = agent
        return agent

    def _up(self, name: str) -> bool:
        """Whether agent ``name`` logged its own join (its gossip port is open: it can be a seed)."""
        return self._views.get(name, {}).get(name) == "join"

    def _start(self, seats: Sequence[tuple[str, Seat]]) -> None:
        """Start agents; the first waits until it is up if nobody else can be a seed. Return once converged."""
        for index, (name, seat) in enumerate(seats):
            self.add(name, seat)
            if index == 0 and not any(self._up(other) for other in self.running if other != name):
                self._wait(functools.partial(self._up, name), f"Serf agent {name} to start")
        self._wait(self._converged, f"{len(self.running)} Serf agents to see each other")

    def start_loopback(self, count: int) -> None:
        """Add ``count`` agents on loopback (named ``member-<n>``) and wait until every agent sees every other."""
        seats = []
        for _ in range(count):
            seats.append((f"member-{self._count}", loopback_seat()))
            self._count += 1
        self._start(seats)

    def start_on(self, hosts: Sequence[Host]) -> None:
        """One agent per lab host, named after the host; return once every agent sees every other."""
        self._start([(host.name, lab_seat(host, self.profile)) for host in hosts])

    def _check_running(self) -> None:
        for name, agent in self.agents.items():
            if name not in self.killed and not agent.running:
                raise RuntimeError(f"Serf agent {name} exited; see {agent.log}\n{agent.tail()}")

    def _converged(self) -> bool:
        names = self.running
        return all(all(self._views.get(observer, {}).get(member) == "join" for member in names) for observer in names)

    def _wait(self, condition: Callable[[], bool], what: str, timeout: float = JOIN_TIMEOUT) -> None:
        """Wait until ``condition`` holds (checked at each event, and each 0.2 s for exited agents)."""
        deadline = wall() + timeout
        with self._changed:
            while not condition():
                self._check_running()
                if wall() >= deadline:
                    raise RuntimeError(f"timed out after {timeout}s waiting for {what}; logs in {self.workdir}")
                self._changed.wait(0.2)

    def kill_one(self, rng: random.Random, bound: float, freeze: bool = False) -> SerfKill:
        """SIGKILL (or SIGSTOP) a random agent; wait up to ``bound`` seconds until every survivor logged it failed."""
        name = rng.choice(self.running)
        observers = [other for other in self.running if other != name]
        self.kill(name, freeze)
        kill = self.wait_failed(name, observers, bound)
        self.agents[name].stop()
        return kill

    def kill(self, name: str, freeze: bool = False) -> float:
        """SIGKILL (or SIGSTOP) agent ``name`` now; returns the wall time of the signal. Its failures from then
        on are the detection, not false ones (``tally`` leaves them out)."""
        with self._changed:
            killed_at = wall()
            self.killed[name] = killed_at
            self._failed_at_kill[name] = {o for o, view in self._views.items() if view.get(name) == "failed"}
        self.agents[name].signal(signal.SIGSTOP if freeze else signal.SIGKILL)
        return killed_at

    def wait_failed(self, name: str, observers: Sequence[str], bound: float) -> SerfKill:
        """Wait up to ``bound`` seconds after ``name``'s kill until every one of ``observers`` logged it failed
        (or held it failed already at the kill)."""
        killed_at = self.killed[name]
        already = self._failed_at_kill.get(name, set()) & set(observers)
        waited = set(observers) - already

        def seen() -> list[float]:
            return [e.t for e in self.events if e.kind == "failed" and e.member == name and e.t >= killed_at]

        def everyone() -> bool:
            observed = {e.observer for e in self.events if e.kind == "failed" and e.member == name and e.t >= killed_at}
            return waited <= observed

        with self._changed:
            self._changed.wait_for(everyone, timeout=max(0.0, killed_at + bound - wall()))
            times = seen()
            complete = everyone()
        return SerfKill(
            member=name,
            first_failed=min(times) - killed_at if times else None,
            all_failed=max(times, default=killed_at) - killed_at if complete else None,
            observers=len(observers),
            already_failed=len(already),
        )

    def replace_missing(self, count: int) -> None:
        missing = count - len(self.running)
        if missing > 0:
            self.start_loopback(missing)

    def false_failures(self) -> list[str]:
        """Members some agent logged failed although nobody killed them."""
        return sorted({e.member for e in self.events if e.kind == "failed" and e.member not in self.killed})

    def pids(self) -> dict[str, int]:
        return {name: self.agents[name].pid for name in self.running}

    def tally(self, since: float, until: float) -> SerfTally:
        """Count what happened between wall times ``since`` and ``until``; a killed agent's failures after its
        kill are its detection, not false ones, and are left out."""
        with self._changed:
            events = [e for e in self.events if e.member not in self.killed or e.t < self.killed[e.member]]
        window = [e for e in events if since <= e.t <= until]
        tally = SerfTally()
        for name in self.agents:
            tally.failures[name] = failure_episodes(window, name)
        counts = {kind: sum(1 for e in window if e.kind == kind) for kind in KINDS}
        tally.member_failed_events = counts["failed"]
        tally.declarations = counts["declared"]
        tally.suspicions = counts["suspect"]
        tally.refutations = counts["refuted"]
        final: dict[tuple[str, str], str] = {}
        for event in sorted((e for e in events if e.t <= until), key=lambda e: e.t):
            if event.kind in ("join", "failed", "leave"):
                final[(event.observer, event.member)] = event.kind
        tally.failed_at_end = sum(1 for kind in final.values() if kind == "failed")
        tally.agents_exited = sum(not agent.running for name, agent in self.agents.items() if name not in self.killed)
        return tally

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
