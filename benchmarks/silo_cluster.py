"""Clusters of real ``silo run`` processes for the benchmarks, and what each silo sees.

``BenchCluster`` wraps the test suite's ``Cluster`` (testbed/cluster_harness.py): it
starts silos with the local preset, kills one with SIGKILL (``kill_one``) or hangs one with
SIGSTOP (``freeze_one``) and measures, in wall-clock time, (a) when the table says Dead and
(b) when each survivor's own view (its ``GetMembership`` RPC, polled) no longer counts the
victim. The Dead write's time is the killer's vote time in the row (the voter stamps it just
before its conditional write), so it does not depend on how often the benchmark polls the
table. With ``watch_takeover`` it also times (c) the **takeover**: when some of the victim's
keys are served by their new owner (``TakeoverPlan``; docs/protocol.md, "Takeover after fencing").
``idle_cost`` reads each silo's CPU time from ``/proc`` while nobody touches the cluster.

``partition_trial`` does the same for network partitions: silos in network namespaces
(testbed/net_cluster.py), one side cut off with iptables, and the time until every
cut-off silo is Dead in the table and has exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from benchmarks.common import wall
from membership_tables import (
    MembershipEntry,
    MembershipTableData,
    MembershipTableError,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
)
from silo.cli.dev_ca import init_ca, issue
from silo.events import EventKind
from silo.exit_codes import ExitCode
from silo.membership.options import SiloOptions
from silo.wire import codec
from silo.wire.peer_identity import Role
from silo.wire.prober import GrpcProber
from silo.wire.tls import TlsSettings
from silo.work.client import WorkClient, WorkNotOwnedError, WorkUnavailableError
from silo.work.handlers import ECHO_HANDLER
from silo.work.hashring import DEFAULT_VIRTUAL_NODES, HashRing
from testbed.cluster_harness import SLACK, Cluster, SiloProcess, death_bound

POLL = 0.1
"""Seconds between polls of the views and the table (the resolution of the view times)."""
RPC_TIMEOUT = 1.0
JOIN_TIMEOUT = 120.0
LOG_POLL = 0.5
"""Seconds between reads of the survivors' logs (``views_from_logs``): their times are the silos' own."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TAKEOVER_KEYS = 8
"""Keys of the victim whose takeover a trial watches."""
TAKEOVER_POLL = 0.015
"""Seconds between the new owner's refusal of those keys and the next try (the takeover time's resolution)."""
WORK_TIMEOUT = 0.5


def silo_certificates(root: Path, clusters: Sequence[str]) -> list[TlsSettings]:
    """A development CA under ``root`` and one silo certificate for each of ``clusters``, in order."""
    directory = root / "certs"
    ca = init_ca(directory)
    settings = []
    for cluster in clusters:
        issued = issue(directory, cluster=cluster, name=cluster, roles=(Role.SILO,))
        settings.append(TlsSettings(issued.cert, issued.key, ca))
    return settings


# --- what a process costs ------------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, all threads (``/proc/<pid>/stat``); None if gone.

    Why /proc and not ``resource``: the silos are other processes, not our children's totals.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may contain spaces: split after it
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5): utime, stime


def tcp_segments(pid: int) -> tuple[int, int] | None:
    """(InSegs, OutSegs) of the network namespace ``pid`` runs in (``/proc/<pid>/net/snmp``); None if gone.

    Only meaningful for a process alone in its namespace (a lab host): then it counts exactly
    that process's TCP traffic.
    """
    try:
        lines = [line.split() for line in Path(f"/proc/{pid}/net/snmp").read_text().splitlines()]
    except OSError:
        return None
    header, values = [line for line in lines if line and line[0] == "Tcp:"][:2]
    counters = dict(zip(header[1:], values[1:], strict=True))
    return int(counters["InSegs"]), int(counters["OutSegs"])


def pings_per_second(options: SiloOptions, size: int) -> float:
    """Pings each silo of an idle, healthy cluster of ``size`` sends per second, from the options.

    Computed, not counted: a silo probes its successor on each of ``num_probed_silos`` rings
    (so ``min(size - 1, num_probed_silos)`` targets) once per ``effective_probe_interval``;
    with nobody suspected there are no extra targets and no indirect probes. By symmetry it
    also answers as many as it sends, on average.
    """
    return min(size - 1, options.num_probed_silos) / options.effective_probe_interval


async def idle_cpu(pids: Sequence[int], seconds: float) -> list[float]:
    """CPU seconds per minute each of ``pids`` used over ``seconds`` of wall time (those that lived through it)."""
    before = {pid: cpu_seconds(pid) for pid in pids}
    started = wall()
    await asyncio.sleep(seconds)
    elapsed = wall() - started
    after = {pid: cpu_seconds(pid) for pid in pids}
    return [
        (end - start) * 60.0 / elapsed
        for pid in pids
        if (start := before[pid]) is not None and (end := after[pid]) is not None
    ]


# --- kills and freezes on loopback -------------------------------------------------------------


@dataclass
class KillTrial:
    """One SIGKILL (or SIGSTOP) and what followed, in seconds after the signal (None = not within the bound)."""

    victim: str
    survivors: int
    signal: str = "SIGKILL"
    table_dead: float | None = None
    """Signal to the Dead write (the killer's vote time)."""
    table_dead_seen: float | None = None
    """Signal to the benchmark's table poll first returning Dead."""
    dead_version: int | None = None
    views: dict[str, float] = field(default_factory=dict)
    """Signal to each survivor's view excluding the victim."""
    view_versions: dict[str, int] = field(default_factory=dict)
    killed_after: float | None = None
    """For a SIGSTOP: seconds until the frozen process was SIGKILLed (once the watch ended)."""
    takeover: float | None = None
    """Signal to the first answer of the victim's new owner serving the watched keys (``TakeoverPlan``)."""
    takeover_owner: str | None = None
    """The new owner whose takeover was watched (None: not watched)."""
    takeover_refusal: str | None = None
    """The new owner's last refusal of those keys (before it served them, or before the bound)."""

    def shift(self, seconds: float) -> None:
        """Count the table figures from ``seconds`` after the signal (when the victim really stopped)."""
        if self.table_dead is not None:
            self.table_dead -= seconds
        if self.table_dead_seen is not None:
            self.table_dead_seen -= seconds

    @property
    def dead_to_takeover(self) -> float | None:
        """Dead write to the takeover (negative: a key served before its owner was declared Dead, a bug)."""
        if self.takeover is None or self.table_dead is None:
            return None
        return self.takeover - self.table_dead

    @property
    def last_view(self) -> float | None:
        if not self.views or len(self.views) < self.survivors:
            return None
        return max(self.views.values())

    @property
    def propagation(self) -> float | None:
        """Dead write to the last survivor's view."""
        if self.last_view is None or self.table_dead is None:
            return None
        return self.last_view - self.table_dead

    def to_json(self) -> dict[str, object]:
        return {
            "victim": self.victim,
            "signal": self.signal,
            "survivors": self.survivors,
            "table_dead_s": self.table_dead,
            "table_dead_polled_s": self.table_dead_seen,
            "last_view_s": self.last_view,
            "propagation_s": self.propagation,
            "dead_version": self.dead_version,
            "views_s": sorted(self.views.values()),
            "killed_after_s": self.killed_after,
            "takeover_s": self.takeover,
            "dead_to_takeover_s": self.dead_to_takeover,
            "takeover_owner": self.takeover_owner,
            "takeover_refusal": self.takeover_refusal,
        }


@dataclass(frozen=True)
class TakeoverPlan:
    """Keys the victim owns on the ring of the running silos (the silos' own ring) that all go to
    one silo, ``owner``, on the ring without it: the batch it is asked to serve after the signal.

    One new owner, one batch: a trial's polling costs one small call per ``TAKEOVER_POLL``, so it
    does not load the silos whose detection the same trial times. (The victim's other new owners
    learn of the death by the same gossip, a few milliseconds apart.)"""

    victim: SiloAddress
    owner: SiloAddress
    items: list[tuple[str, bytes]]

    @classmethod
    def of(cls, silos: Iterable[SiloAddress], victim: SiloAddress, count: int = TAKEOVER_KEYS) -> TakeoverPlan:
        """The first ``count`` of ``key-0``, ``key-1``, ... that ``victim`` owns and that go to the
        new owner of the first of them."""
        addresses = set(silos) | {victim}
        ring = HashRing(addresses, DEFAULT_VIRTUAL_NODES)
        after = HashRing(addresses - {victim}, DEFAULT_VIRTUAL_NODES)
        if len(after) == 0:
            raise ValueError(f"{victim} is the only silo: nobody takes its keys over")
        owned = (key for key in (f"key-{index}" for index in itertools.count()) if ring.owner(key) == victim)
        first = next(owned)
        owner = after.owner(first)
        keys = [first, *itertools.islice((key for key in owned if after.owner(key) == owner), count - 1)]
        return cls(victim, owner, [(key, key.encode()) for key in keys])


LEAVING_EVENTS = (EventKind.DECLARED_DEAD.value, EventKind.LEFT.value)


def victim_death_logged(lines: Iterable[str], victim: SiloAddress) -> tuple[float, float] | None:
    """From a silo's JSON log lines (``--log-format json``): when it saw ``victim`` leave its view
    (the ``observed_at`` of its DECLARED_DEAD or LEFT event) and the event's ``at`` (for a death,
    the last vote's time), both as Unix seconds; None if no such line is among ``lines``.

    The silo stamps ``observed_at`` when its view took the change in, so reading the log after
    the fact gives the silo's own time without the benchmark adding any load during the wave:
    19 view streams at N = 20 were 19 more messages for the silos to send, and decoding them
    about 10 ms of the benchmark's CPU, in the very window measured on the same two cores."""
    wanted = str(victim)
    for line in lines:
        if wanted not in line:
            continue
        try:
            event = json.loads(line).get("event")
        except ValueError:
            continue  # a partial last line, or a line some library printed
        if isinstance(event, dict) and event.get("silo") == wanted and event.get("kind") in LEAVING_EVENTS:
            observed_at, at = datetime.fromisoformat(event["observed_at"]), datetime.fromisoformat(event["at"])
            return observed_at.timestamp(), at.timestamp()
    return None


def excludes(data: MembershipTableData, victim: SiloAddress) -> bool:
    row = data.get(victim)
    return row is None or row[0].status is SiloStatus.DEAD


def record_dead(trial: KillTrial, data: MembershipTableData, victim: SiloAddress, killed_at: float) -> bool:
    """If ``data`` shows ``victim`` Dead, fill ``trial``'s table figures (the Dead write's time is
    its last vote's) and say so."""
    row = data.get(victim)
    if row is None or row[0].status is not SiloStatus.DEAD:
        return False
    trial.table_dead_seen = wall() - killed_at
    trial.dead_version = data.version.version
    votes = [when.timestamp() for _, when in row[0].suspect_times]
    trial.table_dead = (max(votes) if votes else wall()) - killed_at
    return True


class BenchCluster:
    """N silos of one cluster; keeps N running by replacing the ones that die."""

    def __init__(
        self,
        workdir: Path,
        table_uri: str,
        cluster_id: str,
        extra_args: Sequence[str] = (),
        poll_table: bool = True,
        watch_views: bool = True,
        tls: TlsSettings | None = None,
        watch_uri: str | None = None,
        views_from_logs: bool = False,
        watch_takeover: bool = False,
    ) -> None:
        """``tls``: every silo runs over mutual TLS with these (silo) files, and the views are read with them.
        ``watch_uri``: the benchmark polls the table through it (a role of its own, so that statement
        counts per role tell its reads from the silos'). ``watch_takeover``: a trial also times the
        takeover of the victim's keys (``TakeoverPlan``), and starts once every silo serves."""
        self.cluster = Cluster(workdir, table_uri, cluster_id, watch_uri=watch_uri)
        self.poll_table = poll_table
        """False: take the Dead write from the survivors' views and never read the table during a trial
        (so that store-side statement counts are the silos' alone)."""
        self.table_poll = POLL
        """Seconds between the table reads of a trial: only ``table_dead_seen`` depends on it (the Dead
        time is the votes'), and each is a read of every row (the scale benchmark reads less often)."""
        self.views_from_logs = views_from_logs
        """Time each survivor's view by the silo's own ``observed_at``, read from its JSON log
        (``victim_death_logged``), instead of polling its view every ``POLL`` s."""
        self.watch_views = watch_views
        """False: only the table is watched (no GetMembership polling of the survivors during a trial)."""
        self.watch_takeover = watch_takeover
        if not (poll_table or watch_views):
            raise ValueError("a trial must watch the table, the views, or both")
        tls_args = ("--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca)) if tls else ()
        log_args = ("--log-format", "json") if views_from_logs else ()
        self.extra_args = (*extra_args, *tls_args, *log_args)
        self.tls = tls
        self.prober = GrpcProber(cluster_id, None, tls=tls)
        self.work = WorkClient(cluster_id, sender="benchmark", tls=tls)
        self.bound = death_bound(self.cluster.options)

    @property
    def running(self) -> list[SiloProcess]:
        return [silo for silo in self.cluster.silos if silo.running]

    async def start(self, count: int, batch: int = 5) -> None:
        """Start ``count`` silos, ``batch`` at a time (a two-core machine starts 20 Python processes slowly)."""
        while len(self.running) < count:
            size = min(batch, count - len(self.running))
            await asyncio.to_thread(self.cluster.start_active, size, *self.extra_args, timeout=JOIN_TIMEOUT)
        await self.wait_converged()

    async def view(self, silo: SiloProcess) -> MembershipTableData | None:
        assert silo.address is not None
        try:
            return codec.snapshot_from_proto(await self.prober.get_membership(silo.address, RPC_TIMEOUT))
        except Exception:
            return None

    async def wait_converged(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Until every running silo's view shows every running silo Active."""
        deadline = wall() + timeout
        while wall() < deadline:
            silos = self.running
            addresses = [silo.address for silo in silos]
            views = await asyncio.gather(*(self.view(silo) for silo in silos))
            if all(
                view is not None
                and all((row := view.get(a)) is not None and row[0].status is SiloStatus.ACTIVE for a in addresses if a)
                for view in views
            ):
                return
            await asyncio.sleep(POLL)
        raise RuntimeError(f"the cluster did not converge within {timeout}s\n{self.cluster.describe()}")

    async def replace_missing(self, count: int) -> int:
        """Start silos until ``count`` run, and wait for convergence; returns how many were started."""
        missing = count - len(self.running)
        if missing > 0:
            await asyncio.to_thread(self.cluster.start_active, missing, *self.extra_args, timeout=JOIN_TIMEOUT)
        await self.wait_converged()
        return max(missing, 0)

    async def kill_one(
        self, rng: random.Random, freeze: bool = False, among: Sequence[SiloProcess] | None = None
    ) -> KillTrial:
        """SIGKILL a random silo (a crash: its port refuses at once), of ``among`` if given, and watch;
        ``freeze``: see ``freeze_one``."""
        if freeze:
            return await self.freeze_one(rng)
        victim, survivors = self._pick(rng, among)
        assert victim.address is not None
        trial = KillTrial(str(victim.address), len(survivors))
        takeover = await self._takeover_plan(victim.address)
        await self.at_a_random_instant_of_the_grid(rng)
        killed_at = wall()
        victim.send(signal.SIGKILL)
        await self._watch(trial, victim.address, survivors, killed_at, takeover)
        return trial

    async def freeze_one(self, rng: random.Random) -> KillTrial:
        """SIGSTOP a random silo (a hang: its port accepts, nothing answers), watch, then SIGKILL it.

        The hang is what a user cares about: the process is there and its socket open, so only
        silence betrays it. It is SIGKILLed once the watch ends (a thawed silo would read itself
        Dead and exit anyway), so the next trial starts with N live silos again.
        """
        victim, survivors = self._pick(rng)
        assert victim.address is not None
        trial = KillTrial(str(victim.address), len(survivors), signal="SIGSTOP")
        takeover = await self._takeover_plan(victim.address)
        await self.at_a_random_instant_of_the_grid(rng)
        stopped_at = wall()
        victim.send(signal.SIGSTOP)
        try:
            await self._watch(trial, victim.address, survivors, stopped_at, takeover)
        finally:
            trial.killed_after = wall() - stopped_at
            await asyncio.to_thread(victim.close)  # SIGKILL works on a stopped process too
        return trial

    async def at_a_random_instant_of_the_grid(self, rng: random.Random) -> None:
        """Wait a random part of one probe interval, so that the signal falls at a uniformly random
        instant of the silos' probe grid. Without it the benchmark, starved while every silo of
        the machine probes and answers at once, ran (and signalled) just after those bursts: the
        victim had always just answered, and a hang was timed from the worst instant of the grid
        instead of a random one (a failure is independent of another machine's grid)."""
        await asyncio.sleep(rng.uniform(0.0, self.cluster.options.effective_probe_interval))

    def _pick(
        self, rng: random.Random, among: Sequence[SiloProcess] | None = None
    ) -> tuple[SiloProcess, list[SiloProcess]]:
        victim = rng.choice(self.running if among is None else [silo for silo in among if silo.running])
        return victim, [silo for silo in self.running if silo is not victim]

    async def _watch(
        self,
        trial: KillTrial,
        victim: SiloAddress,
        survivors: Sequence[SiloProcess],
        signalled_at: float,
        takeover: TakeoverPlan | None = None,
    ) -> None:
        table = [self._watch_table(trial, victim, signalled_at)] if self.poll_table else []
        if not self.watch_views:
            views = []
        elif self.views_from_logs:
            views = [self._watch_logs(trial, survivors, victim, signalled_at)]
        else:
            views = [self._watch_view(trial, silo, victim, signalled_at) for silo in survivors]
        owner = [] if takeover is None else [self._watch_takeover(trial, takeover, signalled_at)]
        await asyncio.gather(*table, *views, *owner)

    async def _takeover_plan(self, victim: SiloAddress) -> TakeoverPlan | None:
        """With ``watch_takeover``: the victim's keys to watch, once every running silo serves (no
        silo still in its join's takeover wait, the victim serving those keys); else None."""
        if not self.watch_takeover:
            return None
        silos = [silo.address for silo in self.running if silo.address is not None]
        plan = TakeoverPlan.of(silos, victim)
        calls = [(victim, plan.items), *((address, []) for address in silos if address != victim)]
        deadline = wall() + self.cluster.options.takeover_wait + SLACK
        while True:
            try:
                for address, items in calls:
                    await self.work.process(address, ECHO_HANDLER, items, WORK_TIMEOUT)
                return plan
            except (WorkNotOwnedError, WorkUnavailableError) as exc:
                if wall() > deadline:
                    raise RuntimeError(f"the silos did not all serve before the trial: {exc}") from exc
            await asyncio.sleep(POLL)

    async def _watch_takeover(self, trial: KillTrial, plan: TakeoverPlan, signalled_at: float) -> None:
        """Send the plan's batch to its new owner every ``TAKEOVER_POLL`` s until it is served
        (ABORTED: not its keys yet; UNAVAILABLE: not serving) or the bound passes."""
        trial.takeover_owner = str(plan.owner)
        deadline = signalled_at + self.bound + self.cluster.options.takeover_wait
        while wall() < deadline:
            try:
                await self.work.process(plan.owner, ECHO_HANDLER, plan.items, WORK_TIMEOUT)
            except (WorkNotOwnedError, WorkUnavailableError) as exc:
                trial.takeover_refusal = str(exc)[:500]
                await asyncio.sleep(TAKEOVER_POLL)
                continue
            trial.takeover = wall() - signalled_at
            return

    async def idle_cost(self, seconds: float) -> dict[str, object]:
        """CPU seconds per minute of each running silo over ``seconds`` in which nobody touches the cluster.

        Nothing is polled meanwhile (no table reads, no GetMembership), so the silos' own probing,
        heartbeats and table refreshes are all that runs.
        """
        pids = [silo.pid for silo in self.running]
        per_silo = await idle_cpu(pids, seconds)
        return {"seconds": seconds, "silos": len(pids), "cpu_s_per_min_each": per_silo}

    async def _watch_table(self, trial: KillTrial, victim: SiloAddress, killed_at: float) -> None:
        while wall() < killed_at + self.bound:
            try:
                data = await asyncio.to_thread(self.cluster.read)
            except TableUnavailableError:
                data = None
            if data is not None and record_dead(trial, data, victim, killed_at):
                return
            await asyncio.sleep(self.table_poll)

    async def _watch_view(self, trial: KillTrial, silo: SiloProcess, victim: SiloAddress, killed_at: float) -> None:
        while wall() < killed_at + self.bound and silo.running:
            view = await self.view(silo)
            if view is not None and excludes(view, victim):
                trial.views[str(silo.address)] = wall() - killed_at
                trial.view_versions[str(silo.address)] = view.version.version
                row = view.get(victim)
                self._dead_from_votes(trial, row[0] if row is not None else None, killed_at)
                return
            await asyncio.sleep(POLL)

    def _dead_from_votes(self, trial: KillTrial, victim_row: MembershipEntry | None, killed_at: float) -> None:
        """Without table polls, the Dead write's time is its last vote's, read from a survivor's view."""
        if not self.poll_table and trial.table_dead is None and victim_row is not None and victim_row.suspect_times:
            trial.table_dead = max(when.timestamp() for _, when in victim_row.suspect_times) - killed_at

    async def _watch_logs(
        self, trial: KillTrial, survivors: Sequence[SiloProcess], victim: SiloAddress, signalled_at: float
    ) -> None:
        """Read each survivor's log, from where it ends now, every ``LOG_POLL`` s until every
        survivor logged the victim's departure or the bound passed."""
        marks = {silo: silo.log.stat().st_size if silo.log.exists() else 0 for silo in survivors}
        pending = list(survivors)
        while pending and wall() < signalled_at + self.bound:
            await asyncio.sleep(LOG_POLL)
            for silo in list(pending):
                with silo.log.open("rb") as log:
                    log.seek(marks[silo])
                    complete = log.read()
                complete = complete[: complete.rfind(b"\n") + 1]  # a line still being written is read next time
                marks[silo] += len(complete)
                seen = victim_death_logged(complete.decode(errors="replace").splitlines(), victim)
                if seen is not None:
                    observed_at, at = seen
                    trial.views[str(silo.address)] = observed_at - signalled_at
                    if not self.poll_table and trial.table_dead is None:
                        trial.table_dead = at - signalled_at
                    pending.remove(silo)

    async def close(self) -> None:
        await self.prober.close()
        await self.work.close()
        await asyncio.to_thread(self.cluster.close)


# --- partitions in network namespaces ----------------------------------------------------------


@dataclass
class PartitionTrial:
    """One partition of a fresh cluster in network namespaces, in seconds after the cut (None = not within the bound).

    The cut's time is when the benchmark started applying the iptables rules (``cut_apply_s``
    later every link was cut): the first rules already silence some links, so that is when
    detection may start.
    """

    scenario: str
    minority: list[str]
    majority: list[str]
    cut_apply_s: float = 0.0
    dead: dict[str, float] = field(default_factory=dict)
    """Cut to each minority silo's Dead write (the killer's vote time)."""
    exited: dict[str, float] = field(default_factory=dict)
    """Cut to each minority silo's process exit."""
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    majority_declared_dead: list[str] = field(default_factory=list)
    """Majority silos whose row was Dead at some poll, or that exited: must stay empty."""
    history_error: str | None = None
    """The history checker's complaint (a majority silo written Dead, a death without quorum), if any."""
    cut_verified: bool | None = None
    """A connect across the cut, made after the measurement, went unanswered (the lab did cut)."""
    idle_segments_per_s: list[float] = field(default_factory=list)
    """TCP segments (in + out) per second of each silo's namespace before the cut: all of it is probing."""
    idle_cpu_s_per_min: list[float] = field(default_factory=list)

    @property
    def all_dead(self) -> float | None:
        return max(self.dead.values()) if len(self.dead) == len(self.minority) else None

    @property
    def all_exited(self) -> float | None:
        """Cut to the last minority silo's exit, if every one exited with DECLARED_DEAD (3)."""
        if len(self.exited) < len(self.minority) or any(
            self.exit_codes.get(name) != ExitCode.DECLARED_DEAD for name in self.minority
        ):
            return None
        return max(self.exited.values())

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "minority": self.minority,
            "majority": self.majority,
            "cut_apply_s": self.cut_apply_s,
            "all_dead_s": self.all_dead,
            "all_exited_s": self.all_exited,
            "dead_s": self.dead,
            "exited_s": self.exited,
            "exit_codes": self.exit_codes,
            "majority_declared_dead": self.majority_declared_dead,
            "history_error": self.history_error,
            "cut_verified": self.cut_verified,
            "idle_segments_per_s": self.idle_segments_per_s,
            "idle_cpu_s_per_min": self.idle_cpu_s_per_min,
        }


@dataclass(frozen=True)
class PartitionPlan:
    """How to run one partition trial."""

    scenario: str
    size: int
    minority_size: int
    settle: float = 3.0
    """Seconds after every silo is Active before measuring: a table refresh (2 s) and a probe
    round, so that every silo has heard every other one (the majority rule counts only silos
    that answered at least once)."""
    idle_window: float = 5.0
    """Seconds of idle traffic and CPU measured just before the cut."""
    hold: float = 5.0
    """Seconds the majority must stay Active and running after the minority is gone."""
    bound: float = 30.0
    """Seconds after the cut by which the minority must be Dead and exited (a correctness bound)."""


async def partition_trial(workdir: Path, plan: PartitionPlan, rng: random.Random, cluster_id: str) -> PartitionTrial:
    """Start ``plan.size`` silos on their own lab hosts, cut a random minority off, and time its end.

    The minority's processes are awaited in threads (exit times to the millisecond); the table is
    polled every ``POLL`` for the Dead rows (their times come from the votes) and for any
    majority silo declared Dead. Afterwards the whole history is checked with the majority
    protected, and the lab is deleted whatever happened.
    """
    from testbed.net_cluster import NetCluster  # needs root and iptables: imported only when used

    workdir.mkdir(parents=True, exist_ok=True)
    cluster = await asyncio.to_thread(NetCluster, workdir, cluster_id=cluster_id)
    try:
        silos = await asyncio.to_thread(cluster.start, plan.size, JOIN_TIMEOUT)
        await asyncio.sleep(plan.settle)
        names = [silo.name for silo in silos]
        minority = sorted(rng.sample(names, plan.minority_size))
        majority = [name for name in names if name not in minority]
        trial = PartitionTrial(plan.scenario, minority, majority)
        pids = [silo.pid for silo in silos]
        before = [tcp_segments(pid) for pid in pids]
        started = wall()
        trial.idle_cpu_s_per_min = await idle_cpu(pids, plan.idle_window)
        elapsed = wall() - started
        trial.idle_segments_per_s = [
            (sum(end) - sum(start)) / elapsed
            for start, end in zip(before, [tcp_segments(pid) for pid in pids], strict=True)
            if start is not None and end is not None
        ]

        cut_at = wall()
        await asyncio.to_thread(cluster.lab.partition, cluster.hosts_of(majority), cluster.hosts_of(minority))
        trial.cut_apply_s = wall() - cut_at

        async def exit_of(name: str) -> None:
            with contextlib.suppress(AssertionError):  # still running at the bound: reported as not exited
                trial.exit_codes[name] = await asyncio.to_thread(cluster.silo(name).wait_exit, plan.bound)
                trial.exited[name] = wall() - cut_at

        async def watch_table() -> None:
            addresses = {cluster.silo(name).address: name for name in names}
            while wall() < cut_at + plan.bound + plan.hold:
                try:
                    data = await asyncio.to_thread(cluster.read)
                except MembershipTableError:
                    data = None
                for entry in data.entries if data is not None else ():
                    name = addresses.get(entry.silo_address)
                    if name is None or entry.status is not SiloStatus.DEAD:
                        continue
                    if name in minority and name not in trial.dead:
                        votes = [when.timestamp() for _, when in entry.suspect_times]
                        trial.dead[name] = (max(votes) if votes else wall()) - cut_at
                    elif name in majority and name not in trial.majority_declared_dead:
                        trial.majority_declared_dead.append(name)
                for name in majority:
                    if not cluster.silo(name).running and name not in trial.majority_declared_dead:
                        trial.majority_declared_dead.append(name)
                gone = trial.all_dead is not None and len(trial.exited) == len(minority)
                if gone and wall() >= cut_at + max(trial.exited.values()) + plan.hold:
                    return
                await asyncio.sleep(POLL)

        await asyncio.gather(watch_table(), *(exit_of(name) for name in minority))
        trial.cut_verified = await asyncio.to_thread(cluster.unanswered, majority[0], minority[0], 1) == 1
        try:
            await asyncio.to_thread(
                cluster.check_history,
                min(cluster.options.num_votes_for_death_declaration, (plan.size + 1) // 2),
                majority,
            )
        except AssertionError as exc:
            trial.history_error = str(exc)[:2000]
        return trial
    finally:
        await asyncio.to_thread(cluster.close)
