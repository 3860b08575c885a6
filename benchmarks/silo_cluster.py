"""Clusters of real ``silo run`` processes for the benchmarks, and what each silo sees.

``BenchCluster`` wraps the test suite's ``Cluster`` (tests/silo/cluster_harness.py): it
starts silos with the local preset, kills one with SIGKILL and measures, in wall-clock
time, (a) when the table says Dead and (b) when each survivor's own view (its
``GetMembership`` RPC, polled) no longer counts the victim. The Dead write's time is the
killer's vote time in the row (the voter stamps it just before its conditional write), so
it does not depend on how often the benchmark polls the table.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import wall
from membership_tables import MembershipTableData, SiloAddress, SiloStatus, TableUnavailableError
from silo.wire import codec
from silo.wire.prober import GrpcProber
from tests.silo.cluster_harness import Cluster, SiloProcess, death_bound

POLL = 0.1
"""Seconds between polls of the views and the table (the resolution of the view times)."""
RPC_TIMEOUT = 1.0
JOIN_TIMEOUT = 120.0


@dataclass
class KillTrial:
    """One SIGKILL and what followed, in seconds after the kill (None = not within the bound)."""

    victim: str
    survivors: int
    table_dead: float | None = None
    """Crash to the Dead write (the killer's vote time)."""
    table_dead_seen: float | None = None
    """Crash to the benchmark's table poll first returning Dead."""
    dead_version: int | None = None
    views: dict[str, float] = field(default_factory=dict)
    """Crash to each survivor's view excluding the victim."""
    view_versions: dict[str, int] = field(default_factory=dict)

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
            "survivors": self.survivors,
            "table_dead_s": self.table_dead,
            "table_dead_polled_s": self.table_dead_seen,
            "last_view_s": self.last_view,
            "propagation_s": self.propagation,
            "dead_version": self.dead_version,
            "views_s": sorted(self.views.values()),
        }


def excludes(data: MembershipTableData, victim: SiloAddress) -> bool:
    row = data.get(victim)
    return row is None or row[0].status is SiloStatus.DEAD


class BenchCluster:
    """N silos of one cluster; keeps N running by replacing the ones that die."""

    def __init__(
        self, workdir: Path, table_uri: str, cluster_id: str, extra_args: Sequence[str] = (), poll_table: bool = True
    ) -> None:
        self.cluster = Cluster(workdir, table_uri, cluster_id)
        self.poll_table = poll_table
        """False: take the Dead write from the survivors' views and never read the table during a trial
        (so that store-side statement counts are the silos' alone)."""
        self.extra_args = tuple(extra_args)
        self.prober = GrpcProber(cluster_id, None)
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

    async def kill_one(self, rng: random.Random, freeze: bool = False) -> KillTrial:
        """SIGKILL (or, with ``freeze``, SIGSTOP: a hung silo whose probes time out) a random silo and watch."""
        victim = rng.choice(self.running)
        survivors = [silo for silo in self.running if silo is not victim]
        assert victim.address is not None
        trial = KillTrial(str(victim.address), len(survivors))
        killed_at = wall()
        victim.send(signal.SIGSTOP if freeze else signal.SIGKILL)
        table = [self._watch_table(trial, victim.address, killed_at)] if self.poll_table else []
        await asyncio.gather(*table, *(self._watch_view(trial, silo, victim.address, killed_at) for silo in survivors))
        if freeze:
            await asyncio.to_thread(victim.close)  # SIGKILL works on a stopped process too
        return trial

    async def _watch_table(self, trial: KillTrial, victim: SiloAddress, killed_at: float) -> None:
        while wall() < killed_at + self.bound:
            try:
                data = await asyncio.to_thread(self.cluster.read)
            except TableUnavailableError:
                data = None
            row = data.get(victim) if data is not None else None
            if data is not None and row is not None and row[0].status is SiloStatus.DEAD:
                trial.table_dead_seen = wall() - killed_at
                trial.dead_version = data.version.version
                votes = [when.timestamp() for _, when in row[0].suspect_times]
                trial.table_dead = (max(votes) if votes else wall()) - killed_at
                return
            await asyncio.sleep(POLL)

    async def _watch_view(self, trial: KillTrial, silo: SiloProcess, victim: SiloAddress, killed_at: float) -> None:
        while wall() < killed_at + self.bound and silo.running:
            view = await self.view(silo)
            if view is not None and excludes(view, victim):
                trial.views[str(silo.address)] = wall() - killed_at
                trial.view_versions[str(silo.address)] = view.version.version
                row = view.get(victim)
                if not self.poll_table and trial.table_dead is None and row is not None and row[0].suspect_times:
                    trial.table_dead = max(when.timestamp() for _, when in row[0].suspect_times) - killed_at
                return
            await asyncio.sleep(POLL)

    async def close(self) -> None:
        await self.prober.close()
        await asyncio.to_thread(self.cluster.close)
