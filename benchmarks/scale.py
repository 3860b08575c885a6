"""Scale: as many silos as this machine holds, joining one PostgreSQL table at once.

``benchmarks.silo_host`` processes hold several silos each (full Silo runtime, own gRPC
server and port per silo). All start together; the benchmark polls the table until every
silo is Active (time to all Active, and the curve), then counts the silos' statements in
steady state with ``pg_stat_statements`` (reads, full reads, canonical writes, heartbeats
per second), measures resident memory per silo, and finally starts one more silo as its
own ``silo run`` process and SIGKILLs it, a few times, timing crash to Dead at that size.

Timings are scaled up from the local preset so that probing fits two cores (see
``OVERRIDES``; the JSON records them), so the detection floor here is
``num_missed_probes_limit x probe_timeout`` of those options.

    python -m benchmarks.scale [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import signal
import sys
import time
from collections import Counter
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
    ratio,
    save_figure,
    summarize,
    wall,
    workdir,
)
from benchmarks.propagation import statement_counts
from benchmarks.silo_cluster import BenchCluster, KillTrial
from membership_tables import TableUnavailableError, open_table
from silo.membership.options import SiloOptions
from tests.services.process import ServerProcess

NAME = "scale"
OVERRIDES = {
    "probe_timeout": "2s",
    "num_probed_silos": "3",
    "death_vote_expiration": "60s",
    "i_am_alive_table_publish_timeout": "10s",
    "table_refresh_timeout": "30s",
    "full_refresh_every": "3",
    "max_join_attempt_time": "600s",
    "use_liveness_gossip": "false",
}
"""Per silo: 3 probes every 2 s, a heartbeat every 10 s, a version read every 30 s and a full
re-read every 90 s (or when the version moved), no gossip.

With gossip on, every one of the ~400 writes of a 200-silo join storm makes every live silo
re-read the whole table: on this two-core machine that drove the load average to 85 within
four minutes, with silos still joining and the first live silos being declared dead, and the
run was stopped (see docs/benchmarks.md). Without gossip, silos learn of changes by their
own reads (join, votes) and the periodic refresh."""
OVERLOAD = 30.0 * (os.cpu_count() or 1)
"""A one-minute load average above this (after ``OVERLOAD_GRACE`` s) stops a join that does not fit."""
OVERLOAD_GRACE = 60.0


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...] = (200, 400)
    """Cluster sizes tried in turn (a fresh cluster each); the run stops at the first that fails."""
    per_process: int = 20
    join_timeout: float = 300.0
    steady_window: float = 20.0
    detection_trials: int = 5
    seed: int = 3

    @classmethod
    def quick(cls) -> Config:
        return cls(sizes=(20,), per_process=10, join_timeout=120.0, steady_window=5.0, detection_trials=1)


def options() -> SiloOptions:
    return SiloOptions.local().with_overrides(OVERRIDES)


def set_arguments() -> list[str]:
    return [argument for name, value in OVERRIDES.items() for argument in ("--set", f"{name}={value}")]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def start_hosts(uri: str, silos: int, config: Config, root: Path) -> list[ServerProcess]:
    hosts = []
    remaining = silos
    index = 0
    while remaining > 0:
        count = min(config.per_process, remaining)
        argv = [
            sys.executable,
            "-m",
            "benchmarks.silo_host",
            "--table",
            uri,
            "--cluster",
            "scale",
            "--count",
            str(count),
        ]
        env = {"PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"}
        hosts.append(ServerProcess([*argv, *set_arguments()], root / f"host-{index}.log", env=env))
        remaining -= count
        index += 1
    return hosts


def wait_all_active(
    uri: str, silos: int, config: Config, started: float, hosts: list[ServerProcess]
) -> list[tuple[float, int]]:
    """(seconds since start, Active silos) once a second until all are Active.

    Raises (saying how far the join got) on timeout, if a host exits, or if the machine is
    overloaded (``OVERLOAD``) after ``OVERLOAD_GRACE`` seconds: a size that does not fit is
    recorded as such instead of starving everything else on the machine for minutes.
    """
    table = open_table(uri, "scale")
    curve: list[tuple[float, int]] = []
    statuses: Counter[str] = Counter()
    while True:
        elapsed = wall() - started
        with contextlib.suppress(TableUnavailableError):
            statuses = Counter(entry.status.name for entry in table.read_all().entries)
        curve.append((elapsed, statuses["ACTIVE"]))
        if statuses["ACTIVE"] >= silos:
            return curve
        progress = f"{dict(statuses)} of {silos} silos after {elapsed:.0f}s"
        load = os.getloadavg()[0]
        if elapsed > OVERLOAD_GRACE and load > OVERLOAD:
            raise RuntimeError(f"stopped: load average {load:.0f} on {os.cpu_count()} cores with {progress}")
        if elapsed > config.join_timeout:
            raise RuntimeError(f"not all Active: {progress}")
        exited = [host for host in hosts if not host.running]
        if exited:
            tail = "\n".join(exited[0].log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"a silo host exited during the join ({progress}); its log ends:\n{tail}")
        time.sleep(1.0)


async def detection_at_scale(uri: str, config: Config, root: Path) -> list[KillTrial]:
    """Start one separate ``silo run`` and SIGKILL it, ``detection_trials`` times; the table's view of it."""
    # The victim alone gossips, so that its join reaches every hosted silo at once (one re-read each).
    arguments = [*set_arguments(), "--set", "use_liveness_gossip=true"]
    bench = BenchCluster(root, uri, "scale", arguments)
    rng = random.Random(config.seed)
    trials = []
    try:
        for _ in range(config.detection_trials):
            await asyncio.to_thread(bench.cluster.start_active, 1, *arguments, timeout=config.join_timeout)
            await asyncio.sleep(2 * options().probe_timeout)  # its probers have started
            trials.append(await bench.kill_one(rng))
    finally:
        await bench.close()
    return trials


async def run(config: Config, root: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"floor_s": options().detection_time, "sizes": {}}
    for silos in config.sizes:
        print(f"[scale] {silos} silos", flush=True)
        try:
            results["sizes"][str(silos)] = await one_size(silos, config, root / str(silos))
        except (RuntimeError, AssertionError) as exc:  # this size did not fit: say so, try no larger one
            results["sizes"][str(silos)] = {"silos": silos, "error": str(exc)[:3000]}
            print(f"[scale] {silos} silos failed: {str(exc)[:300]}", flush=True)
            break
    return results


async def one_size(silos: int, config: Config, root: Path) -> dict[str, Any]:
    root.mkdir(parents=True)
    with services.postgres(stats=True) as server:
        database = services.unique("scale")
        uri = server.create_database(database)
        with server.connect(database) as connection:
            connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        open_table(uri, "scale").initialize()
        started = wall()
        hosts = start_hosts(uri, silos, config, root)
        try:
            curve = await asyncio.to_thread(wait_all_active, uri, silos, config, started, hosts)
            all_active = curve[-1][0]
            print(f"[scale] {silos} silos Active after {all_active:.1f}s", flush=True)
            await asyncio.sleep(5.0)
            before = statement_counts(server, database)
            await asyncio.sleep(config.steady_window)
            after = statement_counts(server, database)
            per_second = {key: (after[key] - before[key]) / config.steady_window for key in after}
            host_rss = [rss_mb(host.process.pid) for host in hosts]
            trials = await detection_at_scale(uri, config, root)
        finally:
            for host in hosts:  # SIGKILL: a graceful leave of hundreds of silos is not measured, only slow
                host.signal(signal.SIGKILL)
                host.stop()
    floor = options().detection_time
    dead = summarize([t.table_dead for t in trials if t.table_dead is not None])
    return {
        "silos": silos,
        "processes": len(hosts),
        "all_active_s": all_active,
        "join_curve": curve,
        "steady_ops_per_s": per_second,
        "steady_ops_per_s_per_silo": {key: value / silos for key, value in per_second.items()},
        "rss_mb_per_process": host_rss,
        "rss_mb_per_silo": sum(host_rss) / silos,
        "detection_table_dead": dead,
        "detection_ratio_to_floor": {"median": ratio(dead["median"], floor), "p99": ratio(dead["p99"], floor)},
        "detection_trials": [t.to_json() for t in trials],
    }


def report(results: dict[str, Any]) -> None:
    rows: list[list[object]] = []
    for size, entry in results["sizes"].items():
        if "error" in entry:
            rows.append([size, "-", "failed", "-", "-", "-", "-", "-", "-", "-"])
            continue
        ops = entry["steady_ops_per_s"]
        rows.append(
            [size, entry["processes"], entry["all_active_s"], entry["rss_mb_per_silo"], ops["full_reads"],
             ops["all_reads"], ops["version_writes"], ops["heartbeats"], ops["statements"],
             entry["detection_table_dead"]["median"]]
        )  # fmt: skip
    print_table(
        f"Silos on one PostgreSQL table (floor {results['floor_s']}s)",
        ["silos", "processes", "all Active s", "MB/silo", "full reads/s", "reads/s", "writes/s", "heartbeats/s",
         "statements/s", "Dead median s"],
        rows,
    )  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = ["full_reads", "all_reads", "version_writes", "heartbeats", "statements"]
    done = {size: entry for size, entry in results["sizes"].items() if "error" not in entry}
    for size, entry in done.items():
        times = [point[0] for point in entry["join_curve"]]
        active = [point[1] for point in entry["join_curve"]]
        axes[0].plot(times, active, marker=".", label=f"{size} silos")
        axes[0].axhline(entry["silos"], color="grey", linestyle="--", linewidth=0.8)
    axes[0].set_xlabel("seconds after all silo processes were started")
    axes[0].set_ylabel("Active silos in the table")
    axes[0].set_title("silos joining at once")
    axes[0].legend(fontsize=7)
    grouped_bars(
        axes[1],
        names,
        {f"{size} silos": [entry["steady_ops_per_s"][name] for name in names] for size, entry in done.items()},
        "per second, steady state",
    )
    axes[1].set_title("store load (pg_stat_statements)")
    save_figure(figure, path)


def main(argv: Sequence[str] | None = None) -> int:
    def measure(config: Config) -> dict[str, Any]:
        with workdir(NAME) as root:
            return asyncio.run(run(config, root))

    extra = {"overrides": OVERRIDES, "options": asdict(options())}
    return benchmark_main(NAME, __doc__, argv, Config, measure, report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
