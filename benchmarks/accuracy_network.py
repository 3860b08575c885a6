"""The accuracy benchmark's real-network runs: silos, ZooKeeper members and Serf agents in one
``NetworkLab``, under one fault at a time (see ``benchmarks.accuracy`` for the whole method).

A level is one fault held for ``loss_seconds`` in a fresh lab:

* a **loss level** (``LossFault``): every host drops each arriving packet with probability p.
  At its end, while the loss is still on, one host's silo is SIGKILLed, and beside it that
  host's ZooKeeper member and its Serf agent of each profile: the time each system takes to
  find its crash (Dead row, session expiry, ``EventMemberFailed``) shows that the loss did not
  blind it;
* a **flap level** (``FlapFault``): one host's links (its silo, ZooKeeper member and Serf
  agents) cut for ``cut`` seconds and healed for ``flap_healed`` seconds, over and over. A cut
  of at most ``floor - probe_interval`` must never kill a silo (docs/protocol.md, "Short
  cuts"); a longer one may.

Every level counts each system's false deaths the same way: silos from the recorded history,
ZooKeeper expirations from the observer's log, Serf failure episodes from the agents' logs.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks.accuracy_config import Config, floor_seconds
from benchmarks.common import summarize, wall
from benchmarks.lab_counts import (
    CpuMeter,
    declared_dead_after,
    exit_name,
    history_counts,
    loss_counters,
    poll_net,
)
from benchmarks.serf_group import PROFILE_TIMINGS, SerfGroup, serf_unavailable_reason
from benchmarks.silo_cluster import JOIN_TIMEOUT
from benchmarks.zk_netns import LabZkGroup, LabZooKeeper, zookeeper_unavailable_reason
from membership_tables.history import load_history
from silo.membership.options import SiloOptions
from testbed.net_cluster import NetCluster, NetSilo
from testbed.netfaults import Host, NetworkLab, lab_unavailable_reason

NETWORK_POLL = 0.5
"""Seconds between the network runs' table polls, exit checks and CPU samples."""
PROGRESS_EVERY = 60.0
"""Seconds between progress lines during a level (a full level lasts ten minutes)."""
KILL_POLL = 0.1
"""Seconds between table reads while waiting for a killed silo's Dead row."""


def loss_label(loss: float) -> str:
    """The level's key in the results (``loss_10pct``): stable, and sorts as the levels do."""
    return f"loss_{round(loss * 100)}pct"


def flap_label(cut: float) -> str:
    """A flap level's key in the results (``flap_1s``, ``flap_1.5s``)."""
    return f"flap_{cut:g}s"


def loss_target(loss: float) -> str | None:
    """The issue's target at this loss level (``None``: the level has none)."""
    if math.isclose(loss, 0.10) or math.isclose(loss, 0.20):
        return "zero"
    if math.isclose(loss, 0.30):
        return "tenth_of_zookeeper"
    if math.isclose(loss, 0.40):
        return "one_per_10_minutes"
    return None


def flap_target(cut: float) -> str | None:
    """A cut short enough to have healed before a vote on silence never kills (docs/protocol.md, "Short cuts")."""
    options = SiloOptions.local()
    return "zero" if cut <= options.detection_time - options.probe_interval else None


def target_met(target: str | None, declared: int, zookeeper_expired: int, seconds: float) -> bool | None:
    """Whether the level met its target; ``None`` for a level without one (chosen with ``--loss-levels``)."""
    if target == "zero":
        return declared == 0
    if target == "tenth_of_zookeeper":
        return declared * 10 <= zookeeper_expired
    if target == "one_per_10_minutes":
        return declared <= seconds / 600.0
    return None


def network_unavailable_reason() -> str | None:
    """Why the real-network scenario cannot run here (no root, no iptables, no ZooKeeper), or None."""
    reason = lab_unavailable_reason()
    if reason is not None:
        return f"network lab unavailable: {reason}"
    return zookeeper_unavailable_reason()


class LossCluster(NetCluster):
    """``NetCluster`` that restarts silos: a new generation on the host of one that exited."""

    def current(self) -> dict[str, NetSilo]:
        """The newest silo process of each host, by host name."""
        latest: dict[str, NetSilo] = {}
        for silo in self.silos:
            latest[silo.host.name] = silo
        return latest

    def respawn(self, host: Host) -> NetSilo:
        """Start a new silo on ``host`` (same port and history file); it joins on its own."""
        return self._spawn(host)


@dataclass
class LabSystems:
    """The three detectors of one level, side by side in one lab: silos, ZooKeeper members, Serf agents."""

    cluster: LossCluster
    server: LabZooKeeper
    group: LabZkGroup
    serf: dict[str, SerfGroup]

    @property
    def lab(self) -> NetworkLab:
        return self.cluster.lab


# --- faults ----------------------------------------------------------------------------


class Fault(Protocol):
    """What a level does to the lab: switched on, held (``describe`` for the progress lines), switched off."""

    def describe(self) -> str: ...

    def start(self, systems: LabSystems) -> None: ...

    def stop(self, systems: LabSystems) -> dict[str, Any]:
        """Switch the fault off; what it applied, for the results."""
        ...


class LossFault:
    """Every host drops each arriving packet with probability ``loss`` (``NetworkLab.set_loss``)."""

    def __init__(self, loss: float) -> None:
        self.loss = loss
        self._entered_before = 0

    def describe(self) -> str:
        return f"{self.loss:.0%} loss"

    def start(self, systems: LabSystems) -> None:
        self._entered_before, _ = loss_counters(systems.lab.hosts)
        systems.lab.set_loss(self.loss)

    def stop(self, systems: LabSystems) -> dict[str, Any]:
        entered_after, dropped = loss_counters(systems.lab.hosts)
        systems.lab.set_loss(0.0)
        entered = entered_after - self._entered_before
        return {
            "loss": self.loss,
            "packets": {
                "entered_loss_chain": entered,
                "dropped": dropped,
                "measured_loss": dropped / entered if entered else math.nan,
            },
        }


class FlapFault:
    """One host cut from every other (``NetworkLab.isolate``) for ``cut`` s, healed for ``healed`` s, over and over.

    A thread keeps the rhythm, so the table polls and CPU samples of the hold loop do not stretch
    the cuts. The rules reach the hosts one ``iptables-restore`` at a time, so each cut is timed
    twice: from the start of its first rule to the end of its heal (``spans``, an upper bound) and
    from its last rule to the start of its heal (``complete``, a lower bound)."""

    def __init__(self, cut: float, healed: float) -> None:
        self.cut = cut
        self.healed = healed
        self.host: Host | None = None
        self.spans: list[float] = []
        self.complete: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def describe(self) -> str:
        return f"{self.cut:g} s cuts"

    def start(self, systems: LabSystems) -> None:
        self.host = systems.cluster.hosts[-1]
        self._thread = threading.Thread(target=self._flap, args=(systems.lab, self.host), daemon=True)
        self._thread.start()

    def _flap(self, lab: NetworkLab, host: Host) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            lab.isolate(host)
            isolated = time.monotonic()
            self._stop.wait(max(0.0, started + self.cut - isolated))
            healing = time.monotonic()
            lab.heal()
            self.spans.append(time.monotonic() - started)
            self.complete.append(healing - isolated)
            self._stop.wait(max(0.0, started + self.cut + self.healed - time.monotonic()))

    def stop(self, systems: LabSystems) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        systems.lab.heal()
        return {
            "cut_s": self.cut,
            "healed_s": self.healed,
            "host": self.host.name if self.host is not None else None,
            "cuts": len(self.spans),
            "cut_span_s": summarize(self.spans),
            "cut_complete_s": summarize(self.complete),
        }


# --- one level ---------------------------------------------------------------------------


@dataclass
class Watch:
    """What the hold loop keeps: a live tally for the progress lines, exits and restarts, CPU samples."""

    since: float
    """Wall time the fault was switched on."""
    meter: CpuMeter = field(default_factory=CpuMeter)
    votes: set[tuple[str, str, float]] = field(default_factory=set)
    declared: set[str] = field(default_factory=set)
    exits: Counter[str] = field(default_factory=Counter)
    exited_at: dict[int, float] = field(default_factory=dict)
    restarts: int = 0


def network_level(fault: Fault, label: str, config: Config, root: Path, kill: bool) -> dict[str, Any]:
    """One level in a fresh lab: silos, ZooKeeper members and Serf agents side by side, same fault, same time."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = LossCluster(root, cluster_id=f"accuracy-{label.replace('_', '-').replace('.', '-')}")
    with cluster:
        server = LabZooKeeper(cluster.lab.add_host("zk"), root / "zookeeper")
        group: LabZkGroup | None = None
        serf: dict[str, SerfGroup] = {}
        try:
            server.start()
            cluster.start(config.loss_size, timeout=JOIN_TIMEOUT)
            group = LabZkGroup(server, cluster.hosts, f"/accuracy/{label}", floor_seconds(), root / "zk-members")
            group.start()
            for profile in config.serf_profiles:
                serf[profile] = SerfGroup(profile, root / f"serf-{profile}")
                serf[profile].start_on(cluster.hosts)
            return measure_level(LabSystems(cluster, server, group, serf), fault, config, kill)
        finally:
            for agents in serf.values():
                agents.close()
            if group is not None:
                group.close()
            server.stop()


def measure_level(systems: LabSystems, fault: Fault, config: Config, kill: bool) -> dict[str, Any]:
    """Hold ``fault`` for ``config.loss_seconds`` (then, if ``kill``, kill one host's processes while it is
    still on), switch it off, let what is under way land (2 x floor) and count every system's false deaths.

    The counts come afterwards from records that cannot miss an event between polls: the silos'
    history files and the observer's, server's and agents' logs."""
    watch = Watch(since=wall())
    fault.start(systems)
    try:
        hold(systems, fault, watch, config)
        crash = kill_one_host(systems, config.kill_bound) if kill else None
    finally:
        applied = fault.stop(systems)
    time.sleep(2 * floor_seconds())  # let a declaration or an expiry already under way land
    cut = wall()
    counts = count_level(systems, watch, cut, crash)
    return {**applied, "seconds": config.loss_seconds, "size": config.loss_size, **counts}


def hold(systems: LabSystems, fault: Fault, watch: Watch, config: Config) -> None:
    """Every 0.5 s for the level's duration: a table read, restarts of silos that exited, CPU samples."""
    cluster, floor = systems.cluster, floor_seconds()
    started = time.monotonic()
    deadline = started + config.loss_seconds
    next_progress = started + PROGRESS_EVERY
    while (now := time.monotonic()) < deadline:
        poll_net(cluster, watch.votes, watch.declared)
        for silo in cluster.current().values():
            if silo.running:
                continue
            if silo.pid not in watch.exited_at:
                watch.exited_at[silo.pid] = now
                watch.exits[exit_name(silo.exit_code)] += 1
            elif config.restart_declared and now - watch.exited_at[silo.pid] >= floor:
                del watch.exited_at[silo.pid]
                cluster.respawn(silo.host)
                watch.restarts += 1
        sample_cpu(systems, watch.meter)
        if now >= next_progress:
            next_progress += PROGRESS_EVERY
            print(f"[accuracy]   {fault.describe()}, {now - started:.0f}/{config.loss_seconds:.0f} s: "
                  f"{len(watch.declared)} Dead rows, {len(watch.votes)} votes, "
                  f"{systems.group.tally(wall()).total_expired} ZooKeeper sessions expired"
                  + "".join(f", Serf {profile} {agents.tally(watch.since, wall()).total_failures} failures"
                            for profile, agents in systems.serf.items()),
                  flush=True)  # fmt: skip
        time.sleep(NETWORK_POLL)


def sample_cpu(systems: LabSystems, meter: CpuMeter) -> None:
    meter.sample("silo", [silo.pid for silo in systems.cluster.current().values() if silo.running])
    meter.sample("zk_member", systems.group.pids().values())
    meter.sample("zk_server", [systems.server.pid] if systems.server.pid is not None else [])
    for profile, agents in systems.serf.items():
        meter.sample(f"serf_{profile}", agents.pids().values())


@dataclass(frozen=True)
class Crash:
    """One host's silo, ZooKeeper member and Serf agents killed on purpose, and how soon each was found."""

    host: str
    bound: float
    """Seconds after each kill that its system's finding was waited for."""
    silo_address: str
    silo_killed_at: float
    zookeeper_registered: bool
    """Whether the killed member's znode existed at its kill (if not, its last session had already expired)."""
    zookeeper_expired_after: float | None
    serf: dict[str, dict[str, Any]]

    def to_json(self, silo_dead_after: float | None) -> dict[str, Any]:
        """Seconds from each kill to its system's finding (``None``: not within the bound)."""
        within = silo_dead_after is not None and silo_dead_after <= self.bound
        return {
            "host": self.host,
            "bound_s": self.bound,
            "silo_dead_after_s": silo_dead_after if within else None,
            "zookeeper_registered_at_kill": self.zookeeper_registered,
            "zookeeper_expired_after_s": self.zookeeper_expired_after,
            "serf": self.serf,
        }


def kill_one_host(systems: LabSystems, bound: float) -> Crash | None:
    """SIGKILL one original silo, its host's ZooKeeper member and Serf agents; wait up to ``bound`` s after
    each kill for its system to find it (the silo's time is read from the history afterwards)."""
    candidates = [silo for silo in systems.cluster.current().values() if silo.running and silo.address is not None]
    if not candidates:
        return None
    silo = candidates[-1]  # an original: a restarted silo's address is not read back from its log
    address = str(silo.address)
    silo_killed_at = wall()
    silo.kill()
    zookeeper_registered = systems.group.registered_at(silo.name, systems.group.kill(silo.name))
    observers = {profile: [name for name in agents.running if name != silo.name]
                 for profile, agents in systems.serf.items()}  # fmt: skip
    for agents in systems.serf.values():
        agents.kill(silo.name)
    deadline = silo_killed_at + bound
    while wall() < deadline and not dead_in_table(systems.cluster, address):
        time.sleep(KILL_POLL)
    zookeeper = systems.group.expired_after(silo.name, bound) if zookeeper_registered else None
    serf = {profile: agents.wait_failed(silo.name, observers[profile], bound).to_json()
            for profile, agents in systems.serf.items()}  # fmt: skip
    return Crash(silo.name, bound, address, silo_killed_at, zookeeper_registered, zookeeper, serf)


def dead_in_table(cluster: LossCluster, address: str) -> bool:
    votes: set[tuple[str, str, float]] = set()
    declared: set[str] = set()
    poll_net(cluster, votes, declared)
    return address in declared


def count_level(systems: LabSystems, watch: Watch, cut: float, crash: Crash | None) -> dict[str, Any]:
    """Every system's false deaths between the fault's start and ``cut`` (the crash's own detection left out) and the
    crash's detection times, from the records; stops the silos (gracefully, so every write is recorded)."""
    cluster, killed = systems.cluster, {} if crash is None else {crash.silo_address: crash.silo_killed_at}
    dead_rows = poll_net(cluster, watch.votes, watch.declared)
    zookeeper = systems.group.tally(cut)
    serf_tallies = {profile: agents.tally(watch.since, cut) for profile, agents in systems.serf.items()}
    for silo in cluster.current().values():
        if not silo.running and silo.pid not in watch.exited_at and str(silo.address) not in killed:
            watch.exits[exit_name(silo.exit_code)] += 1  # exited during the grace period
    running = sum(silo.running for silo in cluster.current().values())
    cluster.stop()
    records = load_history(cluster.history_dir) if cluster.history_dir.exists() else []
    history = history_counts(records, cut, killed)
    silos = {
        "live_silos_declared_dead": len(history["declared"]),
        "declared": sorted(history["declared"]),
        "suspicion_votes": history["votes"],
        "voters": history["voters"],
        "dead_rows_in_table": None if dead_rows is None else len(watch.declared - killed.keys()),
        "suspicion_votes_polled": len(watch.votes),
        "exits": dict(watch.exits),
        "restarts": watch.restarts,
        "successor_declarations": history["successor_declarations"],
        "history_records": history["records"],
        "running_at_end": running,
        "cpu_percent_per_silo": watch.meter.percent("silo"),
    }
    result: dict[str, Any] = {
        "silos": silos,
        "zookeeper": {
            **zookeeper.to_json(),
            "cpu_percent_per_member": watch.meter.percent("zk_member"),
            "cpu_percent_server": watch.meter.percent("zk_server"),
        },
        "serf": {
            profile: {
                **tally.to_json(),
                "cpu_percent_per_agent": watch.meter.percent(f"serf_{profile}"),
                "timings": PROFILE_TIMINGS[profile],
            }
            for profile, tally in serf_tallies.items()
        },
    }
    if crash is not None:
        result["kill"] = crash.to_json(declared_dead_after(records, crash.silo_address, crash.silo_killed_at))
    return result


# --- all levels ----------------------------------------------------------------------------


def network_runs(config: Config, root: Path) -> dict[str, Any]:
    """Every loss level, then every flap level, each in a fresh lab; the reason instead if the lab cannot run."""
    reason = network_unavailable_reason()
    if reason is not None:
        print(f"[accuracy] skipping the real-network runs: {reason}", flush=True)
        return {"skipped": reason}
    serf_reason = serf_unavailable_reason() if config.serf_profiles else None
    if serf_reason is not None:
        print(f"[accuracy] Serf left out of the real-network runs: {serf_reason}", flush=True)
        config = dataclasses.replace(config, serf_profiles=())
    others = "".join(f", Serf {profile}" for profile in config.serf_profiles)
    loss: dict[str, Any] = {}
    for level in config.loss_levels:
        print(f"[accuracy] silos, ZooKeeper{others}: {level:.0%} packet loss in a network lab", flush=True)
        label = loss_label(level)
        entry = network_level(LossFault(level), label, config, root / f"net-{label}", kill=True)
        target = loss_target(level)
        met = target_met(target, entry["silos"]["live_silos_declared_dead"],
                         entry["zookeeper"]["live_sessions_expired"], config.loss_seconds)  # fmt: skip
        loss[label] = {**entry, "target": target, "target_met": met}
    flaps: dict[str, Any] = {}
    for cut in config.flap_levels:
        print(f"[accuracy] silos, ZooKeeper{others}: one host cut {cut:g} s, healed {config.flap_healed:g} s, "
              "over and over", flush=True)  # fmt: skip
        label = flap_label(cut)
        entry = network_level(FlapFault(cut, config.flap_healed), label, config, root / f"net-{label}", kill=False)
        target = flap_target(cut)
        met = target_met(target, entry["silos"]["live_silos_declared_dead"], 0, config.loss_seconds)
        flaps[label] = {**entry, "target": target, "target_met": met}
    result: dict[str, Any] = {"session_timeout_s": floor_seconds(), "levels": loss}
    if flaps:
        result["flap_levels"] = flaps
    if serf_reason is not None:
        result["serf_unavailable"] = serf_reason
    return result
