"""Scale: hundreds to thousands of silos joining one PostgreSQL table at once, gossip on.

``benchmarks.silo_host`` processes hold many silos each (full Silo runtime, own gRPC server and
port per silo). All start together: every host binds its servers and waits, and the clock starts
when the last is listening (``hosts_ready_s`` is the process start-up before it); the benchmark
polls the table until every silo is Active (time to all Active, and the curve), counts the live
silos declared Dead while joining and over a steady window (every silo is live until the end,
so any Dead row is a false death), counts the silos' statements in that window with
``pg_stat_statements`` (reads, full reads, canonical writes, heartbeats per second), measures
resident memory and CPU per hosted silo, and finally SIGKILLs victims: one at a time, a few
times, timing crash to Dead at that size, then ``--mass-kill`` (10) of them at once, timing crash
to the last Dead row. The victims are silos of the size, each its own ``silo run`` process,
joining with the hosted silos (the trials kill those that turned Active); if they are not all
Active (a join that stopped on a saturated machine), or with ``--victims hosted``, Active hosted
silos crashed in process instead (``benchmarks.hosted_crash``: the port closed at once, nothing
written; ``victims`` in the JSON says which; a trial counts from when the host began the crash and
watches each victim for the bound from then, and lists apart, as ``not_stopped``, any whose host
did not get to it within twice the bound). For each kill it counts the versions the
removal took (``benchmarks.write_log``: the writes of the victim's row from the kill to its
Dead row, i.e. its votes and the Dead write, and all versions written meanwhile) and, for the
simultaneous kill, how many versions carried the Dead rows (one each, or several deaths in one
write).

A join that is not over after ``join_timeout`` does not end the size: ``join_stopped`` records
where it stopped and what limits it (how long the Active count stood still, the cores the silo
hosts used meanwhile), and the steady window and the kills run on the cluster as it stands, the
last joiners still trying. An overloaded machine (``--max-load``) or a host that exited ends it.

PostgreSQL gets ``connections_needed`` connections (200 refused the logins of 2,000 silos in
40 processes); ``hosts_for`` puts at most 50 silos in a process. ``--max-load`` stops a join
whose machine is overloaded (the load average is recorded when all are Active).

Timings are those of Orleans' defaults, not of the local preset, so that probing a thousand
silos fits two cores (see ``OVERRIDES``; the JSON records them), so the detection floor here
is ``num_missed_probes_limit x probe_timeout`` of those options: 15 s.

    python -m benchmarks.scale [--quick] [--sizes 200,500,1000] [--gossip on|off] [--steady SECONDS]
                               [--per-process N] [--max-load PER_CORE] [--mass-kill N] [--join-rate SILOS_PER_S]
                               [--join-timeout SECONDS] [--victims processes|hosted] [--set OPTION=VALUE ...]

``--join-rate`` paces the joins (that many silos start joining a second, the hosts interleaved)
instead of the storm, as a deployment that rolls silos out would: the time to all Active is then
at least ``silos / rate``.

``--set`` changes one silo option over ``OVERRIDES`` (repeatable), e.g. the faster probes of
the runs before 26 November (a 6 s floor): ``--set probe_timeout=2s --set probe_interval=2s``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import itertools
import math
import os
import random
import re
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import services, write_log
from benchmarks.common import (
    ROOT,
    RunSettings,
    grouped_bars,
    parse_over_preset,
    positive,
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
from benchmarks.hosted_crash import crash_file, hosted_victims
from benchmarks.mass_kill import ProcessVictim, Victim, kill_together
from benchmarks.option_flags import OptionPairs, add_set_flag, local_options_with, set_flags
from benchmarks.propagation import Counts, difference, reads_per_change, statement_counts
from benchmarks.scale_report import (
    REMOVAL_HEADERS,
    caused_counted,
    caused_figure,
    join_figure,
    join_stopped_line,
    removal_rows,
)
from benchmarks.silo_cluster import BenchCluster, KillTrial
from membership_tables import MembershipTableData, SiloStatus, TableUnavailableError, open_table
from membership_tables.sql import SqlOptions
from silo.membership.local_health import MAX_SCORE
from silo.membership.options import SiloOptions
from silo.membership.vote_caster import settle_time
from testbed.cluster_harness import SiloProcess, death_bound
from testbed.services.process import ServerProcess

NAME = "scale"
T = TypeVar("T")
OVERRIDES = {
    "probe_timeout": "5s",
    "probe_interval": "5s",
    "num_probed_silos": "3",
    "death_vote_expiration": "120s",
    "i_am_alive_table_publish_timeout": "30s",
    "table_refresh_timeout": "30s",
    "full_refresh_every": "3",
    "max_join_attempt_time": "600s",
    "defunct_silo_cleanup_period": "600s",
    "defunct_silo_expiration": "7d",
    "max_join_validation_pings": "19",
    "lease_timeout": "10s",
}
"""Orleans' default failure detection (3 probed silos, a probe every 5 s, 3 missed: a 15 s floor;
votes expire after 120 s: a monitor whose vote waits for a second one repeats it at most every 60 s,
each repeat a version) with a heartbeat every 30 s, a version read every 30 s and a full re-read
every 90 s (or when the version moved), a defunct-row cleanup round every 10 minutes, the production
preset's membership lease (10 s: each Active silo reads its own row every 2.5 s; the local preset's
1 s lease, a read every 0.25 s, is 8,000 reads a second at 2,000 silos; on this loaded machine it
fenced live silos 97 times in a 200-silo join), Dead rows kept for a week as in production (the
local preset's minute makes a read of the rows written since a view valid only within 30 s of the
view's last dated read, ``table_view.changes_suffice``: a joiner of a 2,000-silo storm that took
longer read the whole table after its Active write, 1,132 of the storm's 3,982 full reads); gossip
on or off by ``Config.gossip``. A joining silo validates its connectivity to 19 Active silos: its 3
probe targets and the 16 it sends gossip to (their channels stay open for later), not to all of them
(N^2 / 2 pings in a join storm) and no random ones (each a gRPC channel opened for one ping, ~1.3 ms
of CPU on the two sides against ~0.4 ms on an open channel). 19 silos placed by hash include one of
a tenth of the cluster that the joiner cannot reach with probability 1 - 0.9^19 = 86%.

Why slower probes than the local preset: on this machine a probe costs about 1 ms of CPU on the
two sides (a ping and its answer through gRPC's asyncio stack, measured with 50 silos in one
process: 0.099 cores probing every 2 s, 0.028 every 20 s), so 1,000 silos probing 3 targets
every 2 s would need 1.5 of the two cores for probes alone, every 5 s 0.6. Those figures are
for monitors at their own phases (``align_probes=false``); aligned probes (the default since
2026-11-28) share their wake-ups and cost 35-40% of that (docs/scale.md). Each silo of a real
deployment has a machine of its own and can probe every second. Runs before 2026-11-26 (later)
probed every 2 s (floor 6 s), heartbeated every 10 s and validated 30 (then 100) silos; runs
before 2026-11-25 probed every 0.25 s. ``--set`` changes any of these."""
OVERLOAD_PER_CORE = 30.0
"""A one-minute load average above this many per core (after ``OVERLOAD_GRACE`` s) stops a join that
does not fit (``--max-load`` changes it: a 1,000-silo storm here runs at 25-32 per core near its end)."""
OVERLOAD_GRACE = 60.0
PROCESSES_PER_CORE = 10
"""Host processes per core at most (``hosts_for``): enough event loops that none holds more than
~50 silos at 1,000 on two cores (its loop lag counts against every silo it holds), few enough
that interpreters (~35 MB and a few gRPC threads each) do not crowd the machine."""
MIN_PER_PROCESS = 10
MAX_PER_PROCESS = 50
"""Silos per host process at most when ``hosts_for`` chooses: past ``PROCESSES_PER_CORE`` processes
per core if need be (2,000 silos on two cores: 40 processes), as one event loop's lag counts
against every silo it holds (the 1,000-silo runs held 50 a process)."""
TABLE_POLL = 0.5
"""Seconds between the benchmark's table reads while it waits for a Dead row: each reads every row
(2,000 at the largest size) on the cores the silos share; the Dead time is the votes', not the poll's."""
BENCHMARK_CONNECTIONS = 30
"""PostgreSQL connections of the benchmark itself (its table handles, statement counts, write log), with slack."""


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...] = (200, 500, 1000)
    """Cluster sizes tried in turn (a fresh cluster each); the run stops at the first that fails."""
    gossip: bool = True
    """``use_liveness_gossip`` of every silo (``--gossip off`` to compare)."""
    per_process: int | None = None
    """Silos per host process; ``None`` = ``hosts_for`` chooses for this machine's cores."""
    join_timeout: float = 300.0
    """Seconds the join may take; then the size goes on with the cluster as it stands (``--join-timeout``)."""
    steady_window: float = 300.0
    """Seconds of steady state watched for false deaths and counted for store load (``--steady``)."""
    detection_trials: int = 3
    mass_kill: int = 10
    """Silos SIGKILLed at one moment after the single kills (``--mass-kill``; 0: none)."""
    change_window: float = 25.0
    """Seconds counted from each kill, and one ``baseline_period`` before (the baseline), for the reads a
    death causes: longer than the detection time, at most the period."""
    seed: int = 3
    max_load: float = OVERLOAD_PER_CORE
    """One-minute load average per core that stops a join (``--max-load``)."""
    join_rate: float | None = None
    """Silos that start joining per second over the whole cluster, the hosts interleaved
    (``--join-rate``); None: all at once, the join storm."""
    options_set: OptionPairs = ()
    """``--set`` options, applied over ``OVERRIDES``."""
    victims: str = "processes"
    """What the kill trials kill (``--victims``): ``processes``, ``silo run`` processes started with
    the storm and SIGKILLed (hosted silos crashed in process instead if they are not all Active),
    or ``hosted``, hosted silos crashed in process (``benchmarks.hosted_crash``)."""

    @classmethod
    def quick(cls) -> Config:
        """CI-sized: 20 silos, one kill, and table timers of 5 s, so that the kill's baseline
        window (``baseline_period``, 90 s with the production timers) comes round in 5 s."""
        return cls(
            sizes=(20,),
            per_process=10,
            join_timeout=120.0,
            steady_window=5.0,
            detection_trials=1,
            mass_kill=3,
            change_window=2.0,
            options_set=(
                ("table_refresh_timeout", "5s"),
                ("i_am_alive_table_publish_timeout", "5s"),
                ("full_refresh_every", "1"),
            ),
        )


def overrides(config: Config) -> dict[str, str]:
    return {**OVERRIDES, "use_liveness_gossip": "true" if config.gossip else "false", **dict(config.options_set)}


def options(config: Config) -> SiloOptions:
    return local_options_with(overrides(config).items())


def set_arguments(config: Config) -> list[str]:
    return set_flags(overrides(config).items())


def hosts_for(silos: int, config: Config, cores: int | None = None) -> list[int]:
    """How many silos each host process holds: ``config.per_process`` each if set, else spread
    over at most ``PROCESSES_PER_CORE`` processes per core with at least ``MIN_PER_PROCESS`` each,
    and more processes if that would put over ``MAX_PER_PROCESS`` silos in one."""
    if config.per_process is not None:
        per_process = config.per_process
    else:
        processes = max(1, min(PROCESSES_PER_CORE * (cores or os.cpu_count() or 1), silos // MIN_PER_PROCESS))
        per_process = min(math.ceil(silos / processes), MAX_PER_PROCESS)
    counts = []
    remaining = silos
    while remaining > 0:
        counts.append(min(per_process, remaining))
        remaining -= counts[-1]
    return counts


def connections_needed(processes: int, cores: int | None = None) -> int:
    """PostgreSQL connections ``processes`` silo processes (hosts and victims) and the benchmark may
    hold at once, at least the server's default of 200.

    A process runs every table call in its event loop's default executor (``asyncio.to_thread``:
    ``min(32, cores + 4)`` threads) on one pool of ``pool_size + max_overflow`` connections, so it
    holds at most the smaller of the two: 6 on two cores, and 40 host processes of 2,000 silos
    with 10 victims need 300, where PostgreSQL's 200 refused logins.
    """
    sql = SqlOptions()
    threads = min(32, (cores or os.cpu_count() or 1) + 4)
    return max(200, processes * min(threads, sql.pool_size + sql.max_overflow) + BENCHMARK_CONNECTIONS)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def join_pace(index: int, hosts: int, config: Config) -> list[str]:
    """``benchmarks.silo_host``'s flags for host ``index`` of ``hosts`` at ``config.join_rate``: its
    silo ``j`` joins ``(index + j * hosts) / rate`` seconds after the start (none: all at once)."""
    if config.join_rate is None:
        return []
    return ["--join-offset", f"{index / config.join_rate:g}", "--join-spacing", f"{hosts / config.join_rate:g}"]


def start_hosts(uri: str, silos: int, config: Config, root: Path, start_when: Path) -> list[ServerProcess]:
    """The host processes of ``silos`` silos; they bind their servers and wait for ``start_when`` to exist."""
    hosts = []
    counts = hosts_for(silos, config)
    for index, count in enumerate(counts):
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
            "--start-when",
            str(start_when),
        ]
        log = root / f"host-{index}.log"
        argv += [*join_pace(index, len(counts), config), "--crash-file", str(crash_file(log))]
        env = {"PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"}
        hosts.append(ServerProcess([*argv, *set_arguments(config)], log, env=env))
    return hosts


FENCED = b" is fenced: "
"""What a silo logs (WARNING) when its membership lease ran out (``silo.runtime.serving``)."""


def fence_warnings(hosts: Sequence[ServerProcess]) -> int:
    """Times the hosted silos fenced themselves so far (their lease ran out: the table did not
    confirm them Active within ``lease_timeout``), from the hosts' logs."""
    return sum(host.log.read_bytes().count(FENCED) for host in hosts if host.log.exists())


def join_costs(counts: Callable[[], Counts], join_from: Counts, hosts: Sequence[ServerProcess]) -> dict[str, Any]:
    """What the join cost until now (all Active, or the join stopped): the silos' statements since
    ``join_from`` (full reads among them) and the fencings, which say what held a slow join back."""
    statements = difference(counts(), join_from)
    fenced = fence_warnings(hosts)
    print(f"[scale] join: {statements['full_reads']} full reads, {statements['changes_reads']} reads of changes, "
          f"{statements['all_reads']} reads, "
          f"{statements['version_writes']} versioned writes, {fenced} fencings", flush=True)  # fmt: skip
    return {"join_statements": statements, "fenced_joining": fenced}


GAVE_UP = re.compile(rb"silo (\S+) failed to start: ")
"""What a silo logs (ERROR) when it stops without joining (``max_join_attempt_time`` ran out)."""


def gave_up(logs: Sequence[Path]) -> set[str]:
    """The silos that stopped without joining, from their processes' logs: their rows are left
    Joining with a heartbeat that stands still, and the cluster rightly declares them Dead."""
    return {match.decode() for log in logs if log.exists() for match in GAVE_UP.findall(log.read_bytes())}


def leave_out_gave_up(measured: dict[str, Any], stopped: set[str]) -> None:
    """Take the silos that gave up joining out of the false deaths, once more at the end: a joiner
    writes its Dead row before its lagging loop gets to the log line that says it gave up, so
    the check at the end of a phase missed the ones that gave up just before (81 of 81 once)."""
    for phase, dead in measured["declared_dead"].items():
        measured["declared_dead"][phase] = [silo for silo in dead if silo not in stopped]
        measured[f"false_deaths_{phase}"] = len(measured["declared_dead"][phase])
    measured["gave_up_joining"] = len(stopped)


def dead_silos(data: MembershipTableData, stopped: Collection[str] = ()) -> list[str]:
    """The silos the cluster declared Dead (a Dead row with votes in it: the voter that completes
    the quorum writes its vote with the death) but those in ``stopped`` (``gave_up``): every other
    silo is live until the benchmark kills it, so each is a false death. A Dead row without votes
    was written by its own silo, a joiner giving up (whose log line may come tens of seconds
    after its row on a lagging host: 10 of them were counted as false deaths once)."""
    return sorted(
        address
        for entry in data.entries
        if entry.status is SiloStatus.DEAD
        and entry.suspect_times
        and (address := str(entry.silo_address)) not in stopped
    )


class JoinDidNotFinishError(RuntimeError):
    """The join stopped (timeout, overload, a host exited); ``curve`` is how far it got, ``limit``
    what held it there (``stall_limit``)."""

    def __init__(
        self,
        message: str,
        curve: list[tuple[float, int, int, int]],
        limit: dict[str, float] | None = None,
        *,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.curve = curve
        self.limit = limit or {}
        self.timed_out = timed_out
        """The join ran out of time with every host up and the machine not overloaded: the cluster
        as it stands can still be watched and its victims killed (``one_size`` goes on)."""

    def stopped(self) -> dict[str, float]:
        """Where the join stopped, as figures: seconds, Active, Joining and Dead silos, and ``limit``."""
        if not self.curve:
            return {}
        seconds, active, joining, dead = self.curve[-1]
        return {"after_s": seconds, "active": active, "joining": joining, "dead": dead, **self.limit}


START_TIMEOUT = 300.0
"""Seconds the hosts may take to bind their servers: process start-up, not the join
``join_timeout`` times."""

STALL_WINDOW = 60.0
"""Seconds before a join stopped over which ``stall_limit`` measures the silo hosts' CPU."""


def stall_limit(curve: list[tuple[float, int, int, int]], host_cpu: list[tuple[float, float]]) -> dict[str, float]:
    """What held a join that did not finish where it stopped: how long the Active count had stood
    still, and the cores the silo hosts used over the last ``STALL_WINDOW`` seconds (``host_cpu``:
    seconds since the start and the hosts' CPU seconds so far), against the machine's cores. Hosts
    that use every core while nothing moves are the limit: the silos already Active cost what
    the machine has, their loops lag past the probe timeout, and the last joiners' pings go
    unanswered."""
    if not curve or len(host_cpu) < 2:
        return {}
    end = curve[-1][0]
    moved = curve[0][0]  # when the Active count last changed (to its final value)
    for (_, before, *_), (t, count, *_) in itertools.pairwise(curve):
        if count != before:
            moved = t
    start = next((sample for sample in host_cpu if sample[0] >= end - STALL_WINDOW), host_cpu[0])
    last = host_cpu[-1]
    busy = (last[1] - start[1]) / (last[0] - start[0]) if last[0] > start[0] else math.nan
    return {"active_unchanged_s": end - moved, "host_cores_busy": busy, "cores": float(os.cpu_count() or 1)}


def wait_listening(hosts: list[ServerProcess], timeout: float) -> None:
    """Until every host printed ``listening N`` (its servers bound, its silos about to join)."""
    waiting = list(hosts)
    deadline = wall() + timeout
    while waiting:
        waiting = [host for host in waiting if b"listening " not in host.log.read_bytes()]
        exited = [host for host in waiting if not host.running]
        if exited:
            raise JoinDidNotFinishError(f"a host exited before listening (see {exited[0].log})", [])
        if wall() > deadline:
            raise JoinDidNotFinishError(f"{len(waiting)} hosts not listening after {timeout:g}s", [])
        time.sleep(0.05)


def wait_all_active(
    uri: str, silos: int, config: Config, started: float, hosts: list[ServerProcess]
) -> list[tuple[float, int, int, int]]:
    """(seconds since start, Active, Joining, Dead silos) once a second until all are Active.

    Raises (saying how far the join got) on timeout, if a host exits, or if the machine is
    overloaded (``Config.max_load`` per core) after ``OVERLOAD_GRACE`` seconds: a size that does not fit is
    recorded as such instead of starving everything else on the machine for minutes.
    """
    table = open_table(uri, "scale")
    curve: list[tuple[float, int, int, int]] = []
    host_cpu: list[tuple[float, float]] = []
    statuses: Counter[str] = Counter()
    while True:
        elapsed = wall() - started
        host_cpu.append((elapsed, sum(cpu_seconds(host.process.pid) for host in hosts)))
        with contextlib.suppress(TableUnavailableError):
            statuses = Counter(entry.status.name for entry in table.read_all().entries)
        curve.append((elapsed, statuses["ACTIVE"], statuses["JOINING"], statuses["DEAD"]))
        progress = f"{dict(statuses)} of {silos} silos after {elapsed:.0f}s"
        if elapsed > config.join_timeout:  # first: a join that took longer did not finish in time
            raise JoinDidNotFinishError(
                f"not all Active in time: {progress}", curve, stall_limit(curve, host_cpu), timed_out=True
            )
        if statuses["ACTIVE"] >= silos:
            return curve
        load = os.getloadavg()[0]
        if elapsed > OVERLOAD_GRACE and load > config.max_load * (os.cpu_count() or 1):
            raise JoinDidNotFinishError(
                f"stopped: load average {load:.0f} on {os.cpu_count()} cores with {progress}",
                curve,
                stall_limit(curve, host_cpu),
            )
        exited = [host for host in hosts if not host.running]
        if exited:
            tail = "\n".join(exited[0].log.read_text(errors="replace").splitlines()[-40:])
            raise JoinDidNotFinishError(
                f"a silo host exited during the join ({progress}); its log ends:\n{tail}", curve
            )
        time.sleep(1.0)


def watch_steady(uri: str, config: Config, hosts: list[ServerProcess]) -> list[tuple[float, int, float]]:
    """(seconds into the window, Dead rows, load average) every 5 s for ``steady_window`` seconds."""
    table = open_table(uri, "scale")
    samples: list[tuple[float, int, float]] = []
    began = wall()
    while (elapsed := wall() - began) < config.steady_window:
        with contextlib.suppress(TableUnavailableError):
            samples.append((elapsed, len(dead_silos(table.read_all())), os.getloadavg()[0]))
        exited = [host for host in hosts if not host.running]
        if exited:
            raise RuntimeError(f"a silo host exited in steady state after {elapsed:.0f}s (log {exited[0].log})")
        time.sleep(min(5.0, max(0.0, config.steady_window - elapsed)))
    return samples


SILOS_ROLE = "postgres"
"""The role the silos connect as (the test server's superuser); the benchmark reads as ``WATCH_ROLE``."""
WATCH_ROLE = "bench_watch"


@dataclass
class KillResults:
    """What the kill trials of one size measured (``detection_at_scale``)."""

    trials: list[KillTrial] = dataclasses.field(default_factory=list)
    caused: list[Counts] = dataclasses.field(default_factory=list)
    removals: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Per single kill, the versions its removal took (``write_log.removal``)."""
    mass: dict[str, Any] | None = None
    """The simultaneous kill of ``Config.mass_kill`` silos: its trial, removals and statements caused."""
    victims_active: int = 0
    """Victims Active when the trials began (fewer than started if some never finished joining)."""
    victims: str = "silo run processes, SIGKILLed"
    """What the trials killed (``detection_at_scale``)."""


HOSTED_VICTIMS = "hosted silos, crashed in process"


def kills_wanted(config: Config) -> int:
    """Silos the trials kill: one per single kill, and the ones killed at once."""
    return config.detection_trials + config.mass_kill


def victim_count(config: Config) -> int:
    """Silos run as their own ``silo run`` process, to be SIGKILLed (none with ``--victims hosted``)."""
    return kills_wanted(config) if config.victims == "processes" else 0


def victims_bench(uri: str, watch_uri: str, config: Config, root: Path) -> BenchCluster:
    """The victims' cluster handle: their processes, the kills and the table polls of a trial."""
    # The victims gossip even with --gossip off, so that their deaths reach every hosted silo at once.
    arguments = [*set_arguments(config), "--set", "use_liveness_gossip=true"]
    # the table alone is watched: polling the other victims' views would add their calls to the counts
    bench = BenchCluster(root, uri, "scale", arguments, watch_uri=watch_uri, watch_views=False)
    bench.bound = death_bound(options(config))  # the scale timings, not the local preset's the harness assumes
    bench.table_poll = TABLE_POLL
    return bench


def start_victims(bench: BenchCluster, config: Config) -> None:
    """Start the victims as the hosted silos start joining: 13 of the storm's joiners like any
    other (each pings the Active silos it samples; a Dead row of one before its kill is a false
    death). Started before the storm and Active first, every joiner pinged them, 13 processes with
    a share of the cores each: 1,101 of 2,000 joiners gave up on them after 600 s."""
    if count := victim_count(config):
        bench.cluster.start(count, *bench.extra_args)


VICTIMS_WAIT = 60.0
"""Seconds the kill trials wait for victims still joining (after the join and the steady window)."""


def active_victims(bench: BenchCluster) -> list[SiloProcess]:
    """The victims running and Active in the table, once every running one is (at most
    ``VICTIMS_WAIT`` s): the ones a kill trial may kill."""
    deadline = wall() + VICTIMS_WAIT
    while True:
        running = bench.running
        statuses = bench.cluster.statuses(running)
        active = [silo for silo, status in zip(running, statuses, strict=True) if status is SiloStatus.ACTIVE]
        if len(active) == len(running) or wall() > deadline:
            return active
        time.sleep(1.0)


def overloaded_death_bound(chosen: SiloOptions) -> float:
    """``death_bound`` when the monitors' local health is as poor as it gets (``MAX_SCORE``): each
    needs ``1 + MAX_SCORE`` times the silence before it suspects anyone. A cluster whose join
    stopped on a saturated machine is there; within the healthy bound its kills went unseen."""
    return death_bound(chosen) + MAX_SCORE * chosen.detection_time


async def detection_at_scale(
    bench: BenchCluster,
    config: Config,
    counts: Callable[[], Counts],
    logged: Callable[[float], list[write_log.LoggedWrite]],
    *,
    overloaded: bool = False,
    hosts: Sequence[ServerProcess] = (),
) -> KillResults:
    """Kill one victim at a time, ``detection_trials`` times; then ``mass_kill`` others all at
    once. For each kill, the table's view of the victims, the statements caused (``caused_by``)
    and the versions each removal took (from the ``logged`` writes since a time: ``write_log``).

    The victims are the ``silo run`` processes (``start_victims``), SIGKILLed, when all of them
    turned Active; else (a join that stopped on a saturated machine leaves them joining) Active
    silos of the ``hosts``, crashed in process (``benchmarks.hosted_crash``; ``victims`` in the
    JSON says which). ``overloaded`` (the join stopped): each kill is watched for
    ``overloaded_death_bound``."""
    if overloaded:
        bench.bound = overloaded_death_bound(options(config))
    rng = random.Random(config.seed)
    results = KillResults()
    processes = await asyncio.to_thread(active_victims, bench)
    results.victims_active = len(processes)
    victims: list[Victim] = [ProcessVictim(silo) for silo in processes]
    if len(processes) < kills_wanted(config) and hosts:
        table = await asyncio.to_thread(bench.cluster.read)
        active = [entry.silo_address for entry in table.entries if entry.status is SiloStatus.ACTIVE]
        victims = list(hosted_victims(hosts, active, kills_wanted(config), rng))
        results.victims = HOSTED_VICTIMS if config.victims == "hosted" else f"{HOSTED_VICTIMS} (processes not Active)"
    for victim in victims[: config.detection_trials]:
        await bench.at_a_random_instant_of_the_grid(rng)
        kill = functools.partial(kill_together, bench, [victim], bench.bound)
        mass, change, _ = await caused_by(kill, config.change_window, config, counts)
        (trial,) = mass.trials
        results.trials.append(trial)
        results.caused.append(change)
        writes = await asyncio.to_thread(logged, mass.killed_at)
        results.removals.append(write_log.removal(writes, trial.victim, mass.killed_at))
    left = victims[config.detection_trials :]
    if config.mass_kill and len(left) >= 2:
        results.mass = await mass_kill_at_scale(bench, left, config, counts, logged)
    return results


def mass_kill_window(config: Config) -> float:
    """Seconds counted after a simultaneous kill: ``change_window`` plus the ``settle_time`` a death
    amid correlated suspicions waits (several silos dying at once are such suspicions), at most
    ``baseline_period``."""
    return min(baseline_period(config), config.change_window + settle_time(options(config)))


async def mass_kill_at_scale(
    bench: BenchCluster,
    victims: Sequence[Victim],
    config: Config,
    counts: Callable[[], Counts],
    logged: Callable[[float], list[write_log.LoggedWrite]],
) -> dict[str, Any]:
    """Kill ``victims`` all at once: time to each Dead row and to the last, the statements
    caused, and the versions (each removal's, and whether several Dead rows shared one)."""
    chosen = options(config)
    bound = bench.bound + settle_time(chosen)
    window = mass_kill_window(config)
    trial, change, _ = await caused_by(functools.partial(kill_together, bench, victims, bound), window, config, counts)
    writes = await asyncio.to_thread(logged, trial.killed_at)
    return {
        **trial.to_json(),
        "removals": write_log.removals(writes, [t.victim for t in trial.trials], trial.killed_at),
        "caused": change,
        "change_window_s": window,
    }


def baseline_period(config: Config) -> float:
    """The period of the silos' own statements: their refresh, full-read and heartbeat timers repeat
    every this many seconds, so a window of it has the same background load as the same window one
    period later.

    The full reads count: this window was once the refresh and heartbeat period alone (30 s),
    while each silo reads in full every third refresh (90 s). Silos that joined in the same few
    seconds of a storm share a phase of that cycle, so two windows 30 s apart held hundreds of
    periodic full reads more or fewer: a 1,000-silo run counted 171, 323 and -12 full reads as
    "caused" by three deaths, while all reads (periodic version reads included) moved by 1, 20, 63.
    """
    chosen = options(config)
    periods = (chosen.table_refresh_timeout, chosen.full_refresh_interval, chosen.i_am_alive_table_publish_timeout)
    return math.lcm(*(round(1000 * period) for period in periods)) / 1000


async def caused_by(
    kill: Callable[[], Awaitable[T]], window: float, config: Config, counts: Callable[[], Counts]
) -> tuple[T, Counts, float]:
    """Run ``kill``: its result, the statements of the ``window`` s from the kill minus those of the
    same window one ``baseline_period`` earlier, and the kill's time (Unix seconds).

    Both windows have the same length, and the same phase of every silo's periodic timers: at
    1,000 silos the background is ~65 reads a second, so a baseline taken just before the kill
    (another phase) or an after-window stretched to the detection time (the runs before 26
    November took it once the Dead row was seen, 14-20 s after the kill, against a 10 s baseline)
    counted hundreds of periodic reads as caused by the death.
    """
    quiet_from, started = await asyncio.to_thread(counts), wall()
    await asyncio.sleep(window)
    quiet = difference(await asyncio.to_thread(counts), quiet_from)
    await asyncio.sleep(max(0.0, started + baseline_period(config) - wall()))
    before, killed_at = await asyncio.to_thread(counts), wall()

    async def at_window_end() -> Counts:
        await asyncio.sleep(max(0.0, killed_at + window - wall()))
        return await asyncio.to_thread(counts)

    after = asyncio.ensure_future(at_window_end())
    result = await kill()
    change = difference(await after, before)
    return result, {key: change[key] - quiet[key] for key in change}, killed_at


INTERRUPTED = "interrupted (SIGINT or SIGTERM) before this size finished"


def measure(config: Config) -> dict[str, Any]:
    """Every size (``run``); an interrupt (Ctrl-C, or SIGTERM: ``run_benchmark``) stops the run but
    keeps what it measured: the sizes finished, and the one under way as far as it got."""
    results = {"floor_s": options(config).detection_time, "gossip": config.gossip, "sizes": {}}
    with workdir(NAME) as root:
        try:
            asyncio.run(run(config, root, results))
        except KeyboardInterrupt:
            print(f"[scale] {INTERRUPTED}: writing what was measured", flush=True)
    return results


async def run(config: Config, root: Path, results: dict[str, Any]) -> None:
    """Each size in turn into ``results["sizes"]``, filled as it goes: an interrupted run keeps what it measured."""
    for silos in config.sizes:
        print(f"[scale] {silos} silos, gossip {'on' if config.gossip else 'off'}", flush=True)
        measured = results["sizes"][str(silos)] = {"silos": silos, "error": INTERRUPTED}
        try:
            await one_size(silos, config, root / str(silos), measured)
            del measured["error"]
        except (RuntimeError, AssertionError) as exc:  # this size did not fit: say so, try no larger one
            measured["error"] = str(exc)[:3000]
            print(f"[scale] {silos} silos failed: {str(exc)[:300]}", flush=True)
            break


async def join_phase(
    watch_uri: str, silos: int, config: Config, started: float, hosts: list[ServerProcess], measured: dict[str, Any]
) -> None:
    """Wait until all ``silos`` are Active (``all_active_s``, the curve, the load then). A join that
    runs out of time is recorded (``join_stopped``: where, and what limits it) and the size goes
    on; one stopped by an overloaded machine or a host that exited ends the size."""
    try:
        curve = await asyncio.to_thread(wait_all_active, watch_uri, silos, config, started, hosts)
    except JoinDidNotFinishError as exc:
        measured["join_curve"] = exc.curve
        if exc.curve:
            measured["join_stopped"] = exc.stopped()
        if exc.limit:
            active = exc.curve[-1][1]
            print(
                f"[scale] what limits it: {active} Active unchanged for {exc.limit['active_unchanged_s']:.0f}s "
                f"while the silo hosts used {exc.limit['host_cores_busy']:.2f} of the "
                f"{exc.limit['cores']:.0f} cores (last {STALL_WINDOW:.0f}s)",
                flush=True,
            )
        if not exc.timed_out:
            raise
        print(f"[scale] {exc}; the steady window and the kills go on with the cluster as it stands", flush=True)
        return
    measured.update(load_average_all_active=os.getloadavg(), all_active_s=curve[-1][0], join_curve=curve)
    print(f"[scale] {silos} silos Active after {curve[-1][0]:.1f}s", flush=True)


async def one_size(silos: int, config: Config, root: Path, measured: dict[str, Any]) -> None:
    """The victims, then the hosted silos' join, a steady window and the kill trials at ``silos``
    (victims included), into ``measured`` as each phase ends (a size stopped part-way keeps the
    phases done). A join that runs out of time goes on to the window and the kills with the
    cluster as it stands: ``join_stopped`` says where it stopped and what limits it."""
    root.mkdir(parents=True)
    victims = victim_count(config)
    if silos <= victims:
        raise RuntimeError(f"{silos} silos leave none to host besides the {victims} victims")
    processes = len(hosts_for(silos - victims, config)) + victims
    with services.postgres(stats=True, max_connections=connections_needed(processes)) as server:
        database = services.unique("scale")
        uri = server.create_database(database)
        with server.connect(database) as connection:
            connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        table = open_table(uri, "scale")
        table.initialize()
        watch_uri = server.create_login_role(database, WATCH_ROLE, "watching")
        server.run_as_admin(database, [f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {WATCH_ROLE}"])
        table = open_table(watch_uri, "scale")

        def counts() -> Counts:
            return statement_counts(server, database, SILOS_ROLE)

        bench = victims_bench(uri, watch_uri, config, root)
        hosts: list[ServerProcess] = []

        def process_logs() -> list[Path]:
            return [host.log for host in hosts] + [silo.log for silo in bench.cluster.silos]

        try:
            spawned = wall()
            go = root / f"go-{silos}"
            hosts = start_hosts(uri, silos - victims, config, root, go)
            measured["processes"] = len(hosts) + victims
            await asyncio.to_thread(wait_listening, hosts, START_TIMEOUT)
            started = wall()
            measured["hosts_ready_s"] = started - spawned  # process start-up, before the clock of the join
            join_from = counts()
            go.touch()
            await asyncio.to_thread(start_victims, bench, config)
            try:
                await join_phase(watch_uri, silos, config, started, hosts, measured)
            finally:
                measured.update(join_costs(counts, join_from, hosts))
            dead_joining = dead_silos(table.read_all(), gave_up(process_logs()))
            measured.update(false_deaths_joining=len(dead_joining), declared_dead={"joining": dead_joining})
            before = counts()
            cpu_before = [cpu_seconds(host.process.pid) for host in hosts]
            steady = await asyncio.to_thread(watch_steady, watch_uri, config, hosts)
            after = counts()
            cpu = sum(cpu_seconds(host.process.pid) for host in hosts) - sum(cpu_before)
            per_second = {key: (after[key] - before[key]) / config.steady_window for key in after}
            host_rss = [rss_mb(host.process.pid) for host in hosts]
            end_of_window = table.read_all()
            stopped = gave_up(process_logs())
            dead_steady = sorted(set(dead_silos(end_of_window, stopped)) - set(dead_joining))
            measured["declared_dead"]["steady"] = dead_steady
            measured.update(
                gave_up_joining=len(stopped),
                fenced_steady=fence_warnings(hosts) - measured["fenced_joining"],
                false_deaths_steady=len(dead_steady),
                joining_after_steady=sum(1 for entry in end_of_window.entries if entry.status is SiloStatus.JOINING),
                steady_window_s=config.steady_window,
                steady_samples=steady,
                steady_ops_per_s=per_second,
                steady_ops_per_s_per_silo={key: value / silos for key, value in per_second.items()},
                cpu_percent_per_silo=100 * cpu / config.steady_window / (silos - victims),
                rss_mb_per_process=host_rss,
                rss_mb_per_silo=sum(host_rss) / (silos - victims),
            )
            print(f"[scale] {silos} silos: {len(dead_steady)} declared Dead in {config.steady_window:.0f}s steady",
                  flush=True)  # fmt: skip
            with server.connect(database) as connection:
                write_log.install(connection)  # only now: the join and steady figures are measured without it

            def logged(since: float) -> list[write_log.LoggedWrite]:
                with server.connect(database) as connection:
                    return write_log.writes_since(connection, since)

            overloaded = "join_stopped" in measured
            kills = await detection_at_scale(bench, config, counts, logged, overloaded=overloaded, hosts=hosts)
        finally:
            if "declared_dead" in measured:
                leave_out_gave_up(measured, gave_up(process_logs()))
            for host in hosts:  # SIGKILL: a graceful leave of hundreds of silos is not measured, only slow
                host.signal(signal.SIGKILL)
                host.stop()
            await bench.close()
    floor = options(config).detection_time
    dead = summarize([t.table_dead for t in kills.trials if t.table_dead is not None])
    measured.update(
        detection_table_dead=dead,
        detection_ratio_to_floor={"median": ratio(dead["median"], floor), "p99": ratio(dead["p99"], floor)},
        victims_active=kills.victims_active,
        victims=kills.victims,
        detection_trials=[t.to_json() for t in kills.trials],
        removals=kills.removals,
        versions_per_removal=[removal["versions"] for removal in kills.removals],
        caused_per_death=kills.caused,
        reads_per_change=summarize(reads_per_change(kills.caused)),
        change_window_s=config.change_window,
        mass_kill=kills.mass,
    )


def report(results: dict[str, Any]) -> None:
    """One row per size; a size that stopped part-way shows what it measured before (``-`` for the rest)."""
    rows: list[list[object]] = []
    for size, entry in results["sizes"].items():
        caused = entry.get("caused_per_death", []) if caused_counted(entry) else []
        reads_caused = statistics.fmean(c["all_reads"] for c in caused) if caused else math.nan
        writes_caused = statistics.fmean(c["version_writes"] for c in caused) if caused else math.nan
        ops = entry.get("steady_ops_per_s", {})
        figures = [
            entry.get("processes"),
            join_figure(entry),
            entry.get("false_deaths_joining"), entry.get("false_deaths_steady"), entry.get("rss_mb_per_silo"),
            entry.get("cpu_percent_per_silo"), ops.get("full_reads"), ops.get("all_reads"),
            ops.get("version_writes"), ops.get("heartbeats"), ops.get("statements"),
            entry.get("detection_table_dead", {}).get("median"),
            entry.get("detection_ratio_to_floor", {}).get("median"),
            caused_figure(reads_caused) if caused else None, caused_figure(writes_caused) if caused else None,
        ]  # fmt: skip
        rows.append([size, *("-" if figure is None else figure for figure in figures)])
    gossip = "on" if results["gossip"] else "off"
    print_table(
        f"Silos on one PostgreSQL table, gossip {gossip} (floor {results['floor_s']}s)",
        ["silos", "processes", "all Active s", "Dead joining", "Dead steady", "MB/silo", "CPU %/silo",
         "full reads/s", "reads/s", "writes/s", "heartbeats/s", "statements/s", "Dead median s", "median/floor",
         "reads caused per death", "writes caused per death"],
        rows,
    )  # fmt: skip
    report_removals(results)
    for size, entry in results["sizes"].items():
        if line := join_stopped_line(size, entry):
            print(line)
        if "error" in entry:
            print(f"{size} silos stopped: {entry['error'][:300]}")


def report_removals(results: dict[str, Any]) -> None:
    """The versions each removal took: per single kill, and for the silos killed at once (if measured)."""
    if rows := removal_rows(results):
        print_table("Versions per removal (a kill to the victim's Dead row: votes and the Dead write)",
                    REMOVAL_HEADERS, rows)  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = ["full_reads", "all_reads", "version_writes", "heartbeats", "statements"]
    done = {size: entry for size, entry in results["sizes"].items() if "steady_ops_per_s" in entry}
    curves = {size: entry for size, entry in results["sizes"].items() if entry.get("join_curve")}
    for size, entry in curves.items():
        times = [point[0] for point in entry["join_curve"]]
        active = [point[1] for point in entry["join_curve"]]
        stopped = "error" in entry or "join_stopped" in entry
        label = f"{size} silos" + (" (stopped)" if stopped else "")
        axes[0].plot(times, active, marker=".", linestyle=":" if stopped else "-", label=label)
        axes[0].axhline(entry["silos"], color="grey", linestyle="--", linewidth=0.8)
    axes[0].set_xlabel("seconds after all silo processes were started")
    axes[0].set_ylabel("Active silos in the table")
    axes[0].set_title(f"silos joining at once (gossip {'on' if results['gossip'] else 'off'})")
    if curves:
        axes[0].legend(fontsize=7)
    if done:  # else every size failed: no steady state to show
        grouped_bars(
            axes[1],
            names,
            {f"{size} silos": [entry["steady_ops_per_s"][name] for name in names] for size, entry in done.items()},
            "per second, steady state",
        )
    axes[1].set_title("store load (pg_stat_statements)")
    save_figure(figure, path)


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus ``--sizes``, ``--gossip``, ``--steady`` and ``--per-process``, over the preset."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--sizes", default=None)
    extra.add_argument("--gossip", default=None)
    extra.add_argument("--steady", default=None)
    extra.add_argument("--per-process", default=None)
    extra.add_argument("--max-load", default=None)
    extra.add_argument("--mass-kill", default=None)
    extra.add_argument("--join-rate", default=None)
    extra.add_argument("--join-timeout", default=None)
    extra.add_argument("--victims", default=None)
    add_set_flag(extra, "options_set")
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    changes: dict[str, Any] = {}
    if known.sizes is not None:
        changes["sizes"] = sizes_list(known.sizes)
    if known.gossip is not None:
        if known.gossip not in ("on", "off"):
            raise SystemExit(f"--gossip must be on or off, got {known.gossip!r}")
        changes["gossip"] = known.gossip == "on"
    if known.steady is not None:
        changes["steady_window"] = positive(known.steady, "--steady", float)
    if known.per_process is not None:
        changes["per_process"] = positive(known.per_process, "--per-process")
    if known.max_load is not None:
        changes["max_load"] = positive(known.max_load, "--max-load", float)
    if known.mass_kill is not None:
        changes["mass_kill"] = positive(known.mass_kill, "--mass-kill", least=0)
    if known.join_rate is not None:
        changes["join_rate"] = positive(known.join_rate, "--join-rate", float)
    if known.victims is not None:
        if known.victims not in ("processes", "hosted"):
            raise SystemExit(f"--victims must be processes or hosted, got {known.victims!r}")
        changes["victims"] = known.victims
    if known.join_timeout is not None:
        changes["join_timeout"] = positive(known.join_timeout, "--join-timeout", float, least=0)
    if known.options_set:
        if any(name == "use_liveness_gossip" for name, _ in known.options_set):
            raise SystemExit("--set: use --gossip on|off to choose gossip, not use_liveness_gossip")
        changes["options_set"] = tuple(known.options_set)
    chosen = dataclasses.replace(config, **changes)
    options(chosen)  # a bad --set stops here, not in the silo hosts
    if chosen.change_window > baseline_period(chosen):
        raise SystemExit(
            f"--set: the silos' refresh, full-read and heartbeat period ({baseline_period(chosen):g}s) must be at "
            f"least the {chosen.change_window:g}s counted after each kill (the baseline is the same window one "
            "period earlier): raise table_refresh_timeout, full_refresh_every or i_am_alive_table_publish_timeout"
        )
    return settings, chosen


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)

    arguments = list(argv if argv is not None else sys.argv[1:])  # the recorded command omits the extra flags
    extra = {"overrides": overrides(config), "options": asdict(options(config)), "arguments": arguments}
    return run_benchmark(NAME, settings, config, lambda: measure(config), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
