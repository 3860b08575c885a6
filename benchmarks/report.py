"""Render a benchmark's results as Markdown tables (``benchmarks.page`` builds docs/benchmarks.md from them).

    python -m benchmarks.report [--results-dir benchmarks/results/quick]

Reads each ``NAME.json`` present in the directory (e.g. the last ``--quick`` runs) and prints one
table per benchmark (median, p95/p99, ratio to floor or baseline) with the command and machine
that produced it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.accuracy_report import met, network_tables
from benchmarks.common import RESULTS, ROOT, fmt, ratio
from benchmarks.lossy_store import LOSSY_STORE_HEADERS, lossy_store_rows
from benchmarks.markdown import header, row
from benchmarks.round_trips_report import round_trips
from benchmarks.scale_report import REMOVAL_HEADERS, join_figure, join_stopped_line, removal_rows


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
        if "read_all_churn" in result:  # written since the SQL backend reuses parsed rows
            churn = result["read_all_churn"]
            operations.append((f"read_all, {churn['rows']} rows, {churn['heartbeats_moved']} heartbeats moved", churn))
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


def run_arguments(config: dict[str, Any]) -> list[str]:
    """The flags a run was given, ``--output-dir`` and its value left out (where it wrote says nothing)."""
    arguments = config.get("arguments") or []
    return [arg for i, arg in enumerate(arguments) if "--output-dir" not in (arg, arguments[i - 1] if i else "")]


def run_command(document: dict[str, Any]) -> str:
    """The command that reproduces a run: the benchmark's command and the run's flags."""
    return " ".join([document["command"], *run_arguments(document["config"])])


def _arguments(config: dict[str, Any]) -> list[str]:
    """The run's own flags (``--output-dir`` left out), when there are any beyond ``--quick``."""
    shown = run_arguments(config)
    return [f"Arguments: `{' '.join(shown)}`.", ""] if [arg for arg in shown if arg != "--quick"] else []


SILO_MEASURES = (
    ("table_dead", "Dead row"),
    ("takeover", "takeover"),
    ("dead_to_takeover", "Dead row -> takeover"),
    ("last_view", "last view"),
)
"""The silos' measures of ``benchmarks.detection`` (``SILO_MEASURES`` there), as rows."""


def detection(document: dict[str, Any]) -> list[str]:
    results = document["results"]
    floor = results["floor_s"]
    if "partitions" not in results:  # written before the crash/hang/partition/cost version of the benchmark
        return [f"Floor {floor} s. These results predate the current `benchmarks.detection`; rerun it to refresh them."]
    modes = {"crash": "SIGKILL", "hang": "SIGSTOP"}
    targets = results["targets_x_floor"]
    target_text = {"crash": f"median <= {targets['crash_median']}",
                   "hang": f"median <= {targets['hang_median']}, p99 <= {targets['hang_p99']}"}  # fmt: skip
    lines = [
        *_arguments(document["config"]),
        f"Floor: num_missed_probes_limit x probe_timeout = {floor} s; probe_interval {results['probe_interval_s']} s; "
        f"silos on {results['backend']}. Targets are for the silos' Dead row, in multiples of the floor.",
        "",
        *header("system", "N", "failure", "measure", "median s", "p99 s", "median/floor", "p99/floor", "target",
                "met", "trials", "false deaths"),
    ]  # fmt: skip
    for size, entry in results["silos"].items():
        for mode, signal in modes.items():
            for measure, label in SILO_MEASURES:
                if measure not in entry[mode]:
                    continue  # results from before the takeover was measured
                stats, rel = entry[mode][measure], entry[mode]["ratio_to_floor"][measure]
                met = {None: "-", True: "yes", False: "**no**"}[entry[mode]["meets_target"]]
                first = measure == "table_dead"
                lines.append(
                    row("silos", size, f"{mode} ({signal})", label, stats["median"], stats["p99"], rel["median"],
                        rel["p99"], target_text[mode] if first else "", met if first else "", stats["n"],
                        entry["other_silos_declared_dead"])
                )  # fmt: skip
    for size, entry in results["zookeeper"].items():
        for mode, signal in modes.items():
            stats, rel = entry[mode]["node_gone"], entry[mode]["ratio_to_floor"]
            lines.append(
                row("ZooKeeper ephemeral", size, f"{mode} ({signal})", "node deleted", stats["median"], stats["p99"],
                    rel["median"], rel["p99"], "", "", stats["n"], entry["other_members_expired"])
            )  # fmt: skip
    for profile, size, entry in _serf_runs(results):
        for mode, signal in modes.items():
            for measure, label in (("first_failed", "first member-failed"), ("all_failed", "all survivors")):
                stats, rel = entry[mode][measure], entry[mode]["ratio_to_floor"][measure]
                lines.append(
                    row(f"Serf {profile}", size, f"{mode} ({signal})", label, stats["median"], stats["p99"],
                        rel["median"], rel["p99"], "", "", stats["n"], entry["other_members_failed"])
                )  # fmt: skip
    if "unavailable" in results.get("serf", {}):
        lines += ["", f"Serf not measured: {results['serf']['unavailable']}."]
    lines += _tls_vs_plaintext(results.get("tls_vs_plaintext"))
    partitions = results["partitions"]
    lines += ["", "Partitions of 5 silos in network namespaces (cut to every minority silo Dead / exited):", ""]
    if "unavailable" in partitions:
        lines.append(f"Not measured: {partitions['unavailable']}.")
    elif not partitions:
        lines.append("Not run in this run (`--systems` left them out).")
    else:
        lines += header("scenario", "trials", "all Dead median s", "p99 s", "x floor (median / p99)",
                        "all exited median s", "p99 s", "x floor (median / p99)", "exited with 3",
                        "majority declared dead", "history ok")  # fmt: skip
        for scenario, entry in partitions.items():
            dead, gone = entry["all_dead"], entry["all_exited"]
            rel_dead, rel_gone = entry["ratio_to_floor"]["all_dead"], entry["ratio_to_floor"]["all_exited"]
            lines.append(
                row(scenario, entry["trials"], dead["median"], dead["p99"],
                    f"{fmt(rel_dead['median'])} / {fmt(rel_dead['p99'])}", gone["median"], gone["p99"],
                    f"{fmt(rel_gone['median'])} / {fmt(rel_gone['p99'])}",
                    f"{entry['minority_exited_with_3']}/{entry['trials']}", entry["majority_declared_dead"],
                    f"{entry['trials'] - entry['history_errors']}/{entry['trials']}")
            )  # fmt: skip
    lossy = results.get("lossy_store")
    if lossy is not None:  # absent in results written before the lossy-store scenario existed
        lines += ["", "Kill to Dead with the table's link lossy (5 silos in network namespaces, PostgreSQL on a host "
                  "of its own, packets to and from it dropped at random; lossless kills alternated on the same "
                  "cluster):", ""]  # fmt: skip
        if "unavailable" in lossy:
            lines.append(f"Not measured: {lossy['unavailable']}.")
        else:
            lines += [*header(*LOSSY_STORE_HEADERS), *(row(*cells) for cells in lossy_store_rows(lossy))]
    lines += ["", "Cost of an idle cluster:", "",
              *header("system", "N", "probes/s per member", "basis", "CPU s/min per member (median)",
                      "ZooKeeper server CPU s/min")]  # fmt: skip
    for size, entry in results["silos"].items():
        idle = entry["idle"]
        if idle:
            lines.append(row("silos", size, idle["pings_per_s_per_silo"], "computed from options",
                             idle["cpu_s_per_min_per_silo"]["median"], "-"))  # fmt: skip
    for size, entry in results["zookeeper"].items():
        idle = entry["idle"]
        lines.append(row("ZooKeeper", size, idle["pings_per_s_per_member"], "counted (srvr)",
                         idle["cpu_s_per_min_per_member"]["median"], idle["server_cpu_s_per_min"]))  # fmt: skip
    for profile, size, entry in _serf_runs(results):
        idle = entry["idle"]
        if idle:
            lines.append(row(f"Serf {profile}", size, idle["probes_per_s_per_member"], "computed from the profile",
                             idle["cpu_s_per_min_per_member"]["median"], "-"))  # fmt: skip
    segments = [e["idle_segments_per_s_per_silo"]["median"] for e in partitions.values()
                if isinstance(e, dict) and e["idle_segments_per_s_per_silo"]["n"]]  # fmt: skip
    if segments:
        lines += ["", f"Measured network traffic of an idle silo, N = 5 in network namespaces: "
                  f"{fmt(sorted(segments)[len(segments) // 2])} TCP segments/s (in + out)."]  # fmt: skip
    return _without_empty_tables(lines)


def _without_empty_tables(lines: list[str]) -> list[str]:
    """``lines`` with each table that has no rows (a run whose ``--systems`` left it out) said so instead."""
    kept: list[str] = []
    for index, line in enumerate(lines):
        following = lines[index + 1 : index + 3]
        header_row = line.startswith("| ") and following[:1] and following[0].startswith("| ---")
        if header_row and (len(following) < 2 or not following[1].startswith("|")):
            kept.append("Not run in this run (`--systems` left it out).")
            continue
        if line.startswith("| ---") and not (kept and kept[-1].startswith("|")):
            continue  # the separator of a table just left out
        kept.append(line)
    return kept


def _tls_vs_plaintext(comparison: dict[str, Any] | None) -> list[str]:
    """The Dead-row medians of a ``--transport plaintext,tls`` run side by side (none in other runs)."""
    if not comparison:
        return []
    title = "Mutual TLS beside plaintext, same run (Dead-row medians; target: TLS within 10% of plaintext):"
    columns = ("N", "failure", "plaintext median s", "TLS median s", "TLS / plaintext", "within target")
    lines = ["", title, "", *header(*columns)]
    for size in sorted(comparison, key=int):
        for mode, entry in comparison[size].items():
            lines.append(row(size, mode, entry["plaintext_median_s"], entry["tls_median_s"],
                             entry["tls_over_plaintext"], met(entry["within_target"], no="**no**")))  # fmt: skip
    return lines


def _serf_runs(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(profile, N, entry) of each Serf run of ``benchmarks.detection`` (none in results from before Serf)."""
    return [
        (profile, size, entry)
        for profile, sizes in results.get("serf", {}).items()
        if isinstance(sizes, dict)
        for size, entry in sizes.items()
    ]


def propagation(document: dict[str, Any]) -> list[str]:
    lines = _arguments(document["config"]) + header(
        "gossip", "N", "last view median s", "p95 s", "p99 s", "each silo median s", "full reads per death",
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
    config, results = document["config"], document["results"]
    lines = _arguments(config)
    if results["runs"] or "probe_loss_10pct" in results:
        lines.append(f"N = {config['size']}, {config['seconds']} s per run, floor {results['floor_s']} s.")
    if results["runs"]:
        lines += [
            "",
            *header("stall", "live silos declared dead", "suspicion votes", "live ZooKeeper sessions expired",
                    "stalls", "SIGSTOP jitter pauses"),
        ]  # fmt: skip
    for entry in results["runs"].values():
        silos, zk = entry["silos"], entry["zookeeper"]
        lines.append(
            row(f"{entry['stall_s']} s ({entry['stall_fraction_of_floor']} x floor)", silos["live_silos_declared_dead"],
                silos["suspicion_votes"], zk["live_members_expired"], silos["stalls"], silos["jitter_pauses"])
        )  # fmt: skip
    lossy = results.get("probe_loss_10pct")
    if lossy is not None:  # absent in results written before the probe-loss scenario existed
        injected = lossy["injected"]
        lines += [
            "",
            f"Probe loss injected in the prober (`LossyProber`), N = {config['size']} in {lossy['hosts']} `silo_host` "
            f"processes, {config['seconds']} s, no other stress (target: 0):",
            "",
            *header("probes dropped", "probes delayed", "live silos declared dead", "suspicion votes", "dropped",
                    "delayed", "forwarded", "ZooKeeper", "target met"),
            row(f"{lossy['probe_loss']:.0%}", f"{lossy['probe_delay']:.0%}", lossy["live_silos_declared_dead"],
                lossy["suspicion_votes"], injected["dropped"], injected["delayed"], injected["forwarded"],
                "not applicable (no netem)", met(lossy.get("target_met"), no="**no**")),
        ]  # fmt: skip
    lines += _network_loss(results.get("network_loss"))
    return [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]  # no double blank lines


def _network_loss(network: dict[str, Any] | None) -> list[str]:
    """The real-network runs of ``benchmarks.accuracy``: silos, ZooKeeper and Serf under the same faults."""
    if network is None:  # results written before the real-network scenario existed
        return []
    if "skipped" in network:
        return ["", f"Real-network loss runs skipped: {network['skipped']}."]
    lines: list[str] = []
    for table in network_tables(network, no="**no**"):
        lines += ["", table.title, "", *header(*table.headers), *(row(*cells) for cells in table.rows)]
    if "serf_unavailable" in network:
        lines += ["", f"Serf not measured: {network['serf_unavailable']}."]
    return lines


def scale(document: dict[str, Any]) -> list[str]:
    results = document["results"]
    lines = _arguments(document["config"])
    lines += header("silos", "processes", "all Active after s", "live silos declared Dead joining", "... steady",
                   "RSS MB per silo", "CPU % per silo", "full reads/s", "writes/s", "heartbeats/s", "statements/s",
                   "crash to Dead median s", "p99 s", "median/floor")  # fmt: skip
    stopped: list[str] = []
    for size, r in results["sizes"].items():  # a size stopped part-way shows what it measured before
        ops, dead = r.get("steady_ops_per_s", {}), r.get("detection_table_dead", {})
        if line := join_stopped_line(size, r):
            stopped.append(line)
        if "error" in r:
            stopped.append(f"{size} silos stopped: {r['error'].splitlines()[0][:200]}")
        joined = join_figure(r)
        lines.append(
            row(size, r.get("processes", "-"), "-" if joined is None else joined,
                r.get("false_deaths_joining", "-"), r.get("false_deaths_steady", "-"), r.get("rss_mb_per_silo", "-"),
                r.get("cpu_percent_per_silo", "-"), ops.get("full_reads", "-"), ops.get("version_writes", "-"),
                ops.get("heartbeats", "-"), ops.get("statements", "-"), dead.get("median", "-"), dead.get("p99", "-"),
                r.get("detection_ratio_to_floor", {}).get("median", "-"))
        )  # fmt: skip
    lines.extend(["", *stopped] if stopped else [])
    if removals := removal_rows(results):
        lines += [
            "",
            "Versions per removal (a kill to the victim's Dead row: its votes and the Dead write; in span: "
            "every version written meanwhile):",
            "",
            *header(*REMOVAL_HEADERS),
            *(row(*r) for r in removals),
        ]
    overrides = ", ".join(f"{k}={v}" for k, v in document["config"]["overrides"].items())
    steady = document["config"].get("steady_window")
    return [*lines, "", f"Options: {overrides} over the local preset (floor {results['floor_s']} s); steady "
            f"window {steady} s."]  # fmt: skip


def spark_routing(document: dict[str, Any]) -> list[str]:
    r = document["results"]
    config = document["config"]
    killed = r["with_a_silo_killed"]
    cost = r["cost_of_median_run"]
    return [
        f"{r['records']:,} records in {config['partitions']} partitions, {config['silos']} silos, Spark "
        f"local[{config['cores']}], Arrow batches of {config['batch_size']:,} rows, {config['in_flight']} calls in "
        f"flight per task, {config['runs']} runs each.",
        "",
        *_routing_jobs(r, f"route_to_silos, a silo SIGKILLed at {killed['killed_after_s']:.1f} s", killed),
        "",
        "Where the routed time went (median run; seconds summed over tasks and calls, which overlap):",
        "",
        *header("executor: rest of task (input, hashing, grouping, output)", "executor: writing Arrow IPC",
                "executor: waiting", "silos: handler", "silos: (de)serialization", "network, gRPC, queueing",
                "tasks, wall"),
        row(cost["executor_routing_seconds"], cost["encode_seconds"], cost["waiting_seconds"],
            cost["silo_handler_seconds"], cost["silo_serialization_seconds"], cost["network_and_queue_seconds"],
            cost["task_seconds"]),
        "",
        *floor_ratio(r),
        f"Records that stayed on their host (sent to the executor's sidecar, silo 0): "
        f"{r['stayed_on_host_fraction']:.1%}; {cost['calls']:.0f} calls, "
        f"{cost['request_bytes'] / max(1.0, cost['records']):.1f} request bytes per record.",
        *spark_multi_host(r.get("multi_host")),
    ]  # fmt: skip


def spark_multi_host(m: dict[str, Any] | None) -> list[str]:
    """The ``results.multi_host`` part of a spark_routing result (absent in runs that predate it)."""
    if m is None:
        return []
    if "skipped" in m:
        return ["", f"Multi-host run skipped: {m['skipped']}."]
    cut = m["with_a_worker_partitioned"]
    return [
        "",
        f"On a Spark standalone cluster with {m['workers']} worker hosts of their own (network namespaces, one "
        f"1-core executor and one sidecar silo each, the table on PostgreSQL on another host):",
        "",
        *_routing_jobs(
            m, f"route_to_silos, worker host {cut['victim']} partitioned at {cut['partitioned_after_s']:.1f} s", cut
        ),
        "",
        *floor_ratio(m),
        f"Records that stayed on their host (sent to the executor's own sidecar): {m['stayed_on_host_fraction']:.1%}; "
        f"the ring predicts {m['expected_on_host_fraction']:.1%} (median run).",
    ]  # fmt: skip


def _routing_jobs(results: dict[str, Any], faulted: str, fault: dict[str, Any]) -> list[str]:
    """The job table of a spark_routing run (local or multi-host): mapPartitions without silos, the routed
    job, and the routed job with the fault named ``faulted`` (``fault``: what it lost, duplicated, rerouted)."""
    base, routed = results["baseline_seconds"], results["routed_seconds"]
    match = results["results_match_baseline"]
    return [
        *header("job", "median s", "p99 s", "records/s", "time vs mapPartitions", "records lost", "duplicates",
                "rerouted", "results = baseline"),
        row("mapPartitions, no silos", base["median"], base["p99"], results["baseline_records_per_s"], 1.0, 0, 0, 0,
            "-"),
        *floor_row(results),
        row("route_to_silos", routed["median"], routed["p99"], results["routed_records_per_s"],
            results["overhead_ratio_median"], 0 if match else "?", 0 if match else "?", 0, match),
        row(faulted, fault["seconds"], "-", results["records"] / fault["seconds"],
            ratio(fault["seconds"], base["median"]), fault["records_lost"], fault["duplicates"], fault["rerouted"],
            fault["results_match_baseline"]),
    ]  # fmt: skip


def floor_row(r: dict[str, Any]) -> list[str]:
    """The floor's row: the same handler in a local ``mapInArrow``, no silos (absent in older results)."""
    if "floor_seconds" not in r:
        return []
    low, vs_baseline = r["floor_seconds"], ratio(r["floor_seconds"]["median"], r["baseline_seconds"]["median"])
    return [row("floor: same handler in mapInArrow, no silos", low["median"], low["p99"], r["floor_records_per_s"],
                vs_baseline, 0, 0, 0, r["floor_matches_baseline"])]  # fmt: skip


def floor_ratio(r: dict[str, Any]) -> list[str]:
    if "floor_ratio_median" not in r:
        return []
    return [
        f"Routed time over the floor (the same Arrow batches, conversion, handler and summary pass in the task, "
        f"without hashing, Arrow IPC, network or silos): {r['floor_ratio_median']:.2f} x (median runs).",
        "",
    ]


def metrics_overhead(document: dict[str, Any]) -> list[str]:
    results, config = document["results"], document["config"]
    target = results["target"]
    lines = header(
        "metrics", "CPU s/min per silo: median", "p95", "RSS MB median", "CPU vs without (rounds)", "RSS vs without"
    )
    for variant, summary in results["summary"].items():
        cpu, rss = summary["cpu_s_per_min"], summary["rss_mb"]
        extra = results["overhead"].get(variant)
        if extra is None:
            lines.append(row(variant, cpu["median"], cpu["p95"], rss["median"], "-", "-"))
            continue
        rounds = ", ".join(f"{pct:+.1f}%" for pct in extra["cpu_pct_per_round"])
        lines.append(
            row(variant, cpu["median"], cpu["p95"], rss["median"], f"{extra['cpu_pct']:+.1f}% ({rounds})",
                f"{extra['rss_mb']:+.1f} MB")
        )  # fmt: skip
    return [
        f"{config['silos']} idle silos per variant, all variants side by side (local preset, SQLite), "
        f"{config['rounds']} rounds of {config['window']:g} s after {config['warmup']:g} s of warm-up. "
        f"Target: metrics add at most {target['cpu_pct']:g}% CPU and {target['rss_mb']:g} MB per silo.",
        "",
        *lines,
    ]


def slow_store(document: dict[str, Any]) -> list[str]:
    config, results = document["config"], document["results"]
    lines = [
        f"{config['silos']} silos (local preset) on PostgreSQL through a proxy that holds each request "
        f"{config['delay_low']:g}-{config['delay_high']:g} s (drawn per request) for {config['slow']:g} s, after "
        f"{config['steady']:g} s at full speed. Store requests are client flights counted on the wire (connection "
        "handshakes included). Kill -> Dead: a SIGKILL to the recorded Dead write, before the slow phase and one "
        "table refresh period after the store is fast again. Targets: nobody Dead, nobody fenced, requests while "
        f"slow at most {results['target']['traffic_ratio']:g} x the steady state's.",
        "",
        *header("trial", "requests/s steady", "requests/s slow", "slow/steady", "connections/s steady",
                "connections/s slow", "Dead while slow", "fenced", "kill -> Dead before s",
                "kill -> Dead after recovery s", "floor s", "targets met"),
    ]  # fmt: skip
    for index, trial in enumerate(results["trials"], 1):
        steady, slow = trial["steady"]["per_second"], trial["slow"]["per_second"]
        lines.append(
            row(index, steady["round_trips"], slow["round_trips"], trial["traffic_ratio"], steady["connections"],
                slow["connections"], len(trial["dead_while_slow"]), sum(trial["fenced"].values()),
                trial["baseline_kill_to_dead"], trial["kill_to_dead_after_recovery"], trial["floor"],
                met(trial["targets_met"], no="**no**"))
        )  # fmt: skip
    return lines


RENDERERS = {
    "tables": tables,
    "round_trips": round_trips,
    "detection": detection,
    "propagation": propagation,
    "accuracy": accuracy,
    "scale": scale,
    "spark_routing": spark_routing,
    "metrics_overhead": metrics_overhead,
    "slow_store": slow_store,
}


def image_link(path: Path) -> str:
    """``path`` as a link from docs/benchmarks.md (relative inside the repository)."""
    try:
        return f"../{path.resolve().relative_to(ROOT)}"
    except ValueError:
        return str(path.resolve())


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
        print(f"\n![{name}]({image_link(path.with_suffix('.png'))})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
