"""Write docs/benchmarks.md from the committed results: one section per benchmark, latest run only.

    python -m benchmarks.page            # rewrite docs/benchmarks.md
    python -m benchmarks.page --check    # exit 1 if docs/benchmarks.md is not what the results give

Each section says what the benchmark measures and the command, then renders every committed
result of it (``benchmarks/results/NAME.json``, one file per scope, e.g. ``detection_tls.json``)
with the tables of ``benchmarks.report``, the run's own flags and the machine it ran on. The page
carries no prose about particular runs, so rerunning a benchmark and this command keeps it true;
how each benchmark measures is written once, by hand, in docs/benchmark-methods.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT
from benchmarks.report import RENDERERS, provenance

PAGE = ROOT / "docs" / "benchmarks.md"
SHOWN_AS = "benchmarks/results"
"""Where the page says the results are (and links the plots from), whichever directory it read."""


@dataclass(frozen=True)
class Result:
    """One committed result file of a benchmark and what its run covers."""

    stem: str
    scope: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    command: str
    measures: str
    results: tuple[Result, ...]

    @property
    def render(self) -> Callable[[dict[str, Any]], list[str]]:
        return RENDERERS[self.name]


BENCHMARKS = (
    Benchmark(
        "detection",
        "python -m benchmarks.detection",
        "Crash (SIGKILL) and hang (SIGSTOP) of one silo to its Dead row, to the takeover of its keys and to the "
        "last survivor's view, as multiples of the floor `num_missed_probes_limit x probe_timeout`; 3|2 and 1|4 "
        "partitions in network namespaces to every minority silo Dead and exited; the same failures of ZooKeeper "
        "ephemeral nodes with the floor as session timeout and of HashiCorp Serf agents; a kill to Dead with the "
        "PostgreSQL table's link lossy; an idle cluster's CPU.",
        (
            Result("detection_takeover", "silos, with the takeover of the dead silo's keys"),
            Result("detection", "silos beside ZooKeeper ephemeral nodes, and partitions"),
            Result("detection_tls", "silos over mutual TLS beside plaintext"),
            Result("detection_serf", "silos beside ZooKeeper and Serf (`-profile lan` and `local`)"),
            Result("detection_lossy_store", "silos with 30% loss on the table's link (`--systems lossy-store`)"),
        ),
    ),
    Benchmark(
        "accuracy",
        "python -m benchmarks.accuracy",
        "Live silos wrongly declared dead, beside ZooKeeper sessions expired (and Serf members failed) in the "
        "same lab at the same time: under real packet loss (iptables in network namespaces), under stalls with "
        "a CPU hog and SIGSTOP jitter, under probe loss and delay injected in the prober, and with one host's links "
        "flapping. Nobody is killed during a run, so every death is a false one; a crash at the end of each loss "
        "level, the loss still on, is timed to its finding.",
        (
            Result("accuracy", "stalls, prober loss and 10/20/30% packet loss"),
            Result("accuracy_network_loss", "20% and 30% packet loss, 600 s per level"),
            Result("accuracy_serf", "packet loss with Serf beside silos and ZooKeeper"),
            Result("accuracy_loss_40pct", "40% packet loss, 600 s, and a crash found under it"),
            Result("accuracy_flapping", "one host's links cut 1 s or 2 s and healed 1 s, over and over"),
        ),
    ),
    Benchmark(
        "propagation",
        "python -m benchmarks.propagation",
        "How long after a death's Dead write every silo's view has it, and what one membership change costs "
        "the store (PostgreSQL statements counted with `pg_stat_statements`), with delta gossip over plaintext "
        "and mutual TLS, and without gossip.",
        (
            Result("propagation", "N = 5 and 10, plaintext and TLS"),
            Result("propagation_n20", "N = 20, plaintext and TLS"),
            Result("propagation_production", "N = 20 with the production probe timings"),
            Result("propagation_gossip_off", "gossip on beside gossip off"),
        ),
    ),
    Benchmark(
        "tables",
        "python -m benchmarks.tables",
        "Each backend's `read_all`, `update_row` and contended conditional writes through the library beside "
        "the same round trips written with the raw driver.",
        (Result("tables", "every backend"),),
    ),
    Benchmark(
        "round_trips",
        "python -m benchmarks.round_trips",
        "Each backend's store round trips per table call and per vote, counted on the wire (a counting TCP "
        "proxy in front of each real server): what a verdict costs on a lossy or distant store link.",
        (Result("round_trips", "every networked backend"),),
    ),
    Benchmark(
        "scale",
        "python -m benchmarks.scale",
        "Hundreds to 1,000 silos (many per process) joining one PostgreSQL table at once: time to all Active, "
        "live silos declared Dead while joining and over a steady window, store statements, memory and CPU "
        "per silo, and a kill to Dead at that size.",
        (
            Result("scale", "200, 500 and 1,000 silos, the default command"),
            Result("scale_500", "500 silos joining at once, and their cost at rest"),
            Result("scale_1000", "1,000 silos joining at once"),
            Result("scale_2000", "2,000 silos joining at once"),
        ),
    ),
    Benchmark(
        "spark_routing",
        "python -m benchmarks.spark_routing",
        "Records routed by `route_to_silos` to 4 silos beside the same handler in a plain `mapPartitions`, "
        "and a routed job with a silo killed half-way (records lost, duplicated, rerouted); then the same on a "
        "Spark standalone cluster whose 3 workers are hosts of their own (network namespaces) with a sidecar silo "
        "each: the share of records that stayed on their host beside the ring's prediction, and a routed job with "
        "a worker host partitioned away half-way.",
        (
            Result("spark_routing", "1M records"),
            Result("spark_routing_10m", "10M records (`--records 10000000`)"),
        ),
    ),
    Benchmark(
        "metrics_overhead",
        "python -m benchmarks.metrics_overhead",
        "CPU and memory of idle silos serving Prometheus metrics (scraped every 15 s and every 5 s) beside the "
        "same silos without, side by side at the same time.",
        (Result("metrics_overhead", "3 idle silos per variant"),),
    ),
    Benchmark(
        "slow_store",
        "python -m benchmarks.slow_store",
        "A slow store (a gray failure): 5 silos on PostgreSQL behind a proxy that holds every request 1-5 s for "
        "five minutes. Live silos declared Dead or fenced meanwhile, store requests per second while slow beside "
        "the steady state's (counted on the wire), and a kill to Dead one refresh period after the store recovers "
        "beside one before.",
        (Result("slow_store", "5 silos, 300 s slow"),),
    ),
)


INTRO = """# Benchmarks

<!-- Generated by `python -m benchmarks.page` from benchmarks/results/*.json: do not edit by hand. -->

Every benchmark measures the service **beside a baseline in the same run** (a raw driver, the
protocol's floor, ZooKeeper ephemeral nodes, HashiCorp Serf, Spark without silos), so the ratios
hold on a noisy shared machine even where absolute times do not. Each is one command; `--quick`
runs a CI-sized version (the suite's `tests/test_benchmarks_smoke.py` runs each one so) and
`--output-dir` picks where it writes. A run prints its tables and writes `NAME.json` (config,
arguments, machine, raw samples, medians, p95/p99, ratios) and a plot `NAME.png`, by default in
`benchmarks/results/` (`--quick` runs in `benchmarks/results/quick/`, which git ignores). Each
benchmark starts its own throwaway stores and silo processes and removes them when it ends.

`benchmarks/results/` holds the latest run of each benchmark and scope; this page shows them
all. After a new run, copy its JSON and plot there under the name below and run
`python -m benchmarks.page` (a test fails while this page and the results disagree). How each
benchmark measures, and what to keep in mind reading it: [benchmark-methods.md](benchmark-methods.md).

| benchmark | command | results |
|---|---|---|
"""


def section(benchmark: Benchmark, results_dir: Path) -> list[str]:
    lines = [f"## {benchmark.name}", "", benchmark.measures, "", f"Command: `{benchmark.command}`.", ""]
    for result in benchmark.results:
        path = results_dir / f"{result.stem}.json"
        document = json.loads(path.read_text())
        lines += [f"### {result.scope} (`{SHOWN_AS}/{path.name}`)", "", *provenance(document)]
        lines += benchmark.render(document)
        image = path.with_suffix(".png")
        lines += ["", f"![{result.stem}](../{SHOWN_AS}/{image.name})", ""] if image.exists() else [""]
    return lines


def render_page(results_dir: Path = RESULTS) -> str:
    """docs/benchmarks.md as the committed results give it."""
    index = [
        f"| [{b.name}](#{b.name}) | `{b.command}` | " + ", ".join(f"`{r.stem}.json`" for r in b.results) + " |"
        for b in BENCHMARKS
    ]
    lines = [INTRO.rstrip("\n"), *index, ""]
    for benchmark in BENCHMARKS:
        lines += section(benchmark, results_dir)
    return "\n".join(lines).rstrip("\n") + "\n"


def shown_results() -> list[str]:
    """The result files the page shows, by file name."""
    return [f"{result.stem}.json" for benchmark in BENCHMARKS for result in benchmark.results]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is out of date")
    args = parser.parse_args(argv)
    page = render_page()
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python -m benchmarks.page", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
