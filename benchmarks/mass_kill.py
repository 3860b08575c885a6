"""Several silos SIGKILLed at the same moment, and when the table holds each of them Dead.

The victims are ``silo run`` processes of a ``BenchCluster`` (each its own process, so that a
SIGKILL takes exactly one silo: ``ProcessVictim``) or silos of a benchmark host crashed in
process (``benchmarks.hosted_crash.HostedSilo``); the rest of the cluster may be anything
sharing the table. Each victim's times count from the moment it stopped answering: a process
from its SIGKILL, a hosted silo from its host's stop of its server (the host's loop may take a
while to get to the signal on a saturated machine).
A victim is watched for ``bound`` seconds from its own stop (a hosted silo's host may get to it
late), and a victim whose stop has not begun after twice ``bound`` is given up (``not_stopped``).
Only the table is watched (one ``read_all`` every ``BenchCluster.table_poll`` s): the survivors' views would be
as many RPCs as there are silos, in the very window measured. Each victim's Dead time is its
Dead write's (the killer's vote time), as in a single kill (``silo_cluster.record_dead``).
"""

from __future__ import annotations

import asyncio
import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from benchmarks.common import wall
from benchmarks.silo_cluster import BenchCluster, KillTrial, record_dead
from membership_tables import SiloAddress, TableUnavailableError
from testbed.cluster_harness import SiloProcess


class Victim(Protocol):
    """A silo a trial kills."""

    @property
    def address(self) -> SiloAddress: ...

    def kill(self) -> None:
        """Kill it now (or ask its process to: see ``stopped_at``)."""

    def stopped_at(self, signalled_at: float) -> float | None:
        """Unix seconds it stopped answering, once known (``signalled_at``: when ``kill`` ran)."""


@dataclass(frozen=True)
class ProcessVictim:
    """A ``silo run`` process: SIGKILL stops it at once."""

    silo: SiloProcess

    @property
    def address(self) -> SiloAddress:
        assert self.silo.address is not None, "a victim that never listened"
        return self.silo.address

    def kill(self) -> None:
        self.silo.send(signal.SIGKILL)

    def stopped_at(self, signalled_at: float) -> float | None:
        return signalled_at


@dataclass
class MassKillTrial:
    """The victims' trials, in seconds after the common SIGKILL (None = not Dead within ``bound``)."""

    trials: list[KillTrial]
    killed_at: float
    """Unix seconds of the SIGKILLs."""
    bound: float
    not_stopped: list[str]
    """Victims that had not stopped when the trial gave up (a hosted silo whose host's loop
    never got to its crash): never killed, so no Dead row is expected."""

    @property
    def all_dead(self) -> float | None:
        """SIGKILL to the last victim's Dead write, if every victim was written Dead."""
        times = [trial.table_dead for trial in self.trials]
        return max(time for time in times if time is not None) if None not in times else None

    def to_json(self) -> dict[str, object]:
        return {
            "victims": len(self.trials),
            "all_dead_s": self.all_dead,
            "bound_s": self.bound,
            "table_dead_s": sorted(trial.table_dead for trial in self.trials if trial.table_dead is not None),
            "not_dead": [trial.victim for trial in self.trials if trial.table_dead is None],
            "not_stopped": self.not_stopped,
        }


async def kill_together(bench: BenchCluster, victims: Sequence[Victim], bound: float) -> MassKillTrial:
    """Kill every one of ``victims`` at once and poll the table until each is Dead or ``bound`` s
    passed since it stopped (``Victim.stopped_at``; at most twice ``bound`` after the kill for a
    victim that has not stopped); each victim's times count from when it stopped."""
    addresses = [victim.address for victim in victims]
    trials = {address: KillTrial(str(address), survivors=0) for address in addresses}
    killed_at = wall()
    for victim in victims:
        victim.kill()
    stopped: dict[SiloAddress, float] = {}
    pending = list(addresses)
    while pending:
        for victim in (victim for victim in victims if victim.address in pending and victim.address not in stopped):
            if (at := victim.stopped_at(killed_at)) is not None:
                stopped[victim.address] = at
        now = wall()
        if all(now >= min(stopped.get(address, math.inf), killed_at + bound) + bound for address in pending):
            break  # each watched for the bound since its stop, or given up on stopping
        try:
            data = await asyncio.to_thread(bench.cluster.read)
        except TableUnavailableError:
            data = None
        if data is not None:
            pending = [address for address in pending if not record_dead(trials[address], data, address, killed_at)]
        if pending:
            await asyncio.sleep(bench.table_poll)
    for victim in victims:
        at = stopped.get(victim.address)
        if at is None:
            at = victim.stopped_at(killed_at)
        if at is not None:
            stopped[victim.address] = at
            trials[victim.address].shift(at - killed_at)
    not_stopped = [str(address) for address in addresses if address not in stopped]
    return MassKillTrial([trials[address] for address in addresses], killed_at, bound, not_stopped)
