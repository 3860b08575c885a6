"""Failure detection: how soon is a crashed, hung or partitioned silo Dead, and what does watching cost?

Everything is measured against the **floor**, ``num_missed_probes_limit x probe_timeout``
(1.5 s with the local preset): the silence after which a silo suspects a peer. Targets
(issue "failure detector v2"): a crash is Dead within 0.5 x floor (median), a hang within
1.0 x floor (median) and 1.2 x floor (p99).

* **Crash and hang**, at N = 5, 10, 20 ``silo run`` processes (local preset, SQLite): each
  trial SIGKILLs (crash: the port refuses at once) or SIGSTOPs (hang: the port accepts,
  nothing answers) a random silo, alternately, at a random instant of the probe grid (the
  silos of one machine probe together; ``BenchCluster``), and times signal -> Dead row (the killer's
  vote time, stored in the row) and signal -> the last survivor's view without it. It also
  times signal -> **takeover**: 8 keys the victim owned, all with the same owner on the ring
  without it, are sent in one batch (``example.echo``) to that new owner every 15 ms from the
  signal on until it serves them (ABORTED or UNAVAILABLE until then); "Dead row -> takeover"
  is the gap after the Dead row (a crash: one refused ping; a hang: ``takeover_wait``,
  docs/protocol.md "Takeover after fencing"). A trial starts once every silo serves (no
  replacement still in its join's takeover wait). A frozen silo is SIGKILLed once its watch
  ends. A replacement joins before the next trial.
* **ZooKeeper**, same run and sizes: N ``benchmarks.zk_member`` processes holding ephemeral
  znodes with session timeout = floor; SIGKILL or SIGSTOP one, time until an observer's
  children watch sees its node deleted.
* **Serf**, same run and sizes, once per profile (``lan``, ``local``): N ``serf agent``
  processes on loopback (``benchmarks.serf_group``); SIGKILL or SIGSTOP one, time until the
  first survivor and until every survivor logged ``EventMemberFailed`` for it (each agent's log
  read through a pipe and stamped on arrival: about 1 ms resolution). Serf's timings are its
  profile's, not the floor; the ratio to the floor only puts them on the same scale.
* **Partitions**: 5 silos, each alone in a network namespace (testbed/net_cluster.py),
  one SQLite table every side still reaches. A 3|2 split and a 1|4 isolation (random
  minority) cut with iptables; time cut -> every minority silo Dead in the table, and cut ->
  every minority process exited (it must exit with 3, DECLARED_DEAD); no majority silo may
  be declared Dead (checked at every poll and in the recorded write history).
* **A lossy store link** (``lossy-store``): 5 silos in network namespaces on a PostgreSQL table
  on a host of its own, 30% of the packets to and from that host dropped (the silos' links to
  each other whole); SIGKILL a random silo, time kill -> Dead row (read through the server's unix
  socket every 50 ms), alternated with the same kill without loss (``benchmarks.lossy_store``).
  Target: median <= 1.3 x floor.
* **Cost of an idle cluster**: CPU seconds per silo per minute (``/proc/<pid>/stat``) at each
  N, against a ZooKeeper member's and the ZooKeeper server's; probe RPCs per silo per second
  are **computed from the options** (``min(N - 1, num_probed_silos) / probe_interval``; idle
  means no indirect probes), and checked against the TCP segments each namespace's silo
  actually sends and receives before a partition's cut. ZooKeeper's pings are **counted**
  (the server's ``srvr`` packet counter).

* **TLS beside plaintext** (``--transport plaintext,tls``): the silos' crash and hang trials
  run once per transport, one after the other at each N, the TLS clusters with mutual TLS
  (development CA certificates, ``silo.cli.dev_ca``); the report gives both and the ratio of
  the TLS medians to the plaintext ones (target: within 10%).

    python -m benchmarks.detection [--quick] [--systems silos,zookeeper,serf-lan,serf-local,partitions,lossy-store]
        [--sizes 5,10,20] [--trials 30] [--transport plaintext,tls]

A full run takes about 50 minutes on two cores; ``--quick`` (N = 5, 2 + 2 trials, one
partition of each kind, one lossy-store kill and its control, no Serf) about two minutes.
``--systems`` picks what runs (default: all; ``partitions`` and ``lossy-store`` are the silos'
scenarios in namespaces), ``--sizes`` the cluster sizes,
``--trials`` the crash and the hang trials per size, ``--transport`` the silos' transports
(default plaintext); they override either preset.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import (
    RunSettings,
    choices_list,
    grouped_bars,
    parse_over_preset,
    print_table,
    pyplot,
    ratio,
    run_benchmark,
    save_figure,
    sizes_list,
    summarize,
    wall,
    workdir,
)
from benchmarks.lossy_store import LOSSY_STORE_HEADERS, lossy_store_rows, lossy_store_trials
from benchmarks.serf_group import PROFILE_TIMINGS, PROFILES, SerfGroup, SerfKill, serf_unavailable_reason
from benchmarks.silo_cluster import (
    BenchCluster,
    KillTrial,
    PartitionPlan,
    PartitionTrial,
    cpu_seconds,
    partition_trial,
    pings_per_second,
    silo_certificates,
)
from benchmarks.zk_group import ZkGroup
from silo.membership.options import SiloOptions
from silo.wire.tls import TlsSettings
from testbed.services.zookeeper import ZooKeeperServer, four_letter_word

NAME = "detection"
MODES = {"crash": "SIGKILL", "hang": "SIGSTOP"}
TARGETS = {"crash_median": 0.5, "hang_median": 1.0, "hang_p99": 1.2}
"""Acceptance targets, as multiples of the floor, for the silos' signal -> Dead row."""
SCENARIOS = {"split_3_2": 2, "isolate_1_4": 1}
"""Partition scenarios of 5 silos: name -> size of the cut-off minority."""
SYSTEMS = ("silos", "zookeeper", *(f"serf-{profile}" for profile in PROFILES), "partitions", "lossy-store")
"""What ``--systems`` can choose: each failure detector, and the silos' partition and lossy-store scenarios."""
QUICK_SYSTEMS = ("silos", "zookeeper", "partitions", "lossy-store")
"""``--quick`` leaves Serf out (its profiles take 5-20 s per trial); ``--systems`` puts it back."""
TRANSPORTS = ("plaintext", "tls")
"""What ``--transport`` can choose for the silos' trials."""
TLS_TARGET = 1.10
"""TLS detection medians within 10% of plaintext's."""
SERF_BOUND = 60.0
"""Seconds to wait for every Serf survivor to log the failure (lan's longest suspicion at N = 20 is 31 s)."""


@dataclass(frozen=True)
class Config:
    backend: str = "sqlite"
    sizes: tuple[int, ...] = (5, 10, 20)
    crash_trials: int = 30
    hang_trials: int = 30
    """Per size; 30 samples make the p99 the interpolation between the two largest."""
    partition_trials: int = 10
    """Per scenario, each on a fresh 5-silo cluster."""
    partition_size: int = 5
    idle_seconds: float = 60.0
    """Idle window per size for the CPU cost (silos and ZooKeeper alike)."""
    partition_idle_seconds: float = 5.0
    """Idle window before each cut, for the TCP segment count."""
    hold_seconds: float = 5.0
    """After the minority is gone, the majority must stay Active and running this long."""
    lossy_store_trials: int = 10
    """Kills with the table's link lossy, and as many without (alternated, one cluster)."""
    lossy_store_loss: float = 0.3
    lossy_store_settle: float = 3.0
    """Seconds between setting the loss (or healing it) and the kill."""
    watch_views: bool = True
    """Also poll every survivor's GetMembership every 0.1 s during crash/hang trials (the last view)."""
    seed: int = 20261122
    preset: str = "local"
    systems: tuple[str, ...] = SYSTEMS
    transports: tuple[str, ...] = ("plaintext",)
    """The silos' transports; with ``tls`` the TLS trials go to ``results["silos_tls"]``."""

    @classmethod
    def quick(cls) -> Config:
        return cls(
            sizes=(5,),
            crash_trials=2,
            hang_trials=2,
            partition_trials=1,
            lossy_store_trials=1,
            idle_seconds=5.0,
            partition_idle_seconds=3.0,
            hold_seconds=2.0,
            systems=QUICK_SYSTEMS,
        )


def options() -> SiloOptions:
    return SiloOptions.local()


def floor_seconds() -> float:
    return options().detection_time


def present(values: Sequence[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def ratios(stats: dict[str, float]) -> dict[str, float]:
    floor = floor_seconds()
    return {"median": ratio(stats["median"], floor), "p99": ratio(stats["p99"], floor)}


def meets_targets(mode: str, stats: dict[str, float]) -> bool | None:
    """Whether ``stats`` (signal -> Dead row, seconds) meet the targets of ``mode``; None without samples."""
    if not stats["n"]:
        return None
    relative = ratios(stats)
    if mode == "crash":
        return relative["median"] <= TARGETS["crash_median"]
    return relative["median"] <= TARGETS["hang_median"] and relative["p99"] <= TARGETS["hang_p99"]


def serf_profiles(config: Config) -> list[str]:
    """The Serf profiles ``config.systems`` asks for."""
    return [profile for profile in PROFILES if f"serf-{profile}" in config.systems]


def plan(config: Config) -> list[str]:
    """Crashes and hangs alternated, so that a change of machine load hits both alike."""
    counts = {"crash": config.crash_trials, "hang": config.hang_trials}
    return [mode for index in range(max(counts.values())) for mode, count in counts.items() if index < count]


# --- silos on loopback ---------------------------------------------------------------------------


async def silo_trials(
    uri: str, size: int, config: Config, root: Path, rng: random.Random, tls: TlsSettings | None = None
) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    cluster_id = f"det{size}" + ("tls" if tls else "")
    bench = BenchCluster(root, uri, cluster_id, watch_views=config.watch_views, tls=tls, watch_takeover=True)
    trials: dict[str, list[KillTrial]] = {mode: [] for mode in MODES}
    idle: dict[str, Any] = {}
    extra_deaths = 0
    error = None
    try:
        await bench.start(size)
        idle = silo_idle(await bench.idle_cost(config.idle_seconds), size)
        modes = plan(config)
        for index, mode in enumerate(modes):
            trial = await (bench.kill_one(rng) if mode == "crash" else bench.freeze_one(rng))
            trials[mode].append(trial)
            extra_deaths += await bench.replace_missing(size) - 1
            print(
                f"  N={size}{' TLS' if tls else ''} {mode} {index + 1}/{len(modes)}: "
                f"Dead after {fmt_s(trial.table_dead)} "
                f"({fmt_ratio(trial.table_dead)} x floor), takeover after {fmt_s(trial.takeover)} "
                f"({fmt_ratio(trial.takeover)} x floor), last view after {fmt_s(trial.last_view)}",
                flush=True,
            )
    except (RuntimeError, AssertionError) as exc:  # a cluster that would not converge: keep the trials so far, say why
        error = str(exc)[:2000]
        print(f"  N={size} stopped early: {error[:300]}", flush=True)
    finally:
        await bench.close()
    return {
        **{mode: summarize_trials(mode, trials[mode]) for mode in MODES},
        "other_silos_declared_dead": extra_deaths,
        "idle": idle,
        "error": error,
    }


def silo_idle(measured: dict[str, Any], size: int) -> dict[str, Any]:
    cpu = summarize(measured["cpu_s_per_min_each"])
    return {
        "seconds": measured["seconds"],
        "silos": measured["silos"],
        "cpu_s_per_min_per_silo": cpu,
        "pings_per_s_per_silo": pings_per_second(options(), size),
        "pings_basis": "computed: min(N - 1, num_probed_silos) / probe_interval (idle: no indirect probes)",
    }


SILO_MEASURES = {
    "table_dead": "Dead row",
    "takeover": "takeover",
    "dead_to_takeover": "Dead row -> takeover",
    "last_view": "last view",
}
"""The silos' per-trial times (``KillTrial`` attributes: seconds after the signal, the gap after the
Dead row), with their labels in the table."""


def summarize_trials(mode: str, trials: list[KillTrial]) -> dict[str, Any]:
    stats = {measure: summarize(present([getattr(t, measure) for t in trials])) for measure in SILO_MEASURES}
    return {
        "signal": MODES[mode],
        **stats,
        "ratio_to_floor": {measure: ratios(values) for measure, values in stats.items()},
        "meets_target": meets_targets(mode, stats["table_dead"]),
        "undetected_within_bound": sum(t.table_dead is None for t in trials),
        "takeover_missing": sum(t.takeover is None for t in trials),
        "takeover_before_dead": sum(t.dead_to_takeover is not None and t.dead_to_takeover < 0 for t in trials),
        "trials": [t.to_json() for t in trials],
    }


async def all_silo_trials(config: Config, root: Path, rng: random.Random, results: dict[str, Any]) -> None:
    """The silos' trials at every N, once per transport; TLS results in ``silos_tls`` and their ratio."""
    certificates = (
        dict(zip(config.sizes, silo_certificates(root, [f"det{size}tls" for size in config.sizes]), strict=True))
        if "tls" in config.transports
        else {}
    )
    with services.table_uris(config.backend, root) as fresh_uri:
        for size in config.sizes:
            for transport in config.transports:
                tls = certificates.get(size) if transport == "tls" else None
                key, label = ("silos_tls", "-tls") if tls else ("silos", "")
                print(f"[detection] silos on {config.backend} ({transport}), N={size}", flush=True)
                started = wall()
                results.setdefault(key, {})[str(size)] = await silo_trials(
                    fresh_uri(), size, config, root / f"silos{label}-{size}", rng, tls
                )
                results["elapsed_s"][f"silos{label}-{size}"] = wall() - started
    if "silos_tls" in results and results["silos"]:
        results["tls_vs_plaintext"] = transport_ratios(results["silos"], results["silos_tls"])


def transport_ratios(plaintext: dict[str, Any], tls: dict[str, Any]) -> dict[str, Any]:
    """Per N and failure: the Dead-row medians of both transports, TLS / plaintext, and the 10% target."""
    comparison: dict[str, Any] = {}
    for size in plaintext.keys() & tls.keys():
        comparison[size] = {}
        for mode in MODES:
            plain_median = plaintext[size][mode]["table_dead"]["median"]
            tls_median = tls[size][mode]["table_dead"]["median"]
            relative = ratio(tls_median, plain_median)
            comparison[size][mode] = {
                "plaintext_median_s": plain_median,
                "tls_median_s": tls_median,
                "tls_over_plaintext": relative,
                "within_target": None if math.isnan(relative) else relative <= TLS_TARGET,
            }
    return comparison


# --- ZooKeeper -----------------------------------------------------------------------------------


def server_pid(zookeeper: ZooKeeperServer) -> int | None:
    """The ZooKeeper JVM's pid: the process whose command line names this server's zoo.cfg."""
    config = str(zookeeper.workdir / "zoo.cfg")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if config in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0"):
                    return int(entry.name)
            except OSError:
                continue
    return None


def packets_received(zookeeper: ZooKeeperServer) -> int | None:
    """The server's count of packets received from clients (``srvr``), pings included."""
    match = re.search(r"^Received: (\d+)", four_letter_word(zookeeper.port, "srvr"), re.MULTILINE)
    return int(match.group(1)) if match else None


def zookeeper_idle(group: ZkGroup, zookeeper: ZooKeeperServer, seconds: float) -> dict[str, Any]:
    """CPU per member and of the server, and packets per session, over ``seconds`` of an idle group.

    Sessions = the members plus the observer; idle, a session's packets are its pings.
    """
    members = [group.pid(name) for name in group.running]
    server = server_pid(zookeeper)
    pids = [*members, *([server] if server is not None else [])]
    before = {pid: cpu_seconds(pid) for pid in pids}
    received_before = packets_received(zookeeper)
    started = wall()
    time.sleep(seconds)
    elapsed = wall() - started
    after = {pid: cpu_seconds(pid) for pid in pids}
    received_after = packets_received(zookeeper)

    def per_minute(pid: int) -> float:
        start, end = before[pid], after[pid]
        return math.nan if start is None or end is None else (end - start) * 60.0 / elapsed

    packets = math.nan
    if received_before is not None and received_after is not None:
        packets = (received_after - received_before) / elapsed / (len(members) + 1)
    server_cpu = per_minute(server) if server is not None else math.nan
    return {
        "seconds": seconds,
        "members": len(members),
        "cpu_s_per_min_per_member": summarize([per_minute(pid) for pid in members]),
        "server_cpu_s_per_min": server_cpu,
        "server_cpu_s_per_min_per_member": server_cpu / len(members) if members else math.nan,
        "pings_per_s_per_member": packets,
        "pings_basis": "counted: the server's received-packet counter (srvr) / sessions (members + observer)",
    }


def zookeeper_trials(
    zookeeper: ZooKeeperServer, size: int, config: Config, root: Path, rng: random.Random
) -> dict[str, Any]:
    floor = floor_seconds()
    root.mkdir(parents=True, exist_ok=True)
    group = ZkGroup(root, zookeeper.hosts, f"/bench/det{size}", floor)
    samples: dict[str, list[float | None]] = {mode: [] for mode in MODES}
    try:
        group.start(size)
        idle = zookeeper_idle(group, zookeeper, config.idle_seconds)
        modes = plan(config)
        for index, mode in enumerate(modes):
            sample = group.kill_one(rng, bound=10 * floor + 10, freeze=mode == "hang")
            samples[mode].append(sample)
            print(f"  ZooKeeper N={size} {mode} {index + 1}/{len(modes)}: node gone after {fmt_s(sample)}", flush=True)
            group.replace_missing(size)
        false_positives = group.false_positives()
    finally:
        group.close()
    result: dict[str, Any] = {"other_members_expired": len(false_positives), "idle": idle}
    for mode, values in samples.items():
        stats = summarize(present(values))
        result[mode] = {
            "signal": MODES[mode],
            "node_gone": stats,
            "ratio_to_floor": ratios(stats),
            "undetected_within_bound": sum(value is None for value in values),
            "samples": values,
        }
    return result


# --- Serf ------------------------------------------------------------------------------------------


def serf_idle(group: SerfGroup, seconds: float) -> dict[str, Any]:
    """CPU per agent over ``seconds`` of an idle group; probes per second from the profile."""
    pids = list(group.pids().values())
    before = {pid: cpu_seconds(pid) for pid in pids}
    started = wall()
    time.sleep(seconds)
    elapsed = wall() - started
    per_minute = []
    for pid in pids:
        start, end = before[pid], cpu_seconds(pid)
        if start is not None and end is not None:
            per_minute.append((end - start) * 60.0 / elapsed)
    return {
        "seconds": seconds,
        "members": len(pids),
        "cpu_s_per_min_per_member": summarize(per_minute),
        "probes_per_s_per_member": 1.0 / PROFILE_TIMINGS[group.profile]["probe_interval_s"],
        "probes_basis": "computed: memberlist probes one member per probe_interval (gossip and push-pull not counted)",
    }


def serf_trials(profile: str, size: int, config: Config, root: Path, rng: random.Random) -> dict[str, Any]:
    group = SerfGroup(profile, root)
    kills: dict[str, list[SerfKill]] = {mode: [] for mode in MODES}
    idle: dict[str, Any] = {}
    false_failures: list[str] = []
    error = None
    try:
        group.start_loopback(size)
        idle = serf_idle(group, config.idle_seconds)
        modes = plan(config)
        for index, mode in enumerate(modes):
            kill = group.kill_one(rng, bound=SERF_BOUND, freeze=mode == "hang")
            kills[mode].append(kill)
            print(
                f"  Serf {profile} N={size} {mode} {index + 1}/{len(modes)}: first failed after "
                f"{fmt_s(kill.first_failed)}, all {kill.observers} after {fmt_s(kill.all_failed)}",
                flush=True,
            )
            group.replace_missing(size)
        false_failures = group.false_failures()
    except RuntimeError as exc:  # agents that would not join: keep the trials so far, say why
        error = str(exc)[:2000]
        print(f"  Serf {profile} N={size} stopped early: {error[:300]}", flush=True)
    finally:
        group.close()
    result: dict[str, Any] = {
        "profile": profile,
        "timings": PROFILE_TIMINGS[profile],
        "other_members_failed": len(false_failures),
        "false_failures": false_failures,
        "idle": idle,
        "error": error,
    }
    for mode, trials in kills.items():
        first = summarize(present([k.first_failed for k in trials]))
        last = summarize(present([k.all_failed for k in trials]))
        result[mode] = {
            "signal": MODES[mode],
            "first_failed": first,
            "all_failed": last,
            "ratio_to_floor": {"first_failed": ratios(first), "all_failed": ratios(last)},
            "undetected_within_bound": sum(k.all_failed is None for k in trials),
            "trials": [k.to_json() for k in trials],
        }
    return result


# --- partitions ------------------------------------------------------------------------------------


async def partition_trials(config: Config, root: Path, rng: random.Random) -> dict[str, Any]:
    from testbed.netfaults import lab_unavailable_reason

    reason = lab_unavailable_reason()
    if reason is not None:
        print(f"[detection] partitions skipped: {reason}", flush=True)
        return {"unavailable": reason}
    results: dict[str, Any] = {}
    for scenario, minority in SCENARIOS.items():
        trials: list[PartitionTrial] = []
        errors: list[str] = []
        for index in range(config.partition_trials):
            partition_plan = PartitionPlan(
                scenario,
                config.partition_size,
                minority,
                idle_window=config.partition_idle_seconds,
                hold=config.hold_seconds,
            )
            try:
                trial = await partition_trial(root / f"{scenario}-{index}", partition_plan, rng, f"p{index}")
            except (RuntimeError, AssertionError, OSError) as exc:
                errors.append(str(exc)[:2000])
                print(f"  {scenario} {index + 1}: failed: {str(exc)[:300]}", flush=True)
                continue
            trials.append(trial)
            print(
                f"  {scenario} {index + 1}/{config.partition_trials}: minority {trial.minority} Dead after "
                f"{fmt_s(trial.all_dead)} ({fmt_ratio(trial.all_dead)} x floor), exited after "
                f"{fmt_s(trial.all_exited)}, codes {trial.exit_codes}, majority declared dead "
                f"{trial.majority_declared_dead or 'none'}, history {'ok' if trial.history_error is None else 'BAD'}",
                flush=True,
            )
        results[scenario] = summarize_partitions(trials, errors)
    return results


def lossy_store_scenario(config: Config, root: Path, rng: random.Random) -> dict[str, Any]:
    from testbed.netfaults import lab_unavailable_reason

    reason = lab_unavailable_reason()
    if reason is not None:
        print(f"[detection] lossy store skipped: {reason}", flush=True)
        return {"unavailable": reason}
    print(f"[detection] kill to Dead with {config.lossy_store_loss:.0%} loss on the table's link", flush=True)
    return lossy_store_trials(root, config.lossy_store_trials, config.lossy_store_loss, rng, config.lossy_store_settle)


def summarize_partitions(trials: list[PartitionTrial], errors: list[str]) -> dict[str, Any]:
    dead = summarize(present([t.all_dead for t in trials]))
    exited = summarize(present([t.all_exited for t in trials]))
    return {
        "trials": len(trials),
        "all_dead": dead,
        "all_exited": exited,
        "ratio_to_floor": {"all_dead": ratios(dead), "all_exited": ratios(exited)},
        "minority_exited_with_3": sum(t.all_exited is not None for t in trials),
        "majority_declared_dead": sum(len(t.majority_declared_dead) for t in trials),
        "history_errors": sum(t.history_error is not None for t in trials),
        "cut_verified": sum(t.cut_verified is True for t in trials),
        "idle_segments_per_s_per_silo": summarize([x for t in trials for x in t.idle_segments_per_s]),
        "idle_cpu_s_per_min_per_silo": summarize([x for t in trials for x in t.idle_cpu_s_per_min]),
        "errors": errors,
        "trials_detail": [t.to_json() for t in trials],
    }


# --- the run ---------------------------------------------------------------------------------------


async def run(config: Config) -> dict[str, Any]:
    rng = random.Random(config.seed)
    floor = floor_seconds()
    results: dict[str, Any] = {
        "floor_s": floor,
        "probe_interval_s": options().effective_probe_interval,
        "targets_x_floor": TARGETS,
        "backend": config.backend,
        "silos": {},
        "zookeeper": {},
        "serf": {},
        "partitions": {},
        "systems": list(config.systems),
        "elapsed_s": {},
    }
    with workdir(NAME) as root:
        if "silos" in config.systems:
            await all_silo_trials(config, root, rng, results)
        if "zookeeper" in config.systems:
            with services.zookeeper(root) as zookeeper:
                for size in config.sizes:
                    print(f"[detection] ZooKeeper ephemeral nodes, N={size}", flush=True)
                    started = wall()
                    results["zookeeper"][str(size)] = await asyncio.to_thread(
                        zookeeper_trials, zookeeper, size, config, root / f"zk-{size}", rng
                    )
                    results["elapsed_s"][f"zookeeper-{size}"] = wall() - started
        profiles = serf_profiles(config)
        reason = serf_unavailable_reason() if profiles else None
        if reason is not None:
            print(f"[detection] Serf skipped: {reason}", flush=True)
            results["serf"] = {"unavailable": reason}
        for profile in profiles if reason is None else []:
            results["serf"][profile] = {}
            for size in config.sizes:
                print(f"[detection] Serf agents, profile {profile}, N={size}", flush=True)
                started = wall()
                results["serf"][profile][str(size)] = await asyncio.to_thread(
                    serf_trials, profile, size, config, root / f"serf-{profile}-{size}", rng
                )
                results["elapsed_s"][f"serf-{profile}-{size}"] = wall() - started
        if "partitions" in config.systems:
            print(f"[detection] partitions of {config.partition_size} silos in network namespaces", flush=True)
            started = wall()
            results["partitions"] = await partition_trials(config, root / "partitions", rng)
            results["elapsed_s"]["partitions"] = wall() - started
        if "lossy-store" in config.systems:
            started = wall()
            results["lossy_store"] = await asyncio.to_thread(lossy_store_scenario, config, root / "lossy-store", rng)
            results["elapsed_s"]["lossy-store"] = wall() - started
    print("[detection] seconds per phase: " + ", ".join(f"{k} {v:.0f}" for k, v in results["elapsed_s"].items()))
    return results


# --- output ----------------------------------------------------------------------------------------


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value / floor_seconds():.2f}"


def target_text(mode: str) -> str:
    if mode == "crash":
        return f"median <= {TARGETS['crash_median']}"
    return f"median <= {TARGETS['hang_median']}, p99 <= {TARGETS['hang_p99']}"


def yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def detection_rows(results: dict[str, Any]) -> list[list[object]]:
    """One row per system, N, failure and measure: seconds, ratios to the floor, target, trials, false deaths."""
    rows: list[list[object]] = []
    silo_runs = {"silos": results["silos"], "silos (TLS)": results.get("silos_tls", {})}
    for system, size, entry in (
        (system, size, entry) for system, runs in silo_runs.items() for size, entry in runs.items()
    ):
        for mode in MODES:
            for measure, label in SILO_MEASURES.items():
                stats = entry[mode][measure]
                relative = entry[mode]["ratio_to_floor"][measure]
                dead_row = measure == "table_dead"
                rows.append(
                    [system, size, f"{mode} ({MODES[mode]})", label, stats["median"], stats["p99"],
                     relative["median"], relative["p99"], target_text(mode) if dead_row else "",
                     yes_no(entry[mode]["meets_target"]) if dead_row else "", stats["n"],
                     entry["other_silos_declared_dead"]]
                )  # fmt: skip
    for size, entry in results["zookeeper"].items():
        for mode in MODES:
            stats, relative = entry[mode]["node_gone"], entry[mode]["ratio_to_floor"]
            rows.append(
                ["ZooKeeper", size, f"{mode} ({MODES[mode]})", "node deleted", stats["median"], stats["p99"],
                 relative["median"], relative["p99"], "", "", stats["n"], entry["other_members_expired"]]
            )  # fmt: skip
    for profile, size, entry in serf_entries(results):
        for mode in MODES:
            for measure, label in (("first_failed", "first member-failed"), ("all_failed", "all survivors")):
                stats, relative = entry[mode][measure], entry[mode]["ratio_to_floor"][measure]
                rows.append(
                    [f"Serf {profile}", size, f"{mode} ({MODES[mode]})", label, stats["median"], stats["p99"],
                     relative["median"], relative["p99"], "", "", stats["n"], entry["other_members_failed"]]
                )  # fmt: skip
    return rows


def serf_entries(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(profile, N, entry) of every Serf run in ``results`` (none if Serf was not run or not installed)."""
    serf = results.get("serf", {})
    return [
        (profile, size, entry)
        for profile, sizes in serf.items()
        if isinstance(sizes, dict)
        for size, entry in sizes.items()
    ]


DETECTION_HEADERS = ["system", "N", "failure", "measure", "median s", "p99 s", "median/floor", "p99/floor",
                     "target (x floor)", "met", "trials", "false deaths"]  # fmt: skip


def partition_rows(results: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for scenario, entry in results["partitions"].items():
        if not isinstance(entry, dict):
            continue
        dead, exited = entry["all_dead"], entry["all_exited"]
        relative_dead, relative_exit = entry["ratio_to_floor"]["all_dead"], entry["ratio_to_floor"]["all_exited"]
        rows.append(
            [scenario, entry["trials"], dead["median"], dead["p99"], relative_dead["median"], relative_dead["p99"],
             exited["median"], exited["p99"], relative_exit["median"], relative_exit["p99"],
             f"{entry['minority_exited_with_3']}/{entry['trials']}", entry["majority_declared_dead"],
             f"{entry['trials'] - entry['history_errors']}/{entry['trials']}"]
        )  # fmt: skip
    return rows


PARTITION_HEADERS = ["scenario", "trials", "all Dead median s", "p99 s", "median/floor", "p99/floor",
                     "all exited median s", "p99 s", "median/floor", "p99/floor", "exited with 3",
                     "majority declared dead", "history ok"]  # fmt: skip


def cost_rows(results: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    silo_runs = {"silos": results["silos"], "silos (TLS)": results.get("silos_tls", {})}
    for system, size, entry in (
        (system, size, entry) for system, runs in silo_runs.items() for size, entry in runs.items()
    ):
        idle = entry["idle"]
        if idle:
            rows.append(
                [system, size, idle["pings_per_s_per_silo"], "computed", idle["cpu_s_per_min_per_silo"]["median"],
                 math.nan]
            )  # fmt: skip
    for size, entry in results["zookeeper"].items():
        idle = entry["idle"]
        rows.append(
            ["ZooKeeper", size, idle["pings_per_s_per_member"], "counted", idle["cpu_s_per_min_per_member"]["median"],
             idle["server_cpu_s_per_min"]]
        )  # fmt: skip
    for profile, size, entry in serf_entries(results):
        idle = entry["idle"]
        if idle:
            rows.append(
                [f"Serf {profile}", size, idle["probes_per_s_per_member"], "computed",
                 idle["cpu_s_per_min_per_member"]["median"], math.nan]
            )  # fmt: skip
    return rows


COST_HEADERS = ["system", "N", "probes/s per member", "basis", "CPU s/min per member (median)",
                "ZooKeeper server CPU s/min"]  # fmt: skip


def segments_note(results: dict[str, Any]) -> str | None:
    """The measured TCP segments per silo beside the computed ping rate, from the partition clusters' idle time."""
    segments = [
        entry["idle_segments_per_s_per_silo"]["median"]
        for entry in results["partitions"].values()
        if isinstance(entry, dict) and entry["idle_segments_per_s_per_silo"]["n"]
    ]
    if not segments:
        return None
    size = 5
    pings = pings_per_second(options(), size)
    median = sorted(segments)[len(segments) // 2]
    return (
        f"Check of the computed rate, N = {size} in network namespaces: {median:.0f} TCP segments/s in+out per silo "
        f"while idle, for {pings:.0f} pings sent + {pings:.0f} answered per second: "
        f"{median / (2 * pings):.1f} segments per ping exchange."
    )


TRANSPORT_HEADERS = ["N", "failure", "plaintext median s", "TLS median s", "TLS / plaintext", "within 10%"]


def transport_rows(results: dict[str, Any]) -> list[list[object]]:
    return [
        [size, f"{mode} ({MODES[mode]})", entry["plaintext_median_s"], entry["tls_median_s"],
         entry["tls_over_plaintext"], yes_no(entry["within_target"])]
        for size, modes in results["tls_vs_plaintext"].items()
        for mode, entry in modes.items()
    ]  # fmt: skip


def report(results: dict[str, Any]) -> None:
    floor = results["floor_s"]
    rows = detection_rows(results)
    if rows:
        print_table(
            f"Failure to detection; floor = num_missed_probes_limit x probe_timeout = {floor}s, "
            f"probe_interval = {results['probe_interval_s']}s",
            DETECTION_HEADERS,
            rows,
        )
    if "unavailable" in results["partitions"]:
        print(f"\nPartitions not measured: {results['partitions']['unavailable']}")
    elif not results["partitions"]:
        print("\nPartitions not run (not in --systems)")
    else:
        print_table("Partition (5 silos, network namespaces): cut to minority Dead / exited", PARTITION_HEADERS,
                    partition_rows(results))  # fmt: skip
    if "tls_vs_plaintext" in results:
        print_table(
            f"Detection with mutual TLS beside plaintext (Dead row medians; target TLS / plaintext <= {TLS_TARGET})",
            TRANSPORT_HEADERS,
            transport_rows(results),
        )
    lossy = results.get("lossy_store")
    if lossy is not None and "unavailable" not in lossy:
        print_table(
            f"Kill to Dead with {lossy['loss']:.0%} loss on the table's link (5 silos, PostgreSQL, namespaces)",
            LOSSY_STORE_HEADERS,
            lossy_store_rows(lossy),
        )
    print_table("Cost of an idle cluster", COST_HEADERS, cost_rows(results))
    note = segments_note(results)
    if note:
        print(note)
    if "unavailable" in results.get("serf", {}):
        print(f"Serf not measured: {results['serf']['unavailable']}")


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    serf = {profile: sizes for profile, sizes in results.get("serf", {}).items() if isinstance(sizes, dict)}
    sizes = sorted({*results["silos"], *results["zookeeper"], *(s for runs in serf.values() for s in runs)}, key=int)
    groups = [f"N={s}" for s in sizes]

    def stat_of(runs: dict[str, Any], size: str, mode: str, measure: str | None, stat: str) -> float:
        if size not in runs:
            return math.nan
        relative = runs[size][mode]["ratio_to_floor"]
        return float((relative[measure] if measure else relative)[stat])

    for axis, mode in zip(axes[0], MODES, strict=True):
        series = {
            f"silos {label} {stat}": [stat_of(results["silos"], s, mode, measure, stat) for s in sizes]
            for measure, label in (("table_dead", "Dead row"), ("takeover", "takeover"))
            for stat in ("median", "p99")
        }
        for stat in ("median", "p99"):
            series[f"ZooKeeper {stat}"] = [stat_of(results["zookeeper"], s, mode, None, stat) for s in sizes]
        for profile, runs in serf.items():
            series[f"Serf {profile} first failed median"] = [
                stat_of(runs, s, mode, "first_failed", "median") for s in sizes
            ]
        grouped_bars(axis, groups, series, "x floor")
        targets = [("median", TARGETS["crash_median"])] if mode == "crash" else [
            ("median", TARGETS["hang_median"]), ("p99", TARGETS["hang_p99"])]  # fmt: skip
        for stat, value in targets:
            style = {"median": ("purple", ":"), "p99": ("magenta", "-.")}[stat]
            axis.axhline(value, color=style[0], linestyle=style[1], linewidth=1.5, label=f"target {stat}")
        axis.axhline(1.0, color="black", linestyle="--", linewidth=1, label="floor")
        axis.legend(fontsize=7, ncol=2, loc="upper left")
        axis.set_title(f"{mode} ({MODES[mode]}) to detection, multiples of the {results['floor_s']} s floor")
    scenarios = [s for s, e in results["partitions"].items() if isinstance(e, dict)]
    series = {
        f"{label} {stat}": [results["partitions"][s]["ratio_to_floor"][measure][stat] for s in scenarios]
        for measure, label in (("all_dead", "all Dead"), ("all_exited", "all exited"))
        for stat in ("median", "p99")
    }
    lossy = results.get("lossy_store", {})
    if "lossy" in lossy:  # kill -> Dead with the table's link lossy, and its lossless control
        for key, group in (("lossless", "store link whole"), ("lossy", f"store link {lossy['loss']:.0%} loss")):
            scenarios.append(group)
            for label, values in series.items():
                stat = label.rsplit(" ", 1)[1]
                values.append(lossy[key]["ratio_to_floor"][stat] if label.startswith("all Dead") else math.nan)
    grouped_bars(axes[1][0], scenarios or ["not measured"], series if scenarios else {}, "x floor")
    axes[1][0].set_title("partition: cut to every minority silo Dead / exited; kill -> Dead, lossy store link")
    cost = {
        "silo": [
            results["silos"][s]["idle"].get("cpu_s_per_min_per_silo", {}).get("median", math.nan)
            if s in results["silos"] else math.nan for s in sizes],
        "ZooKeeper member": [
            results["zookeeper"][s]["idle"]["cpu_s_per_min_per_member"]["median"] if s in results["zookeeper"]
            else math.nan for s in sizes],
        "ZooKeeper server / N": [
            results["zookeeper"][s]["idle"]["server_cpu_s_per_min_per_member"] if s in results["zookeeper"]
            else math.nan for s in sizes],
        **{f"Serf {profile} agent": [
            runs[s]["idle"].get("cpu_s_per_min_per_member", {}).get("median", math.nan) if s in runs else math.nan
            for s in sizes] for profile, runs in serf.items()},
    }  # fmt: skip
    grouped_bars(axes[1][1], groups, cost, "CPU s per minute")
    axes[1][1].set_title("idle cost per member")
    save_figure(figure, path)


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus ``--systems``, ``--sizes`` and ``--trials``, applied over the preset."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--systems", default=None)
    extra.add_argument("--sizes", default=None)
    extra.add_argument("--trials", type=int, default=None)
    extra.add_argument("--transport", default=None)
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    changes: dict[str, Any] = {}
    if known.systems is not None:
        changes["systems"] = choices_list(known.systems, SYSTEMS, "--systems")
    if known.sizes is not None:
        changes["sizes"] = sizes_list(known.sizes)
    if known.transport is not None:
        changes["transports"] = choices_list(known.transport, TRANSPORTS, "--transport")
    if known.trials is not None:
        if known.trials < 1:
            raise SystemExit(f"--trials must be at least 1, got {known.trials}")
        changes["crash_trials"] = changes["hang_trials"] = known.trials
    return settings, dataclasses.replace(config, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)
    arguments = list(argv if argv is not None else sys.argv[1:])  # the recorded command omits the extra flags
    extra = {"options": asdict(options()), "targets_x_floor": TARGETS, "arguments": arguments}
    return run_benchmark(NAME, settings, config, lambda: asyncio.run(run(config)), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
