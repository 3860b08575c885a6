"""Accuracy: how many live silos are declared dead under stress and packet loss? Target: zero.

Nobody is killed in any run, so every Dead row written by another silo is a false positive; a
silo declared dead exits (and is replaced, to keep N). Suspicion votes are counted too. Three
scenarios, each beside ZooKeeper ephemeral nodes (session timeout = the detection floor
``num_missed_probes_limit x probe_timeout``) where the fault can reach a ZooKeeper client:

``stall``: N real silos (local preset) on SQLite for a fixed time while (see
``benchmarks.stress``) one silo is stalled by SIGSTOP for a fraction of the floor every few
seconds, pinned to one CPU beside a busy-looping hog, and every other silo is SIGSTOPped in
short bursts about 10% of its time, which delays probes to and from it. The table is polled
every 0.5 s. Baseline: N ZooKeeper members under the same stress; a member whose node
vanishes while its process lives is a false positive.

``probe_loss``: N silos in ``benchmarks.silo_host`` processes, every silo's prober wrapped in
``benchmarks.lossy_prober.LossyProber`` (10% of pings and indirect-probe requests dropped, 10%
delayed by up to 0.8 x the probe timeout), no other stress. Kept beside the real-network runs
because it is the only scenario with probe *delay* (this kernel has no ``sch_netem``); it has
no ZooKeeper baseline. Target: 0.

``network`` (real packet loss): for each loss level (10%, 20%, 30%) a fresh
``NetworkLab`` (``testbed/netfaults/lab.py``): N ``silo run`` processes, each in its own network
namespace (``testbed/net_cluster.py``, one SQLite table on the shared filesystem, every
versioned write recorded with ``--history-file``), a ZooKeeper server in a namespace of its
own and one ZooKeeper member beside each silo, in the silo's namespace
(``benchmarks.zk_netns``). Both systems run at the same time in the same lab, so the same
iptables rule (``NetworkLab.set_loss``: each packet arriving at any host, the ZooKeeper
server's included, dropped with probability p) and the same CPU load hit both; running them
one after the other would give each a different machine. Loss is switched on once every silo
is Active and every member registered, held for the level's duration, then switched off;
what is still under way lands in the next 2 x floor and is counted. Silos declared dead are
counted from the recorded history (a Dead row written by another silo), cross-checked with
the table; votes from the history too (every vote is written). ZooKeeper expirations are the
deletions of a member's znode seen by an observer on the server's own host (loopback, which
the loss spares), cross-checked with the server's ``Expiring session`` log lines. A silo
declared dead is restarted (new generation, same host) after one floor; a member whose
session expired registers again in a new session, so both sides keep N for the whole level.
Serf runs in the same lab too (``benchmarks.serf_group``): one ``serf agent`` per profile
(``lan`` and ``local``, each profile its own cluster on its own ports) beside each silo, so the same
loss hits three detectors at once. Serf agents are never restarted: a live agent declared failed
refutes and rejoins by itself. Serf's false failures are counted from the agents' logs (stamped
on arrival) between loss-on and the cut: a live member's failure episode is a span during which at
least one agent held it failed, however many agents saw it; the ``EventMemberFailed`` lines of
every agent, the declarations (``Marking ... as failed``) and the refutations are reported too.
CPU per silo, per ZooKeeper member, of the server and per Serf agent come from
``/proc/<pid>/stat``, and the loss actually applied from the iptables rule counters. Targets
(issue "failure detector v2"): no silo declared dead at 10% and 20% (over 600 s at N = 10),
at most a tenth of ZooKeeper's expirations at 30%. Needs root and iptables; without them the
scenario is skipped, with the reason printed and recorded, and the others still run.

    python -m benchmarks.accuracy [--quick] [--scenarios stall,probe_loss,network]
        [--loss-levels 0.1,0.2,0.3] [--loss-seconds 600] [--loss-size 10] [--serf-profiles lan,local|none]

``--quick``: N = 5, 10 s stall and probe-loss runs, 15 s per loss level. The loss flags
override either preset; ``--scenarios`` picks what runs (default: all three), ``--serf-profiles``
which Serf profiles join the real-network runs (``none``: no Serf).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import (
    ROOT,
    RunSettings,
    choices_list,
    grouped_bars,
    parse_over_preset,
    print_table,
    pyplot,
    run_benchmark,
    save_figure,
    wall,
    workdir,
)
from benchmarks.serf_group import PROFILE_TIMINGS, PROFILES, SerfGroup, serf_unavailable_reason
from benchmarks.silo_cluster import JOIN_TIMEOUT, BenchCluster
from benchmarks.stress import CpuHog, Jitter, Staller, pin
from benchmarks.zk_group import ZkGroup
from benchmarks.zk_netns import LabZkGroup, LabZooKeeper, zookeeper_unavailable_reason
from membership_tables import (
    MembershipTable,
    MembershipTableError,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    open_table,
)
from membership_tables.history import load_history
from silo.exit_codes import ExitCode
from silo.membership.options import SiloOptions
from testbed.net_cluster import NetCluster, NetSilo
from testbed.netfaults import Host, iptables_backend, lab_unavailable_reason
from testbed.netfaults.lab import LOSS_CHAIN
from testbed.services.process import ServerProcess, wait_until

NAME = "accuracy"
CLUSTER = "accuracy-probe-loss"
HOG_CPU = 0
SCENARIOS = ("stall", "probe_loss", "network")
NETWORK_POLL = 0.5
"""Seconds between the network runs' table polls, exit checks and CPU samples."""
PROGRESS_EVERY = 60.0
"""Seconds between progress lines during a loss level (a full level lasts ten minutes)."""


@dataclass(frozen=True)
class Config:
    size: int = 10
    seconds: float = 90.0
    stall_fractions: tuple[float, ...] = (0.5, 0.8, 1.3)
    """Stall lengths as fractions of the detection floor. Below 1 a death declaration is a false
    positive; 1.3 is beyond the floor (declaring the stalled silo is then within the rules) and
    shows how much margin each system keeps."""
    stall_gap: float = 3.0
    jitter_fraction: float = 0.10
    jitter_mean_burst: float = 0.1
    seed: int = 11
    probe_loss: float = 0.10
    probe_delay: float = 0.10
    silos_per_host: int = 5
    """Silos per ``benchmarks.silo_host`` process in the probe-loss scenario."""
    loss_levels: tuple[float, ...] = (0.10, 0.20, 0.30)
    """Real-network runs: the fraction of packets every lab host drops on arrival, one run each."""
    loss_seconds: float = 600.0
    """Real-network runs: how long each loss level is held (the issue's targets are over 10 minutes)."""
    loss_size: int = 10
    """Real-network runs: silos (and ZooKeeper members), one lab host each."""
    restart_declared: bool = True
    """Real-network runs: restart a silo that was declared dead (as a supervisor would), to keep N."""
    scenarios: tuple[str, ...] = SCENARIOS
    serf_profiles: tuple[str, ...] = PROFILES
    """Real-network runs: the Serf profiles whose clusters run beside the silos (one agent per host each)."""

    @classmethod
    def quick(cls) -> Config:
        return cls(size=5, seconds=10.0, stall_fractions=(0.5,), loss_seconds=15.0, loss_size=5)


def floor_seconds() -> float:
    return SiloOptions.local().detection_time


class _Member:
    """A ZooKeeper member process as something the stressors can signal."""

    def __init__(self, process: ServerProcess) -> None:
        self._process = process

    @property
    def running(self) -> bool:
        return self._process.running

    def send(self, signum: int) -> None:
        self._process.signal(signum)


async def silo_run(uri: str, stall: float, config: Config, root: Path) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    bench = BenchCluster(root, uri, "accuracy")
    votes: set[tuple[str, str, float]] = set()
    declared: set[str] = set()
    replaced = 0
    try:
        await bench.start(config.size)
        stalled, others = bench.running[0], bench.running[1:]
        hog = CpuHog(HOG_CPU)
        pin(stalled.pid, HOG_CPU)
        staller = Staller(stalled, stall, config.stall_gap)
        jitter = Jitter(others, config.jitter_fraction, config.jitter_mean_burst, config.seed)
        try:
            deadline = time.monotonic() + config.seconds
            while time.monotonic() < deadline:
                await poll(bench.cluster.table, votes, declared)
                await asyncio.sleep(0.5)
        finally:
            staller.stop()
            jitter.stop()
            hog.stop()
        await asyncio.sleep(floor_seconds() * 2)  # let a declaration already under way land
        await poll(bench.cluster.table, votes, declared)
        replaced = await bench.replace_missing(config.size)
        events = {"stalls": staller.events, "jitter_pauses": jitter.events}
    finally:
        await bench.close()
    return {
        "live_silos_declared_dead": len(declared),
        "declared": sorted(declared),
        "suspicion_votes": len(votes),
        "replaced": replaced,
        **events,
    }


async def poll(table: MembershipTable, votes: set[tuple[str, str, float]], declared: set[str]) -> None:
    try:
        data = await asyncio.to_thread(table.read_all)
    except TableUnavailableError:
        return
    for entry in data.entries:
        for voter, when in entry.suspect_times:
            votes.add((str(entry.silo_address), str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD:
            declared.add(str(entry.silo_address))


async def probe_loss_run(uri: str, config: Config, root: Path) -> dict[str, Any]:
    """N in-process silos whose probers drop and delay probes; nothing else disturbs them."""
    root.mkdir(parents=True, exist_ok=True)
    hosts = start_lossy_hosts(uri, config, root)
    votes: set[tuple[str, str, float]] = set()
    declared: set[str] = set()
    table = open_table(uri, CLUSTER)
    try:
        await asyncio.to_thread(wait_active, table, config.size, hosts)
        deadline = time.monotonic() + config.seconds
        while time.monotonic() < deadline:
            await poll(table, votes, declared)
            await asyncio.sleep(0.5)
        await asyncio.sleep(floor_seconds() * 2)  # let a declaration already under way land
        await poll(table, votes, declared)
    finally:
        for host in hosts:
            host.stop()
    injected = [line for host in hosts for line in host.log.read_text(errors="replace").splitlines()]
    return {
        "probe_loss": config.probe_loss,
        "probe_delay": config.probe_delay,
        "hosts": len(hosts),
        "live_silos_declared_dead": len(declared),
        "declared": sorted(declared),
        "suspicion_votes": len(votes),
        "injected": injected_totals(injected),
        "zookeeper": "not applicable: a ZooKeeper member's pings cannot be dropped without netem",
    }


def start_lossy_hosts(uri: str, config: Config, root: Path) -> list[ServerProcess]:
    hosts = []
    for index, first in enumerate(range(0, config.size, config.silos_per_host)):
        count = min(config.silos_per_host, config.size - first)
        argv = [sys.executable, "-m", "benchmarks.silo_host", "--table", uri, "--cluster", CLUSTER,
                "--count", str(count), "--probe-loss", str(config.probe_loss),
                "--probe-delay", str(config.probe_delay), "--seed", str(config.seed + first)]  # fmt: skip
        env = {"PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"}
        hosts.append(ServerProcess(argv, root / f"host-{index}.log", env=env))
    return hosts


def wait_active(table: MembershipTable, size: int, hosts: list[ServerProcess]) -> None:
    def all_active() -> bool:
        exited = [host for host in hosts if not host.running]
        if exited:
            raise RuntimeError(f"a silo host exited during the join; see {exited[0].log}")
        with contextlib.suppress(TableUnavailableError):
            return sum(e.status is SiloStatus.ACTIVE for e in table.read_all().entries) >= size
        return False

    wait_until(all_active, JOIN_TIMEOUT, f"{size} Active silos", hosts[0].log)


def injected_totals(lines: list[str]) -> dict[str, int]:
    """Sum the hosts' ``injected forwarded=A dropped=B delayed=C`` lines."""
    totals = {"forwarded": 0, "dropped": 0, "delayed": 0}
    for line in lines:
        if line.startswith("injected "):
            for pair in line.split()[1:]:
                name, value = pair.split("=")
                totals[name] += int(value)
    return totals


def zookeeper_run(hosts: str, stall: float, config: Config, root: Path, label: str) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    group = ZkGroup(root, hosts, f"/bench/{label}", floor_seconds())
    try:
        group.start(config.size)
        names = group.running
        stalled = _Member(group.members[names[0]])
        hog = CpuHog(HOG_CPU)
        pin(group.pid(names[0]), HOG_CPU)
        staller = Staller(stalled, stall, config.stall_gap)
        jitter = Jitter(
            [_Member(group.members[n]) for n in names[1:]],
            config.jitter_fraction,
            config.jitter_mean_burst,
            config.seed,
        )
        try:
            time.sleep(config.seconds)
        finally:
            staller.stop()
            jitter.stop()
            hog.stop()
        time.sleep(floor_seconds() * 2)
        expired = group.false_positives()
        return {
            "live_members_expired": len(expired),
            "stalled_member_expired": names[0] in expired,
            "stalls": staller.events,
            "jitter_pauses": jitter.events,
        }
    finally:
        group.close()


# --- real packet loss: silos and ZooKeeper in a NetworkLab ---------------------------------


def loss_label(loss: float) -> str:
    """The level's key in the results (``loss_10pct``): stable, and sorts as the levels do."""
    return f"loss_{round(loss * 100)}pct"


def loss_target(loss: float) -> str | None:
    """The issue's target at this loss level (``None``: the level has none)."""
    if math.isclose(loss, 0.10) or math.isclose(loss, 0.20):
        return "zero"
    if math.isclose(loss, 0.30):
        return "tenth_of_zookeeper"
    return None


def target_met(target: str | None, declared: int, zookeeper_expired: int) -> bool | None:
    """Whether the level met its target; ``None`` for a level without one (chosen with ``--loss-levels``)."""
    if target == "zero":
        return declared == 0
    if target == "tenth_of_zookeeper":
        return declared * 10 <= zookeeper_expired
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


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``; psutil is not installed)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


class CpuMeter:
    """Each process's CPU use over the span it was sampled, grouped by kind (silo, member, server)."""

    def __init__(self) -> None:
        self._spans: dict[tuple[str, int], list[float]] = {}

    def sample(self, kind: str, pids: Iterable[int]) -> None:
        now = time.monotonic()
        for pid in pids:
            used = cpu_seconds(pid)
            if used is not None:
                span = self._spans.setdefault((kind, pid), [now, used, now, used])
                span[2], span[3] = now, used

    def percent(self, kind: str) -> dict[str, float]:
        """Mean and max % of one core over the processes of ``kind`` sampled for at least a second."""
        values = [
            100.0 * (span[3] - span[1]) / (span[2] - span[0])
            for (k, _), span in self._spans.items()
            if k == kind and span[2] - span[0] >= 1.0
        ]
        if not values:
            return {"processes": 0, "mean": math.nan, "max": math.nan}
        return {"processes": len(values), "mean": sum(values) / len(values), "max": max(values)}


_COUNTER_RE = re.compile(r"^\[(\d+):\d+\] -A (\S+) (.*)$")


def loss_counters(hosts: Sequence[Host]) -> tuple[int, int]:
    """Packets that entered the loss chain and packets it dropped, summed over ``hosts``.

    Read from the rule counters (``iptables-save -c``), so the loss actually applied is measured,
    not assumed. The DROP rule is replaced by every ``set_loss``, so its count starts at loss-on;
    the INPUT jump's count is cumulative, so the caller subtracts its loss-on reading.
    """
    save = f"{iptables_backend()}-save"
    entered = dropped = 0
    for host in hosts:
        for line in host.run([save, "-c"], timeout=30).stdout.splitlines():
            match = _COUNTER_RE.match(line)
            if match is None:
                continue
            chain, rule = match.group(2), match.group(3)
            if chain == "INPUT" and rule.endswith(f"-j {LOSS_CHAIN}"):
                entered += int(match.group(1))
            elif chain == LOSS_CHAIN and rule.endswith("-j DROP"):
                dropped += int(match.group(1))
    return entered, dropped


def exit_name(code: int | None) -> str:
    """A silo's exit code by name (``DECLARED_DEAD``, ``JOIN_FAILED``...), so the JSON says why it stopped."""
    if code is None:
        return "running"
    if code < 0:
        return f"signal {-code}"
    with contextlib.suppress(ValueError):
        return ExitCode(code).name
    return f"exit {code}"


def poll_net(cluster: NetCluster, votes: set[tuple[str, str, float]], declared: set[str]) -> int | None:
    """One table read into ``votes``/``declared`` (as ``poll``); the number of Dead rows, None if unreadable."""
    try:
        data = cluster.read()
    except MembershipTableError:
        return None
    for entry in data.entries:
        for voter, when in entry.suspect_times:
            votes.add((str(entry.silo_address), str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD:
            declared.add(str(entry.silo_address))
    return sum(entry.status is SiloStatus.DEAD for entry in data.entries)


def history_counts(history_dir: Path, cut: float) -> dict[str, Any]:
    """False deaths and votes from every silo's recorded writes up to wall time ``cut``.

    A Dead row written by anyone but the silo itself is a declaration (the silos' own Dead rows
    are graceful leaves or abandoned joins). A new generation on the same endpoint declaring
    its predecessor dead is counted apart: that is the restart, not the failure detector.
    """
    records = load_history(history_dir) if history_dir.exists() else []
    votes: set[tuple[str, str, float]] = set()
    declared: dict[str, str] = {}
    successor = 0
    for record in records:
        if record.recorded_at.timestamp() > cut:
            continue
        entry = record.entry
        target = str(entry.silo_address)
        for voter, when in entry.suspect_times:
            votes.add((target, str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD and record.writer != target:
            if SiloAddress.parse(record.writer).endpoint == entry.silo_address.endpoint:
                successor += 1
            else:
                declared.setdefault(target, record.writer)
    return {
        "records": len(records),
        "declared": declared,
        "votes": len(votes),
        "voters": len({voter for _, voter, _ in votes}),
        "successor_declarations": successor,
    }


def network_level(loss: float, config: Config, root: Path) -> dict[str, Any]:
    """One loss level in a fresh lab: silos and ZooKeeper members side by side, same loss, same time."""
    floor = floor_seconds()
    label = loss_label(loss)
    root.mkdir(parents=True, exist_ok=True)
    cluster = LossCluster(root, cluster_id=f"accuracy-{label.replace('_', '-')}")
    with cluster:
        server = LabZooKeeper(cluster.lab.add_host("zk"), root / "zookeeper")
        group: LabZkGroup | None = None
        serf: dict[str, SerfGroup] = {}
        try:
            server.start()
            cluster.start(config.loss_size, timeout=JOIN_TIMEOUT)
            group = LabZkGroup(server, cluster.hosts, f"/accuracy/{label}", floor, root / "zk-members")
            group.start()
            for profile in config.serf_profiles:
                serf[profile] = SerfGroup(profile, root / f"serf-{profile}")
                serf[profile].start_on(cluster.hosts)
            return measure_loss(cluster, server, group, serf, loss, config)
        finally:
            for agents in serf.values():
                agents.close()
            if group is not None:
                group.close()
            server.stop()


def measure_loss(
    cluster: LossCluster,
    server: LabZooKeeper,
    group: LabZkGroup,
    serf: dict[str, SerfGroup],
    loss: float,
    config: Config,
) -> dict[str, Any]:
    """Hold ``loss`` on every host for ``config.loss_seconds`` and count both systems' false positives.

    Every 0.5 s: one table read (a live tally for the progress lines), restarts of the silos that
    exited, and CPU samples. The counts themselves come afterwards from records that cannot miss
    an event between polls: the silos' history files and the observer's and server's logs.
    """
    floor = floor_seconds()
    hosts = cluster.lab.hosts
    meter = CpuMeter()
    votes: set[tuple[str, str, float]] = set()
    declared: set[str] = set()
    exits: Counter[str] = Counter()
    exited_at: dict[int, float] = {}
    restarts = 0
    entered_before, _ = loss_counters(hosts)
    loss_on = wall()
    cluster.lab.set_loss(loss)
    started = time.monotonic()
    deadline = started + config.loss_seconds
    next_progress = started + PROGRESS_EVERY
    while (now := time.monotonic()) < deadline:
        poll_net(cluster, votes, declared)
        for silo in cluster.current().values():
            if silo.running:
                continue
            if silo.pid not in exited_at:
                exited_at[silo.pid] = now
                exits[exit_name(silo.exit_code)] += 1
            elif config.restart_declared and now - exited_at[silo.pid] >= floor:
                del exited_at[silo.pid]
                cluster.respawn(silo.host)
                restarts += 1
        meter.sample("silo", [silo.pid for silo in cluster.current().values() if silo.running])
        meter.sample("zk_member", group.pids().values())
        meter.sample("zk_server", [server.pid] if server.pid is not None else [])
        for profile, agents in serf.items():
            meter.sample(f"serf_{profile}", agents.pids().values())
        if now >= next_progress:
            next_progress += PROGRESS_EVERY
            print(
                f"[accuracy]   {loss:.0%} loss, {now - started:.0f}/{config.loss_seconds:.0f} s: "
                f"{len(declared)} Dead rows, {len(votes)} votes, "
                f"{group.tally(wall()).total_expired} ZooKeeper sessions expired"
                + "".join(
                    f", Serf {profile} {agents.tally(loss_on, wall()).total_failures} failures"
                    for profile, agents in serf.items()
                ),
                flush=True,
            )
        time.sleep(NETWORK_POLL)
    entered_after, dropped = loss_counters(hosts)
    cluster.lab.set_loss(0.0)
    time.sleep(2 * floor)  # let a declaration or an expiry already under way land
    cut = wall()
    dead_rows = poll_net(cluster, votes, declared)
    zookeeper = group.tally(cut)
    serf_tallies = {profile: agents.tally(loss_on, cut) for profile, agents in serf.items()}
    for silo in cluster.current().values():
        if not silo.running and silo.pid not in exited_at:  # exited during the grace period
            exits[exit_name(silo.exit_code)] += 1
    running = sum(silo.running for silo in cluster.current().values())
    cluster.stop()  # graceful, so every write is recorded before the history is read
    history = history_counts(cluster.history_dir, cut)
    entered = entered_after - entered_before
    silos = {
        "live_silos_declared_dead": len(history["declared"]),
        "declared": sorted(history["declared"]),
        "suspicion_votes": history["votes"],
        "voters": history["voters"],
        "dead_rows_in_table": dead_rows,
        "suspicion_votes_polled": len(votes),
        "exits": dict(exits),
        "restarts": restarts,
        "successor_declarations": history["successor_declarations"],
        "history_records": history["records"],
        "running_at_end": running,
        "cpu_percent_per_silo": meter.percent("silo"),
    }
    target = loss_target(loss)
    return {
        "loss": loss,
        "seconds": config.loss_seconds,
        "size": config.loss_size,
        "packets": {
            "entered_loss_chain": entered,
            "dropped": dropped,
            "measured_loss": dropped / entered if entered else math.nan,
        },
        "silos": silos,
        "zookeeper": {
            **zookeeper.to_json(),
            "cpu_percent_per_member": meter.percent("zk_member"),
            "cpu_percent_server": meter.percent("zk_server"),
        },
        "serf": {
            profile: {
                **tally.to_json(),
                "cpu_percent_per_agent": meter.percent(f"serf_{profile}"),
                "timings": PROFILE_TIMINGS[profile],
            }
            for profile, tally in serf_tallies.items()
        },
        "target": target,
        "target_met": target_met(target, silos["live_silos_declared_dead"], zookeeper.total_expired),
    }


def network_runs(config: Config, root: Path) -> dict[str, Any]:
    reason = network_unavailable_reason()
    if reason is not None:
        print(f"[accuracy] skipping the real-network loss runs: {reason}", flush=True)
        return {"skipped": reason}
    serf_reason = serf_unavailable_reason() if config.serf_profiles else None
    if serf_reason is not None:
        print(f"[accuracy] Serf left out of the real-network runs: {serf_reason}", flush=True)
        config = dataclasses.replace(config, serf_profiles=())
    levels: dict[str, Any] = {}
    for loss in config.loss_levels:
        others = "".join(f", Serf {profile}" for profile in config.serf_profiles)
        print(f"[accuracy] silos, ZooKeeper{others}: {loss:.0%} packet loss in a network lab", flush=True)
        levels[loss_label(loss)] = network_level(loss, config, root / f"net-{loss_label(loss)}")
    result: dict[str, Any] = {"session_timeout_s": floor_seconds(), "levels": levels}
    if serf_reason is not None:
        result["serf_unavailable"] = serf_reason
    return result


def measure(config: Config) -> dict[str, Any]:
    """Every chosen scenario in one temp dir. The network runs are synchronous and run in the main
    thread (not under ``asyncio.to_thread``), so that Ctrl-C stops a ten-minute level at once and
    its lab is torn down on the way out."""
    with workdir(NAME) as root:
        results = asyncio.run(run(config, root))
        if "network" in config.scenarios:
            results["network_loss"] = network_runs(config, root)
    return results


async def run(config: Config, root: Path) -> dict[str, Any]:
    """The stall and probe-loss scenarios (the ones driven from an event loop)."""
    floor = floor_seconds()
    results: dict[str, Any] = {"floor_s": floor, "size": config.size, "seconds": config.seconds, "runs": {}}
    if "stall" in config.scenarios:
        with services.zookeeper(root) as zookeeper:
            for fraction in config.stall_fractions:
                stall = round(fraction * floor, 3)
                label = f"stall_{stall}s"
                print(f"[accuracy] silos, {label}", flush=True)
                uri = f"sqlite:///{root / f'{label}.db'}"
                silos: dict[str, Any] = await silo_run(uri, stall, config, root / f"silos-{label}")
                print(f"[accuracy] zookeeper, {label}", flush=True)
                zk = await asyncio.to_thread(
                    zookeeper_run, zookeeper.hosts, stall, config, root / f"zk-{label}", label.replace(".", "_")
                )
                results["runs"][label] = {
                    "stall_s": stall,
                    "stall_fraction_of_floor": fraction,
                    "silos": silos,
                    "zookeeper": zk,
                }
    if "probe_loss" in config.scenarios:
        print("[accuracy] silos, probe loss and delay in the prober", flush=True)
        uri = f"sqlite:///{root / 'probe_loss.db'}"
        lossy = await probe_loss_run(uri, config, root / "silos-probe_loss")
        results["probe_loss_10pct"] = {
            **lossy,
            "target": "zero",
            "target_met": lossy["live_silos_declared_dead"] == 0,
        }
    return results


def met(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def target_text(target: str | None, zookeeper_expired: int) -> str:
    if target == "zero":
        return "0"
    if target == "tenth_of_zookeeper":
        return f"<= {zookeeper_expired / 10:g} (ZooKeeper / 10)"
    return "none"


def report(results: dict[str, Any]) -> None:
    if results["runs"]:
        rows = [
            [label, entry["stall_s"], entry["silos"]["live_silos_declared_dead"], entry["silos"]["suspicion_votes"],
             entry["zookeeper"]["live_members_expired"], entry["silos"]["stalls"], entry["silos"]["jitter_pauses"]]
            for label, entry in results["runs"].items()
        ]  # fmt: skip
        print_table(
            f"False positives in {results['seconds']:.0f}s, N={results['size']}, stall + CPU hog + ~10% SIGSTOP jitter",
            ["run", "stall s", "silos declared dead", "votes cast", "ZooKeeper sessions expired", "stalls",
             "jitter pauses"],
            rows,
        )  # fmt: skip
    lossy = results.get("probe_loss_10pct")
    if lossy is not None:
        injected = lossy["injected"]
        print_table(
            f"Probe loss in the prober, {results['seconds']:.0f}s, N={results['size']} in {lossy['hosts']} processes",
            ["probes dropped", "probes delayed", "silos declared dead", "votes cast",
             "injected dropped/delayed/forwarded", "ZooKeeper", "target", "met"],
            [[f"{lossy['probe_loss']:.0%}", f"{lossy['probe_delay']:.0%}", lossy["live_silos_declared_dead"],
              lossy["suspicion_votes"], f"{injected['dropped']}/{injected['delayed']}/{injected['forwarded']}",
              "not applicable", "0", met(lossy.get("target_met"))]],
        )  # fmt: skip
    network = results.get("network_loss")
    if network is None:
        return
    if "skipped" in network:
        print(f"\nReal-network loss runs skipped: {network['skipped']}")
        return
    rows = []
    for entry in network["levels"].values():
        silos, zk = entry["silos"], entry["zookeeper"]
        rows.append(
            [f"{entry['loss']:.0%}", f"{entry['packets']['measured_loss']:.1%}", silos["live_silos_declared_dead"],
             silos["suspicion_votes"], zk["live_sessions_expired"],
             f"{zk['server_expired_member_sessions']}/{zk['members_reregistered']}", silos["restarts"],
             silos["cpu_percent_per_silo"]["mean"], zk["cpu_percent_per_member"]["mean"],
             target_text(entry["target"], zk["live_sessions_expired"]), met(entry["target_met"])]
        )  # fmt: skip
    first = next(iter(network["levels"].values()), None)
    size, seconds = (first["size"], first["seconds"]) if first else (0, 0.0)
    print_table(
        f"Real network: iptables loss on every host, N={size} silos + {size} ZooKeeper members "
        f"(session timeout {network['session_timeout_s']} s), {seconds:.0f}s per level",
        ["loss", "measured", "silos declared dead", "votes cast", "ZooKeeper sessions expired",
         "ZK server-logged/re-registered", "silo restarts", "CPU % per silo", "CPU % per ZK member", "target", "met"],
        rows,
    )  # fmt: skip
    serf_rows = [
        [f"{entry['loss']:.0%}", profile, serf["live_members_failed"], serf["member_failed_events"],
         serf["declarations"], serf["suspicions"], serf["refutations"], serf["failed_at_end"],
         serf["cpu_percent_per_agent"]["mean"], entry["silos"]["live_silos_declared_dead"],
         entry["zookeeper"]["live_sessions_expired"]]
        for entry in network["levels"].values()
        for profile, serf in entry.get("serf", {}).items()
    ]  # fmt: skip
    if serf_rows:
        print_table(
            f"Serf in the same lab at the same time, N={size} agents per profile (one beside each silo)",
            SERF_HEADERS,
            serf_rows,
        )
    if "serf_unavailable" in network:
        print(f"Serf not measured: {network['serf_unavailable']}")


SERF_HEADERS = ["loss", "profile", "live members failed", "member-failed events (all views)", "declarations",
                "suspicions", "refutations", "failed at end", "CPU % per agent", "silos declared dead",
                "ZooKeeper sessions expired"]  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    network = results.get("network_loss", {})
    levels: dict[str, Any] = network.get("levels", {})
    stress = bool(results["runs"]) or "probe_loss_10pct" in results
    panels = int(stress) + int(bool(levels)) or 1
    figure, axes = plt.subplots(1, panels, figsize=(8 * panels, 4.5), squeeze=False)
    axis_iter = iter(axes[0])
    if stress:
        axis = next(axis_iter)
        runs = {label: entry["silos"] for label, entry in results["runs"].items()}
        expired = [float(entry["zookeeper"]["live_members_expired"]) for entry in results["runs"].values()]
        if "probe_loss_10pct" in results:
            runs["probe_loss_10pct"] = results["probe_loss_10pct"]
            expired.append(math.nan)
        labels = list(runs)
        grouped_bars(
            axis,
            labels,
            {
                "silos: live silos declared dead": [float(runs[k]["live_silos_declared_dead"]) for k in labels],
                "silos: suspicion votes cast": [float(runs[k]["suspicion_votes"]) for k in labels],
                "ZooKeeper: live sessions expired (n/a for probe loss)": expired,
            },
            "count over the run",
        )
        axis.set_title(f"false positives under stress (floor {results['floor_s']}s)")
    if levels:
        axis = next(axis_iter)
        labels = [f"{entry['loss']:.0%} loss" for entry in levels.values()]
        grouped_bars(
            axis,
            labels,
            {
                "silos: live silos declared dead": [
                    float(e["silos"]["live_silos_declared_dead"]) for e in levels.values()
                ],
                "ZooKeeper: live sessions expired": [
                    float(e["zookeeper"]["live_sessions_expired"]) for e in levels.values()
                ],
                **{
                    f"Serf {profile}: live members failed": [
                        float(e.get("serf", {}).get(profile, {}).get("live_members_failed", math.nan))
                        for e in levels.values()
                    ]
                    for profile in PROFILES
                    if any(profile in e.get("serf", {}) for e in levels.values())
                },
            },
            "count over the level",
        )
        first = next(iter(levels.values()))
        axis.set_title(
            f"real packet loss (iptables), N={first['size']}, {first['seconds']:.0f}s per level, "
            f"session timeout = floor {network['session_timeout_s']}s"
        )
    if not stress and not levels:
        axis = next(axis_iter)
        axis.text(0.5, 0.5, network.get("skipped", "nothing measured"), ha="center", va="center", wrap=True)
        axis.set_axis_off()
    save_figure(figure, path)


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus this benchmark's own (see the module docstring), applied over the preset."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--scenarios", default=None)
    extra.add_argument("--loss-levels", default=None)
    extra.add_argument("--loss-seconds", type=float, default=None)
    extra.add_argument("--loss-size", type=int, default=None)
    extra.add_argument("--serf-profiles", default=None)
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    changes: dict[str, Any] = {}
    if known.scenarios is not None:
        changes["scenarios"] = choices_list(known.scenarios, SCENARIOS, "--scenarios")
    if known.loss_levels is not None:
        levels = tuple(float(level) for level in known.loss_levels.split(",") if level.strip())
        if not levels or not all(0.0 < level < 1.0 for level in levels):
            raise SystemExit(f"--loss-levels must be fractions between 0 and 1, got {known.loss_levels!r}")
        changes["loss_levels"] = levels
    if known.loss_seconds is not None:
        changes["loss_seconds"] = known.loss_seconds
    if known.loss_size is not None:
        changes["loss_size"] = known.loss_size
    if known.serf_profiles is not None:
        none = known.serf_profiles.strip() == "none"
        changes["serf_profiles"] = () if none else choices_list(known.serf_profiles, PROFILES, "--serf-profiles")
    return settings, dataclasses.replace(config, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)
    arguments = list(argv if argv is not None else sys.argv[1:])  # the recorded command omits the extra flags
    extra = {"options": asdict(SiloOptions.local()), "netem": False, "arguments": arguments}
    return run_benchmark(NAME, settings, config, lambda: measure(config), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
