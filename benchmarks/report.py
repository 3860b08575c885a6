"""Render the committed results as the Markdown tables of docs/benchmarks.md.

    python -m benchmarks.report [--results-dir benchmarks/results]

Reads each ``NAME.json`` present and prints one table per benchmark (median, p95/p99,
ratio to floor or baseline) with the command and machine that produced it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, fmt, ratio


def row(*cells: object) -> str:
    return "| " + " | ".join(fmt(c) if isinstance(c, float) else str(c) for c in cells) + " |"


def header(*names: str) -> list[str]:
    return [row(*names), row(*["---"] * len(names))]


def ms(seconds: float) -> float:
    return seconds * 1000.0


def provenance(document: dict[str, Any]) -> list[str]:
    machine = document["machine"]
    load = machine["load_average_1_5_15"]
    return [
        f"Command: `{document['command']}` (started {document['started_utc']}, finished {document['finished_utc']}, "
        f"commit {machine['git_commit']}). Machine: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['memory_mb']} MB, Python {machine['python']}; load average at start {load[0]}/{load[1]}/{load[2]}, "
        f"after {'/'.join(str(x) for x in document['load_average_after'])}.",
        "",
    ]


def tables(document: dict[str, Any]) -> list[str]:
    lines = header(
        "backend", "operation", "library median ms", "library p99 ms", "raw median ms", "raw p99 ms", "library/raw"
    )
    for backend, result in document["results"].items():
        operations = [(f"read_all, {size} rows", entry) for size, entry in result["read_all"].items()]
        operations.append(("update_row", result["update_row"]))
        for name, entry in operations:
            lines.append(
                row(backend, name, ms(entry["library"]["median"]), ms(entry["library"]["p99"]),
                    ms(entry["raw"]["median"]), ms(entry["raw"]["p99"]), entry["ratio_median"])
            )  # fmt: skip
    lines += [
        "",
        *header("backend", "writers", "library commits/s", "library lost races", "raw commits/s", "library/raw"),
    ]
    for backend, result in document["results"].items():
        for writers, entry in result["contention"].items():
            raw = entry.get("raw", {})
            lines.append(
                row(backend, writers, entry["library"]["commits_per_s"], entry["library"]["lost_fraction"],
                    raw.get("commits_per_s", math.nan), entry.get("ratio_commits", math.nan))
            )  # fmt: skip
    return lines


def detection(document: dict[str, Any]) -> list[str]:
    results = document["results"]
    floor = results["floor_s"]
    lines = header("system", "N", "victim", "measure", "median s", "p95 s", "p99 s", "median/floor",
                   "median/ZooKeeper", "trials", "false deaths")  # fmt: skip
    zookeeper = {(size, mode): entry[mode]["watch_saw_gone"]["median"] for size, entry in results["zookeeper"].items()
                 for mode in ("kill", "freeze")}  # fmt: skip
    for backend, by_size in results["silos"].items():
        for size, entry in by_size.items():
            for mode in ("kill", "freeze"):
                for measure in ("table_dead", "last_view"):
                    stats = entry[mode][measure]
                    lines.append(
                        row(f"silos on {backend}", size, mode, measure.replace("_", " "), stats["median"], stats["p95"],
                            stats["p99"], stats["median"] / floor, ratio(stats["median"], zookeeper[size, mode]),
                            stats["n"], entry["other_silos_declared_dead"])
                    )  # fmt: skip
    for size, entry in results["zookeeper"].items():
        for mode in ("kill", "freeze"):
            stats = entry[mode]["watch_saw_gone"]
            lines.append(
                row("ZooKeeper ephemeral", size, mode, "watch saw node gone", stats["median"], stats["p95"],
                    stats["p99"], stats["median"] / floor, 1.0, stats["n"], entry["other_members_expired"])
            )  # fmt: skip
    return [f"Floor: num_missed_probes_limit x probe_timeout = {floor} s.", "", *lines]


def propagation(document: dict[str, Any]) -> list[str]:
    lines = header("gossip", "N", "last view median s", "p95 s", "p99 s", "each silo median s", "full reads per death",
                   "all reads per death", "writes per death")  # fmt: skip
    for label, by_size in document["results"].items():
        for size, entry in by_size.items():
            stats, caused = entry["propagation_last_silo"], entry["caused_per_death"]
            lines.append(
                row(label.replace("gossip_", ""), size, stats["median"], stats["p95"], stats["p99"],
                    entry["propagation_each_silo"]["median"], caused["full_reads"]["mean"],
                    caused["all_reads"]["mean"], caused["version_writes"]["mean"])
            )  # fmt: skip
    return lines


def accuracy(document: dict[str, Any]) -> list[str]:
    config = document["config"]
    lines = [
        f"N = {config['size']}, {config['seconds']} s per run, floor {document['results']['floor_s']} s.",
        "",
        *header("stall", "live silos declared dead", "suspicion votes", "live ZooKeeper sessions expired",
                "stalls", "SIGSTOP jitter pauses"),
    ]  # fmt: skip
    for entry in document["results"]["runs"].values():
        silos, zk = entry["silos"], entry["zookeeper"]
        lines.append(
            row(f"{entry['stall_s']} s ({entry['stall_fraction_of_floor']} x floor)", silos["live_silos_declared_dead"],
                silos["suspicion_votes"], zk["live_members_expired"], silos["stalls"], silos["jitter_pauses"])
        )  # fmt: skip
    lossy = document["results"].get("probe_loss_10pct")
    if lossy is None:  # results written before the probe-loss scenario existed
        return lines
    injected = lossy["injected"]
    return [
        *lines,
        "",
        f"Probe loss injected in the prober (`LossyProber`), N = {config['size']} in {lossy['hosts']} `silo_host` "
        f"processes, {config['seconds']} s, no other stress:",
        "",
        *header("probes dropped", "probes delayed", "live silos declared dead", "suspicion votes", "dropped",
                "delayed", "forwarded", "ZooKeeper"),
        row(f"{lossy['probe_loss']:.0%}", f"{lossy['probe_delay']:.0%}", lossy["live_silos_declared_dead"],
            lossy["suspicion_votes"], injected["dropped"], injected["delayed"], injected["forwarded"],
            "not applicable (no netem)"),
    ]  # fmt: skip


def scale(document: dict[str, Any]) -> list[str]:
    results = document["results"]
    lines = header("silos", "processes", "all Active after s", "RSS MB per silo", "full reads/s", "writes/s",
                   "heartbeats/s", "statements/s", "crash to Dead median s", "p99 s", "median/floor")  # fmt: skip
    for size, r in results["sizes"].items():
        if "error" in r:
            lines.append(row(size, "-", "failed: " + r["error"].splitlines()[0][:120], *["-"] * 8))
            continue
        ops, dead = r["steady_ops_per_s"], r["detection_table_dead"]
        lines.append(
            row(r["silos"], r["processes"], r["all_active_s"], r["rss_mb_per_silo"], ops["full_reads"],
                ops["version_writes"], ops["heartbeats"], ops["statements"], dead["median"], dead["p99"],
                r["detection_ratio_to_floor"]["median"])
        )  # fmt: skip
    overrides = ", ".join(f"{k}={v}" for k, v in document["config"]["overrides"].items())
    return [*lines, "", f"Options: {overrides} over the local preset (floor {results['floor_s']} s)."]


def spark_routing(document: dict[str, Any]) -> list[str]:
    r = document["results"]
    killed = r["with_a_silo_killed"]
    base, routed = r["baseline_seconds"], r["routed_seconds"]
    return [
        f"{r['records']:,} records, {document['config']['silos']} silos, Spark local[{document['config']['cores']}], "
        f"batches of {document['config']['batch_size']}, {document['config']['runs']} runs each.",
        "",
        *header("job", "median s", "p99 s", "records/s", "time vs mapPartitions", "records lost", "duplicates",
                "rerouted", "results = baseline"),
        row("mapPartitions, no silos", base["median"], base["p99"], r["baseline_records_per_s"], 1.0, 0, 0, 0, "-"),
        row("route_to_silos", routed["median"], routed["p99"], r["routed_records_per_s"], r["overhead_ratio_median"],
            max(run["records_lost"] for run in r["routed_runs"]), max(run["duplicates"] for run in r["routed_runs"]),
            0, r["results_match_baseline"]),
        row(f"route_to_silos, a silo SIGKILLed at {killed['killed_after_s']:.1f} s", killed["seconds"], "-",
            r["records"] / killed["seconds"], ratio(killed["seconds"], base["median"]), killed["records_lost"],
            killed["duplicates"], killed["rerouted"], killed["results_match_baseline"]),
    ]  # fmt: skip


RENDERERS = {
    "tables": tables,
    "detection": detection,
    "propagation": propagation,
    "accuracy": accuracy,
    "scale": scale,
    "spark_routing": spark_routing,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for name, render in RENDERERS.items():
        path = args.results_dir / f"{name}.json"
        if not path.exists():
            continue
        document = json.loads(path.read_text())
        print(f"### {name}\n")
        print("\n".join([*provenance(document), *render(document)]))
        print(f"\n![{name}](../benchmarks/results/{name}.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
