"""Accuracy: how many live silos are declared dead under stress and packet loss? Target: zero.

Nobody is killed during a run (only at its end, see the loss levels), so every Dead row written by
another silo is a false positive; a silo declared dead exits (and is replaced, to keep N).
Suspicion votes are counted too. Three scenarios, each beside ZooKeeper ephemeral nodes (session
timeout = the detection floor ``num_missed_probes_limit x probe_timeout``) where the fault can reach a ZooKeeper client:

``stall``: N real silos (local preset) on SQLite for a fixed time while (see
``benchmarks.stress``) one silo is stalled by SIGSTOP for a fraction of the floor every few
seconds, pinned to one CPU beside a busy-looping hog, and every other silo is SIGSTOPped in
short bursts about 10% of its time, which delays probes to and from it. The table is polled
every 0.5 s. Baseline: N ZooKeeper members under the same stress; a member whose node
vanishes while its process lives is a false positive.

``probe_loss``: N silos in ``benchmarks.silo_host`` processes, every silo's prober wrapped in
``benchmarks.lossy_prober.LossyProber`` (10% of pings and indirect-probe requests dropped, 10%
delayed by up to 0.8 x the probe timeout), no other stress. Kept beside the real-network runs
because it is the only scenario with probe *delay* (this kernel has no ``sch_netem``); it has
no ZooKeeper baseline. Target: 0.

``network`` (real packet loss, flapping links; ``benchmarks.accuracy_network``): for each loss level
(10%, 20%, 30%, 40%) and each flap level (1 s and 2 s cuts) a fresh
``NetworkLab`` (``testbed/netfaults/lab.py``): N ``silo run`` processes, each in its own network
namespace (``testbed/net_cluster.py``, one SQLite table on the shared filesystem, every
versioned write recorded with ``--history-file``), a ZooKeeper server in a namespace of its
own and one ZooKeeper member beside each silo, in the silo's namespace
(``benchmarks.zk_netns``). Both systems run at the same time in the same lab, so the same
iptables rule (``NetworkLab.set_loss``: each packet arriving at any host, the ZooKeeper
server's included, dropped with probability p) and the same CPU load hit both; running them
one after the other would give each a different machine. Loss is switched on once every silo
is Active and every member registered, held for the level's duration, then switched off;
what is still under way lands in the next 2 x floor and is counted. Silos declared dead are
counted from the recorded history (a Dead row written by another silo), cross-checked with
the table; votes from the history too (every vote is written). ZooKeeper expirations are the
deletions of a member's znode seen by an observer on the server's own host (loopback, which
the loss spares), cross-checked with the server's ``Expiring session`` log lines. A silo
declared dead is restarted (new generation, same host) after one floor; a member whose
session expired registers again in a new session, so both sides keep N for the whole level.
Serf runs in the same lab too (``benchmarks.serf_group``): one ``serf agent`` per profile
(``lan`` and ``local``, each profile its own cluster on its own ports) beside each silo, so the same
loss hits three detectors at once. Serf agents are never restarted: a live agent declared failed
refutes and rejoins by itself. Serf's false failures are counted from the agents' logs (stamped
on arrival) between loss-on and the cut: a live member's failure episode is a span during which at
least one agent held it failed, however many agents saw it; the ``EventMemberFailed`` lines of
every agent, the declarations (``Marking ... as failed``) and the refutations are reported too.
CPU per silo, per ZooKeeper member, of the server and per Serf agent come from
``/proc/<pid>/stat``, and the loss actually applied from the iptables rule counters. At the end
of each loss level, the loss still on, one host's silo, ZooKeeper member and Serf agents are
SIGKILLed: the seconds from each kill to its Dead row (from the history), to the session's
expiry (the observer) and to ``EventMemberFailed`` (first and every other agent) show that
the loss did not blind the detector ("not within" the bound if it did); those deaths are not
counted as false ones. A flap level has no loss: one host's links (its silo, ZooKeeper member
and Serf agents) are cut (``NetworkLab.isolate``) for the level's cut length and healed
(``heal``) for 1 s, over and over, and every system's false deaths are counted as above.
Targets (issue "failure detector v2"): no silo declared dead at 10% and 20% (over 600 s at
N = 10), at most a tenth of ZooKeeper's expirations at 30%, at most one per 10 minutes at 40%;
none with 1 s cuts (a cut of at most floor - probe interval, 1.25 s, has healed before any vote;
docs/protocol.md, "Short cuts"); 2 s cuts, longer than the 1.5 s floor, may kill. Needs root
and iptables; without them the scenario is skipped, with the reason printed and recorded, and
the others still run.

    python -m benchmarks.accuracy [--quick] [--scenarios stall,probe_loss,network]
        [--loss-levels 0.1,0.2,0.3,0.4|none] [--flap-levels 1,2|none] [--loss-seconds 600]
        [--loss-size 10] [--serf-profiles lan,local|none]

``--quick``: N = 5, 6 s stall and probe-loss runs, 10 s per level, the 40% loss level
and 1 s cuts. The level flags override either preset; naming one kind of level runs only the
levels named (``--loss-levels 0.4`` alone: no flap level). ``--loss-seconds`` is every level's
duration; ``--scenarios`` picks what runs (default: all three), ``--serf-profiles`` which Serf
profiles join the real-network runs (``none``: no Serf).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.accuracy_config import SCENARIOS, Config, floor_seconds
from benchmarks.accuracy_network import network_runs
from benchmarks.accuracy_report import level_name, met, network_tables
from benchmarks.common import (
    ROOT,
    RunSettings,
    choices_list,
    grouped_bars,
    parse_over_preset,
    print_table,
    pyplot,
    run_benchmark,
    save_figure,
    workdir,
)
from benchmarks.serf_group import PROFILES
from benchmarks.silo_cluster import JOIN_TIMEOUT, BenchCluster
from benchmarks.stress import CpuHog, Jitter, Staller, pin
from benchmarks.zk_group import ZkGroup
from membership_tables import (
    MembershipTable,
    SiloStatus,
    TableUnavailableError,
    open_table,
)
from silo.membership.options import SiloOptions
from testbed.services.process import ServerProcess, wait_until

NAME = "accuracy"
CLUSTER = "accuracy-probe-loss"
HOG_CPU = 0


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


def measure(config: Config) -> dict[str, Any]:
    """Every chosen scenario in one temp dir. The network runs are synchronous and run in the main
    thread (not under ``asyncio.to_thread``), so that Ctrl-C stops a ten-minute level at once and
    its lab is torn down on the way out."""
    with workdir(NAME) as root:
        results = asyncio.run(run(config, root))
        if "network" in config.scenarios:
            results["network_loss"] = network_runs(config, root)
    return results


async def run(config: Config, root: Path) -> dict[str, Any]:
    """The stall and probe-loss scenarios (the ones driven from an event loop)."""
    floor = floor_seconds()
    results: dict[str, Any] = {"floor_s": floor, "size": config.size, "seconds": config.seconds, "runs": {}}
    if "stall" in config.scenarios:
        with services.zookeeper(root) as zookeeper:
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
    if "probe_loss" in config.scenarios:
        print("[accuracy] silos, probe loss and delay in the prober", flush=True)
        uri = f"sqlite:///{root / 'probe_loss.db'}"
        lossy = await probe_loss_run(uri, config, root / "silos-probe_loss")
        results["probe_loss_10pct"] = {
            **lossy,
            "target": "zero",
            "target_met": lossy["live_silos_declared_dead"] == 0,
        }
    return results


def report(results: dict[str, Any]) -> None:
    if results["runs"]:
        rows = [
            [label, entry["stall_s"], entry["silos"]["live_silos_declared_dead"], entry["silos"]["suspicion_votes"],
             entry["zookeeper"]["live_members_expired"], entry["silos"]["stalls"], entry["silos"]["jitter_pauses"]]
            for label, entry in results["runs"].items()
        ]  # fmt: skip
        print_table(
            f"False positives in {results['seconds']:.0f}s, N={results['size']}, stall + CPU hog + ~10% SIGSTOP jitter",
            ["run", "stall s", "silos declared dead", "votes cast", "ZooKeeper sessions expired", "stalls",
             "jitter pauses"],
            rows,
        )  # fmt: skip
    lossy = results.get("probe_loss_10pct")
    if lossy is not None:
        injected = lossy["injected"]
        print_table(
            f"Probe loss in the prober, {results['seconds']:.0f}s, N={results['size']} in {lossy['hosts']} processes",
            ["probes dropped", "probes delayed", "silos declared dead", "votes cast",
             "injected dropped/delayed/forwarded", "ZooKeeper", "target", "met"],
            [[f"{lossy['probe_loss']:.0%}", f"{lossy['probe_delay']:.0%}", lossy["live_silos_declared_dead"],
              lossy["suspicion_votes"], f"{injected['dropped']}/{injected['delayed']}/{injected['forwarded']}",
              "not applicable", "0", met(lossy.get("target_met"))]],
        )  # fmt: skip
    network = results.get("network_loss")
    if network is None:
        return
    if "skipped" in network:
        print(f"\nReal-network runs skipped: {network['skipped']}")
        return
    for table in network_tables(network):
        print_table(table.title, table.headers, table.rows)
    if "serf_unavailable" in network:
        print(f"Serf not measured: {network['serf_unavailable']}")


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    network = results.get("network_loss", {})
    levels: dict[str, Any] = {**network.get("levels", {}), **network.get("flap_levels", {})}
    stress = bool(results["runs"]) or "probe_loss_10pct" in results
    panels = int(stress) + int(bool(levels)) or 1
    figure, axes = plt.subplots(1, panels, figsize=(8 * panels, 4.5), squeeze=False)
    axis_iter = iter(axes[0])
    if stress:
        axis = next(axis_iter)
        runs = {label: entry["silos"] for label, entry in results["runs"].items()}
        expired = [float(entry["zookeeper"]["live_members_expired"]) for entry in results["runs"].values()]
        if "probe_loss_10pct" in results:
            runs["probe_loss_10pct"] = results["probe_loss_10pct"]
            expired.append(math.nan)
        labels = list(runs)
        grouped_bars(
            axis,
            labels,
            {
                "silos: live silos declared dead": [float(runs[k]["live_silos_declared_dead"]) for k in labels],
                "silos: suspicion votes cast": [float(runs[k]["suspicion_votes"]) for k in labels],
                "ZooKeeper: live sessions expired (n/a for probe loss)": expired,
            },
            "count over the run",
        )
        axis.set_title(f"false positives under stress (floor {results['floor_s']}s)")
    if levels:
        axis = next(axis_iter)
        labels = [level_name(entry) for entry in levels.values()]
        grouped_bars(
            axis,
            labels,
            {
                "silos: live silos declared dead": [
                    float(e["silos"]["live_silos_declared_dead"]) for e in levels.values()
                ],
                "ZooKeeper: live sessions expired": [
                    float(e["zookeeper"]["live_sessions_expired"]) for e in levels.values()
                ],
                **{
                    f"Serf {profile}: live members failed": [
                        float(e.get("serf", {}).get(profile, {}).get("live_members_failed", math.nan))
                        for e in levels.values()
                    ]
                    for profile in PROFILES
                    if any(profile in e.get("serf", {}) for e in levels.values())
                },
            },
            "count over the level",
        )
        first = next(iter(levels.values()))
        axis.set_title(
            f"real packet loss and flapping links (iptables)\nN={first['size']}, {first['seconds']:.0f}s per level, "
            f"session timeout = floor {network['session_timeout_s']}s"
        )
    if not stress and not levels:
        axis = next(axis_iter)
        axis.text(0.5, 0.5, network.get("skipped", "nothing measured"), ha="center", va="center", wrap=True)
        axis.set_axis_off()
    save_figure(figure, path)


def levels_list(text: str | None, flag: str, upper: float) -> tuple[float, ...]:
    """Comma-separated levels, each above 0 and below ``upper``; none for an absent flag or ``none``."""
    if text is None or text.strip() == "none":
        return ()
    try:
        levels = tuple(float(level) for level in text.split(",") if level.strip())
    except ValueError:
        levels = ()
    if not levels or not all(0.0 < level < upper for level in levels):
        bounds = "fractions between 0 and 1" if upper == 1.0 else "seconds above 0"
        raise SystemExit(f"{flag} must be {bounds} (or none), got {text!r}")
    return levels


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus this benchmark's own (see the module docstring), applied over the preset."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--scenarios", default=None)
    extra.add_argument("--loss-levels", default=None)
    extra.add_argument("--flap-levels", default=None)
    extra.add_argument("--loss-seconds", type=float, default=None)
    extra.add_argument("--loss-size", type=int, default=None)
    extra.add_argument("--serf-profiles", default=None)
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    changes: dict[str, Any] = {}
    if known.scenarios is not None:
        changes["scenarios"] = choices_list(known.scenarios, SCENARIOS, "--scenarios")
    if known.loss_levels is not None or known.flap_levels is not None:  # naming levels runs only those
        changes["loss_levels"] = levels_list(known.loss_levels, "--loss-levels", upper=1.0)
        changes["flap_levels"] = levels_list(known.flap_levels, "--flap-levels", upper=math.inf)
    if known.loss_seconds is not None:
        changes["loss_seconds"] = known.loss_seconds
    if known.loss_size is not None:
        changes["loss_size"] = known.loss_size
    if known.serf_profiles is not None:
        none = known.serf_profiles.strip() == "none"
        changes["serf_profiles"] = () if none else choices_list(known.serf_profiles, PROFILES, "--serf-profiles")
    return settings, dataclasses.replace(config, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)
    arguments = list(argv if argv is not None else sys.argv[1:])  # the recorded command omits the extra flags
    extra = {"options": asdict(SiloOptions.local()), "netem": False, "arguments": arguments}
    return run_benchmark(NAME, settings, config, lambda: measure(config), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
