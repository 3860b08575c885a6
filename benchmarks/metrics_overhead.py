"""Metrics overhead: CPU and memory of idle silos with and without ``--metrics-port``.

Clusters of N real silos (local preset, each cluster on its own SQLite file) run side by
side on the same machine at the same time: one plain, and one per scrape interval with
``--metrics-port 0`` and a scraper that fetches every silo's ``/metrics`` at that interval
(so serving the scrapes is counted too: 15 s is a common Prometheus setting, 5 s an eager
one). After a warm-up, each silo's CPU time over ``window`` seconds of wall time is read from
``/proc`` (``benchmarks.silo_cluster.cpu_seconds``) and its resident memory (``VmRSS``) at
the end. Running the variants at once exposes them to the same background load, so their
ratios hold on a shared machine better than the absolute figures. Repeated ``rounds`` times
with fresh clusters. Target (issue 13): metrics add at most 5% CPU and 10 MB per silo.

    python -m benchmarks.metrics_overhead [--quick]
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_main, grouped_bars, print_table, pyplot, save_figure, summarize, workdir
from benchmarks.silo_cluster import cpu_seconds
from membership_tables import SiloStatus
from testbed.cluster_harness import Cluster, SiloProcess
from testbed.scrape import metrics_url

NAME = "metrics_overhead"
CPU_TARGET_PCT = 5.0
RSS_TARGET_MB = 10.0


@dataclass(frozen=True)
class Config:
    silos: int = 3
    rounds: int = 4
    warmup: float = 10.0
    window: float = 60.0
    scrape_intervals: tuple[float, ...] = (15.0, 5.0)

    @classmethod
    def quick(cls) -> Config:
        return cls(silos=2, rounds=1, warmup=2.0, window=5.0, scrape_intervals=(1.0,))

    @property
    def variants(self) -> list[str]:
        return [PLAIN, *(scraped(interval) for interval in self.scrape_intervals)]


PLAIN = "without"


def scraped(interval: float) -> str:
    return f"scraped every {interval:g}s"


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` in MB (``VmRSS`` of ``/proc/<pid>/status``); None if gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    kilobytes = next(int(line.split()[1]) for line in lines if line.startswith("VmRSS:"))
    return kilobytes / 1024


class Scraper:
    """Fetches every URL every ``interval`` seconds in a thread, as Prometheus would."""

    def __init__(self, urls: list[str], interval: float) -> None:
        self.interval = interval
        self._urls = urls
        self._interval = interval
        self._stop = threading.Event()
        self.scrapes = 0
        self.bytes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for url in self._urls:
                with urllib.request.urlopen(url, timeout=10) as response:
                    self.bytes += len(response.read())
                self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=20)


def measure_window(silos: dict[str, list[SiloProcess]], seconds: float) -> dict[str, dict[str, list[float]]]:
    """CPU seconds per minute and RSS (MB) of every silo, by variant, over ``seconds`` of wall time."""
    pids = {variant: [silo.pid for silo in group] for variant, group in silos.items()}
    before = {pid: cpu_seconds(pid) for group in pids.values() for pid in group}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    after = {pid: cpu_seconds(pid) for group in pids.values() for pid in group}
    result: dict[str, dict[str, list[float]]] = {}
    for variant, group in pids.items():
        cpu = [
            (end - start) * 60.0 / elapsed
            for pid in group
            if (start := before[pid]) is not None and (end := after[pid]) is not None
        ]
        rss = [value for pid in group if (value := rss_mb(pid)) is not None]
        result[variant] = {"cpu_s_per_min": cpu, "rss_mb": rss}
    return result


def one_round(config: Config, index: int) -> dict[str, Any]:
    with workdir(f"metrics-{index}") as scratch, contextlib.ExitStack() as stack:
        silos: dict[str, list[SiloProcess]] = {}
        for number, variant in enumerate(config.variants):
            cluster = Cluster(scratch, f"sqlite:///{scratch / f'cluster-{number}.db'}", f"cluster-{number}")
            stack.callback(cluster.close)
            extra = () if variant == PLAIN else ("--metrics-port", "0")
            silos[variant] = cluster.start(config.silos, *extra)
            cluster.wait_statuses(silos[variant], SiloStatus.ACTIVE, 120)
        time.sleep(config.warmup)
        scrapers = [
            stack.enter_context(Scraper([metrics_url(silo) for silo in silos[scraped(interval)]], interval))
            for interval in config.scrape_intervals
        ]
        figures = measure_window(silos, config.window)
        stack.close()  # stops the scrapers and the silos
        scrapes = {
            scraped(scraper.interval): {"scrapes": scraper.scrapes, "bytes": scraper.bytes} for scraper in scrapers
        }
        return {"round": index, **figures, "scrapes": scrapes}


def measure(config: Config) -> dict[str, Any]:
    rounds = [one_round(config, index) for index in range(config.rounds)]

    def samples(variant: str, key: str) -> list[float]:
        return [value for item in rounds for value in item[variant][key]]

    summary = {
        variant: {key: summarize(samples(variant, key)) for key in ("cpu_s_per_min", "rss_mb")}
        for variant in config.variants
    }
    cpu_plain, rss_plain = statistics.mean(samples(PLAIN, "cpu_s_per_min")), statistics.mean(samples(PLAIN, "rss_mb"))
    overhead: dict[str, Any] = {}
    for variant in config.variants[1:]:
        cpu_pct = 100.0 * (statistics.mean(samples(variant, "cpu_s_per_min")) - cpu_plain) / cpu_plain
        per_round = [
            100.0
            * (statistics.mean(item[variant]["cpu_s_per_min"]) / statistics.mean(item[PLAIN]["cpu_s_per_min"]) - 1)
            for item in rounds
        ]
        rss_mb = statistics.mean(samples(variant, "rss_mb")) - rss_plain
        overhead[variant] = {
            "cpu_pct": cpu_pct,
            "cpu_pct_per_round": per_round,
            "rss_mb": rss_mb,
            "meets_target": cpu_pct <= CPU_TARGET_PCT and rss_mb <= RSS_TARGET_MB,
        }
    return {
        "rounds": rounds,
        "summary": summary,
        "overhead": overhead,
        "target": {"cpu_pct": CPU_TARGET_PCT, "rss_mb": RSS_TARGET_MB},
    }


def report(results: dict[str, Any]) -> None:
    rows = []
    for item in results["rounds"]:
        for variant in results["summary"]:
            cpu, rss = item[variant]["cpu_s_per_min"], item[variant]["rss_mb"]
            rows.append([item["round"], variant, statistics.mean(cpu), max(cpu), statistics.mean(rss), max(rss)])
    print_table(
        "Idle silos (local preset): CPU seconds per minute and RSS, without and with metrics (scraped)",
        ["round", "metrics", "cpu s/min mean", "cpu s/min max", "rss MB mean", "rss MB max"],
        rows,
    )
    print()
    for variant, overhead in results["overhead"].items():
        rounds = ", ".join(f"{pct:+.1f}%" for pct in overhead["cpu_pct_per_round"])
        print(
            f"metrics {variant}: {overhead['cpu_pct']:+.1f}% CPU (rounds: {rounds}; target <= {CPU_TARGET_PCT:g}%) "
            f"and {overhead['rss_mb']:+.1f} MB RSS per silo (target <= {RSS_TARGET_MB:g} MB): "
            + ("within target" if overhead["meets_target"] else "OVER target")
        )


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, (cpu_axis, rss_axis) = plt.subplots(1, 2, figsize=(8, 3.5))
    groups = [f"round {item['round']}" for item in results["rounds"]]
    for axis, key, label in ((cpu_axis, "cpu_s_per_min", "CPU s/min per silo"), (rss_axis, "rss_mb", "RSS MB")):
        series = {
            variant: [statistics.mean(item[variant][key]) for item in results["rounds"]]
            for variant in results["summary"]
        }
        grouped_bars(axis, groups, series, label)
    figure.suptitle("Idle silo cost without and with Prometheus metrics")
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> int:
    return benchmark_main(NAME, __doc__, argv, Config, measure, report, plot)


if __name__ == "__main__":
    raise SystemExit(main())
