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
SIGSTOP bursts stand in for it, as the task allowed.

    python -m benchmarks.accuracy [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import (
    benchmark_main,
    grouped_bars,
    print_table,
    pyplot,
    workdir,
)
from benchmarks.silo_cluster import BenchCluster
from benchmarks.stress import CpuHog, Jitter, Staller, pin
from benchmarks.zk_group import ZkGroup
from membership_tables import SiloStatus, TableUnavailableError
from silo.options import SiloOptions
from tests.services.process import ServerProcess

NAME = "accuracy"
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
                await poll(bench, votes, declared)
                await asyncio.sleep(0.5)
        finally:
            staller.stop()
            jitter.stop()
            hog.stop()
        await asyncio.sleep(floor_seconds() * 2)  # let a declaration already under way land
        await poll(bench, votes, declared)
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


async def poll(bench: BenchCluster, votes: set[tuple[str, str, float]], declared: set[str]) -> None:
    try:
        data = await asyncio.to_thread(bench.cluster.read)
    except TableUnavailableError:
        return
    for entry in data.entries:
        for voter, when in entry.suspect_times:
            votes.add((str(entry.silo_address), str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD:
            declared.add(str(entry.silo_address))


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


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    labels = list(results["runs"])
    grouped_bars(
        axis,
        labels,
        {
            "silos: live silos declared dead": [
                float(results["runs"][k]["silos"]["live_silos_declared_dead"]) for k in labels
            ],
            "silos: suspicion votes cast": [float(results["runs"][k]["silos"]["suspicion_votes"]) for k in labels],
            "ZooKeeper: live sessions expired": [
                float(results["runs"][k]["zookeeper"]["live_members_expired"]) for k in labels
            ],
        },
        "count over the run",
    )
    axis.set_title(f"false positives under stress (floor {results['floor_s']}s)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    extra = {"options": asdict(SiloOptions.local()), "netem": False}
    return benchmark_main(NAME, __doc__, argv, Config, lambda config: asyncio.run(run(config)), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
