"""Failure detection: SIGKILL a random silo of N real ``silo run`` processes; how soon is it Dead?

For N = 5, 10, 20 silos (local preset) on SQLite and PostgreSQL, each trial kills one
random silo and measures (a) crash to the Dead write in the table and (b) crash to the
moment the last survivor's own view (its GetMembership RPC) stops counting it; then a
replacement joins and the cluster converges before the next trial. The floor is
``num_missed_probes_limit x probe_timeout``: no prober can vote sooner.

Baseline, same run: N ``benchmarks.zk_member`` processes holding ephemeral znodes with the
session timeout set to that floor, an observer watching the group; SIGKILL a member and
time until the observer's watch sees its node go.

    python -m benchmarks.detection [--quick]
"""

from __future__ import annotations

import asyncio
import random
import sys
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
    ratio,
    save_figure,
    summarize,
    workdir,
)
from benchmarks.silo_cluster import BenchCluster, KillTrial
from benchmarks.zk_group import ZkGroup
from silo.membership.options import SiloOptions

NAME = "detection"


@dataclass(frozen=True)
class Config:
    backends: tuple[str, ...] = ("sqlite", "postgres")
    sizes: tuple[int, ...] = (5, 10, 20)
    trials: int = 20
    freeze_trials: int = 5
    """Extra trials per size where the victim is SIGSTOPped (hung: probes time out) instead of killed."""
    seed: int = 20261122
    preset: str = "local"

    @classmethod
    def quick(cls) -> Config:
        return cls(sizes=(5,), trials=2, freeze_trials=1)


def floor_seconds() -> float:
    return SiloOptions.local().detection_time


async def silo_trials(uri: str, size: int, config: Config, root: Path, rng: random.Random) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    bench = BenchCluster(root, uri, f"det{size}")
    trials: dict[str, list[KillTrial]] = {"kill": [], "freeze": []}
    extra_deaths = 0
    error = None
    try:
        await bench.start(size)
        plan = ["kill"] * config.trials + ["freeze"] * config.freeze_trials
        for index, mode in enumerate(plan):
            trial = await bench.kill_one(rng, freeze=mode == "freeze")
            trials[mode].append(trial)
            extra_deaths += await bench.replace_missing(size) - 1
            print(
                f"  N={size} {mode} {index + 1}/{len(plan)}: Dead after {trial.table_dead}, "
                f"last view after {trial.last_view}",
                flush=True,
            )
    except (RuntimeError, AssertionError) as exc:  # a cluster that would not converge: keep the trials so far, say why
        error = str(exc)[:2000]
        print(f"  N={size} stopped early: {error[:300]}", flush=True)
    finally:
        await bench.close()
    return {
        "kill": summarize_trials(trials["kill"]),
        "freeze": summarize_trials(trials["freeze"]),
        "other_silos_declared_dead": extra_deaths,
        "error": error,
    }


def present(values: Sequence[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def summarize_trials(trials: list[KillTrial]) -> dict[str, Any]:
    floor = floor_seconds()
    dead = summarize(present([t.table_dead for t in trials]))
    view = summarize(present([t.last_view for t in trials]))
    return {
        "table_dead": dead,
        "last_view": view,
        "ratio_to_floor": {
            "table_dead_median": ratio(dead["median"], floor),
            "table_dead_p99": ratio(dead["p99"], floor),
            "last_view_median": ratio(view["median"], floor),
            "last_view_p99": ratio(view["p99"], floor),
        },
        "undetected_within_bound": sum(t.table_dead is None for t in trials),
        "trials": [t.to_json() for t in trials],
    }


def zookeeper_trials(hosts: str, size: int, config: Config, root: Path, rng: random.Random) -> dict[str, Any]:
    floor = floor_seconds()
    root.mkdir(parents=True, exist_ok=True)
    group = ZkGroup(root, hosts, f"/bench/det{size}", floor)
    samples: dict[str, list[float | None]] = {"kill": [], "freeze": []}
    try:
        group.start(size)
        plan = ["kill"] * config.trials + ["freeze"] * config.freeze_trials
        for mode in plan:
            samples[mode].append(group.kill_one(rng, bound=10 * floor + 10, freeze=mode == "freeze"))
            group.replace_missing(size)
        false_positives = group.false_positives()
    finally:
        group.close()
    result: dict[str, Any] = {"other_members_expired": len(false_positives)}
    for mode, values in samples.items():
        stats = summarize(present(values))
        result[mode] = {
            "watch_saw_gone": stats,
            "ratio_to_floor": {"median": ratio(stats["median"], floor), "p99": ratio(stats["p99"], floor)},
            "undetected_within_bound": sum(value is None for value in values),
            "samples": values,
        }
    return result


async def run(config: Config) -> dict[str, Any]:
    rng = random.Random(config.seed)
    results: dict[str, Any] = {"floor_s": floor_seconds(), "silos": {}, "zookeeper": {}}
    with workdir(NAME) as root:
        for backend in config.backends:
            results["silos"][backend] = {}
            with services.table_uris(backend, root) as fresh_uri:
                for size in config.sizes:
                    print(f"[detection] {backend} N={size}", flush=True)
                    results["silos"][backend][str(size)] = await silo_trials(
                        fresh_uri(), size, config, root / f"{backend}-{size}", rng
                    )
        with services.zookeeper(root) as zookeeper:
            for size in config.sizes:
                print(f"[detection] zookeeper ephemeral nodes N={size}", flush=True)
                results["zookeeper"][str(size)] = await asyncio.to_thread(
                    zookeeper_trials, zookeeper.hosts, size, config, root / f"zk-{size}", rng
                )
    return results


def report(results: dict[str, Any]) -> None:
    floor = results["floor_s"]
    rows: list[list[object]] = []
    for backend, by_size in results["silos"].items():
        for size, entry in by_size.items():
            for mode in ("kill", "freeze"):
                for measure in ("table_dead", "last_view"):
                    stats = entry[mode][measure]
                    rows.append(
                        [f"silo/{backend}", size, mode, measure, stats["median"], stats["p95"], stats["p99"],
                         ratio(stats["median"], floor), entry["other_silos_declared_dead"]]
                    )  # fmt: skip
    for size, entry in results["zookeeper"].items():
        for mode in ("kill", "freeze"):
            stats = entry[mode]["watch_saw_gone"]
            rows.append(
                ["zookeeper", size, mode, "watch_saw_gone", stats["median"], stats["p95"], stats["p99"],
                 ratio(stats["median"], floor), entry["other_members_expired"]]
            )  # fmt: skip
    print_table(
        f"Crash to detection (s); floor = num_missed_probes_limit x probe_timeout = {floor}s",
        ["system", "N", "victim", "measure", "median", "p95", "p99", "median/floor", "false deaths"],
        rows,
    )


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    sizes = list(results["zookeeper"])
    for row, mode in enumerate(("kill", "freeze")):
        for axis, stat in zip(axes[row], ("median", "p99"), strict=True):
            series: dict[str, list[float]] = {}
            for backend, by_size in results["silos"].items():
                for measure, label in (("table_dead", "Dead in table"), ("last_view", "last survivor's view")):
                    series[f"{backend}: {label}"] = [by_size[s][mode][measure][stat] for s in sizes]
            series["ZooKeeper ephemeral node + watch"] = [
                results["zookeeper"][s][mode]["watch_saw_gone"][stat] for s in sizes
            ]
            grouped_bars(
                axis, [f"N={s}" for s in sizes], series, f"{stat} s after SIG{'STOP' if mode == 'freeze' else 'KILL'}"
            )
            axis.axhline(results["floor_s"], color="black", linestyle="--", linewidth=1, label="floor")
            axis.legend(fontsize=7, ncol=2, loc="upper left")
            axis.set_title(f"{'hung (SIGSTOP)' if mode == 'freeze' else 'crashed (SIGKILL)'} silo to detection, {stat}")
    save_figure(figure, path)


def main(argv: Sequence[str] | None = None) -> int:
    extra = {"options": asdict(SiloOptions.local())}
    return benchmark_main(NAME, __doc__, argv, Config, lambda config: asyncio.run(run(config)), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
