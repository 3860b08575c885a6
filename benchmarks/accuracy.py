"""Accuracy under stress: how many live silos are declared dead? Target: zero.

N real silos (local preset) on SQLite (a file: the stress hits probes, not the store) run
for a fixed time while (see ``benchmarks.stress``): one silo is stalled by SIGSTOP for a
fraction of the detection floor (``num_missed_probes_limit x probe_timeout``) every few
seconds, pinned to one CPU beside a busy-looping hog; and every other silo is SIGSTOPped
in short bursts about 10% of its time, which delays probes to and from it. Nobody is
killed, so every Dead row is a false positive; a silo declared dead exits (and is
replaced, to keep N). Suspicion votes are counted too (the table is polled every 0.5 s).

Baseline, same stress: N ZooKeeper members (ephemeral znodes, session timeout = the floor);
a member whose node vanishes while its process lives is a false positive.

``tc netem`` inside network namespaces was the first choice for packet delay and loss;
this machine's kernel lacks ``sch_netem`` ("Specified qdisc kind is unknown"), so the
SIGSTOP bursts stand in for it above, and one more scenario (``probe_loss``) injects the
loss in the prober instead: N silos in ``benchmarks.silo_host`` processes, every silo's
prober wrapped in ``benchmarks.lossy_prober.LossyProber`` (10% of pings and indirect-probe
requests dropped, 10% delayed by up to 0.8 x the probe timeout), no other stress. A
ZooKeeper member's pings cannot be dropped without netem, so that scenario has no baseline.

    python -m benchmarks.accuracy [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import (
    ROOT,
    benchmark_main,
    grouped_bars,
    print_table,
    pyplot,
    save_figure,
    workdir,
)
from benchmarks.silo_cluster import JOIN_TIMEOUT, BenchCluster
from benchmarks.stress import CpuHog, Jitter, Staller, pin
from benchmarks.zk_group import ZkGroup
from membership_tables import MembershipTable, SiloStatus, TableUnavailableError, open_table
from silo.membership.options import SiloOptions
from tests.services.process import ServerProcess, wait_until

NAME = "accuracy"
CLUSTER = "accuracy-probe-loss"
HOG_CPU = 0


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

    @classmethod
    def quick(cls) -> Config:
        return cls(size=5, seconds=10.0, stall_fractions=(0.5,))


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


async def run(config: Config) -> dict[str, Any]:
    floor = floor_seconds()
    results: dict[str, Any] = {"floor_s": floor, "size": config.size, "seconds": config.seconds, "runs": {}}
    with workdir(NAME) as root, services.zookeeper(root) as zookeeper:
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
        print("[accuracy] silos, probe loss and delay in the prober", flush=True)
        uri = f"sqlite:///{root / 'probe_loss.db'}"
        results["probe_loss_10pct"] = await probe_loss_run(uri, config, root / "silos-probe_loss")
    return results


def report(results: dict[str, Any]) -> None:
    rows = [
        [label, entry["stall_s"], entry["silos"]["live_silos_declared_dead"], entry["silos"]["suspicion_votes"],
         entry["zookeeper"]["live_members_expired"], entry["silos"]["stalls"], entry["silos"]["jitter_pauses"]]
        for label, entry in results["runs"].items()
    ]  # fmt: skip
    print_table(
        f"False positives in {results['seconds']:.0f}s, N={results['size']}, stall + CPU hog + ~10% SIGSTOP jitter",
        [
            "run",
            "stall s",
            "silos declared dead",
            "votes cast",
            "ZooKeeper sessions expired",
            "stalls",
            "jitter pauses",
        ],
        rows,
    )
    lossy = results["probe_loss_10pct"]
    injected = lossy["injected"]
    print_table(
        f"Probe loss in the prober, {results['seconds']:.0f}s, N={results['size']} in {lossy['hosts']} processes",
        ["probes dropped", "probes delayed", "silos declared dead", "votes cast", "injected dropped/delayed/forwarded",
         "ZooKeeper"],
        [[f"{lossy['probe_loss']:.0%}", f"{lossy['probe_delay']:.0%}", lossy["live_silos_declared_dead"],
          lossy["suspicion_votes"], f"{injected['dropped']}/{injected['delayed']}/{injected['forwarded']}",
          "not applicable"]],
    )  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    runs = {label: entry["silos"] for label, entry in results["runs"].items()}
    runs["probe_loss_10pct"] = results["probe_loss_10pct"]
    labels = list(runs)
    expired = [float(entry["zookeeper"]["live_members_expired"]) for entry in results["runs"].values()]
    grouped_bars(
        axis,
        labels,
        {
            "silos: live silos declared dead": [float(runs[k]["live_silos_declared_dead"]) for k in labels],
            "silos: suspicion votes cast": [float(runs[k]["suspicion_votes"]) for k in labels],
            "ZooKeeper: live sessions expired (n/a for probe loss)": [*expired, math.nan],
        },
        "count over the run",
    )
    axis.set_title(f"false positives under stress (floor {results['floor_s']}s)")
    save_figure(figure, path)


def main(argv: Sequence[str] | None = None) -> int:
    extra = {"options": asdict(SiloOptions.local()), "netem": False}
    return benchmark_main(NAME, __doc__, argv, Config, lambda config: asyncio.run(run(config)), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
