"""A slow store: five silos on PostgreSQL whose every round trip is held 1-5 s for five minutes.

The gray failure of a throttled or overloaded store, reachable but slow. The silos (local
preset) reach a real PostgreSQL table through ``CountingProxy`` (``testbed.slow_store``), which
holds each client flight (a request) a delay drawn uniformly from [1, 5] s while slowed. Per
trial: one silo more is started and SIGKILLed first (kill -> Dead write at full speed: the
normal); the store traffic of the other five is counted for ``steady`` seconds at full speed,
then for ``slow`` seconds slowed, polling the table (directly, not through the proxy) for Dead
rows and the processes for exits; one table refresh period after full speed, one silo is
SIGKILLed and kill -> Dead write timed again. Targets (issue 43, "gray failures"): nobody
declared Dead, nobody fenced, store requests per second while slow at most 2 x the steady
state's, and detection after recovery as normal (reported against the floor and the baseline
kill of the same trial).

    python -m benchmarks.slow_store [--quick]

A full run is one trial with a 300 s slow phase (about 7 minutes); ``--quick``: 10 s steady,
20 s slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import benchmark_main, grouped_bars, print_table, pyplot, save_figure, workdir
from testbed.slow_store import SlowStoreCluster, SlowStoreRun

NAME = "slow_store"
TRAFFIC_TARGET = 2.0
"""Store requests per second while slow, at most this times the steady state's."""


@dataclass(frozen=True)
class Config:
    silos: int = 5
    steady: float = 30.0
    slow: float = 300.0
    delay_low: float = 1.0
    delay_high: float = 5.0
    trials: int = 1

    @classmethod
    def quick(cls) -> Config:
        return cls(steady=10.0, slow=20.0)


def summary(run: SlowStoreRun) -> dict[str, Any]:
    steady, slow = run.steady.per_second(), run.slow.per_second()
    return {
        "steady": {"seconds": run.steady.seconds, "per_second": steady, "counts": vars(run.steady.tally)},
        "slow": {"seconds": run.slow.seconds, "per_second": slow, "counts": vars(run.slow.tally)},
        "traffic_ratio": run.traffic_ratio,
        "dead_while_slow": run.dead_while_slow,
        "fenced": run.fenced,
        "baseline_kill_to_dead": run.baseline_kill_to_dead,
        "kill_to_dead_after_recovery": run.kill_to_dead,
        "floor": run.floor,
        "death_bound": run.death_bound,
        "targets_met": not run.dead_while_slow and not run.fenced and run.traffic_ratio <= TRAFFIC_TARGET,
    }


def measure(config: Config) -> dict[str, Any]:
    trials = []
    with services.postgres() as postgres:
        for index in range(config.trials):
            with workdir(NAME) as root, SlowStoreCluster(root, postgres, f"slow_store_{index}", config.silos) as bench:
                run = bench.run(config.steady, config.slow, config.delay_low, config.delay_high)
            trials.append(summary(run))
            print(f"  trial {index + 1}/{config.trials}: {line(trials[-1])}", flush=True)
    return {"trials": trials, "target": {"traffic_ratio": TRAFFIC_TARGET}}


def line(trial: dict[str, Any]) -> str:
    return (
        f"requests/s {trial['steady']['per_second']['round_trips']:.1f} steady, "
        f"{trial['slow']['per_second']['round_trips']:.1f} slow ({trial['traffic_ratio']:.2f} x); "
        f"Dead while slow {trial['dead_while_slow'] or 'nobody'}, fenced {trial['fenced'] or 'nobody'}; "
        f"kill -> Dead {trial['baseline_kill_to_dead']:.2f}s before, {trial['kill_to_dead_after_recovery']:.2f}s after"
    )


def report(results: dict[str, Any]) -> None:
    rows = []
    for index, trial in enumerate(results["trials"], 1):
        steady, slow = trial["steady"]["per_second"], trial["slow"]["per_second"]
        rows.append(
            [index, steady["round_trips"], slow["round_trips"], trial["traffic_ratio"], steady["connections"],
             slow["connections"], len(trial["dead_while_slow"]), sum(trial["fenced"].values()),
             trial["baseline_kill_to_dead"], trial["kill_to_dead_after_recovery"], trial["floor"]]
        )  # fmt: skip
    print_table(
        "A slow store (each round trip held 1-5 s): store traffic, deaths, fencing, detection after recovery",
        ["trial", "req/s steady", "req/s slow", "slow/steady", "conn/s steady", "conn/s slow", "Dead", "fenced",
         "kill->Dead before s", "kill->Dead after s", "floor s"],
        rows,
    )  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, (traffic, detection) = plt.subplots(1, 2, figsize=(8, 3.5))
    groups = [f"trial {index}" for index, _ in enumerate(results["trials"], 1)]
    trials = results["trials"]
    grouped_bars(
        traffic,
        groups,
        {phase: [trial[phase]["per_second"]["round_trips"] for trial in trials] for phase in ("steady", "slow")},
        "store requests / s",
    )
    grouped_bars(
        detection,
        groups,
        {
            "before": [trial["baseline_kill_to_dead"] for trial in trials],
            "after recovery": [trial["kill_to_dead_after_recovery"] for trial in trials],
        },
        "kill -> Dead s",
    )
    figure.suptitle("A slow store: traffic while slow, detection after it recovers")
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    return benchmark_main(NAME, __doc__, argv, Config, measure, report, plot)


if __name__ == "__main__":
    raise SystemExit(main())
