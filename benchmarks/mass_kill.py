"""Several silos SIGKILLed at the same moment, and when the table holds each of them Dead.

The victims are ``silo run`` processes of a ``BenchCluster`` (each its own process, so that a
SIGKILL takes exactly one silo); the rest of the cluster may be anything sharing the table.
Only the table is watched (one ``read_all`` every ``BenchCluster.table_poll`` s): the survivors' views would be
as many RPCs as there are silos, in the very window measured. Each victim's Dead time is its
Dead write's (the killer's vote time), as in a single kill (``silo_cluster.record_dead``).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.common import wall
from benchmarks.silo_cluster import BenchCluster, KillTrial, record_dead
from membership_tables import SiloAddress, TableUnavailableError
from testbed.cluster_harness import SiloProcess


@dataclass
class MassKillTrial:
    """The victims' trials, in seconds after the common SIGKILL (None = not Dead within ``bound``)."""

    trials: list[KillTrial]
    killed_at: float
    """Unix seconds of the SIGKILLs."""
    bound: float

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
        }


async def kill_together(bench: BenchCluster, victims: Sequence[SiloProcess], bound: float) -> MassKillTrial:
    """SIGKILL every one of ``victims`` at once and poll the table until each is Dead or ``bound`` s passed."""
    addresses: list[SiloAddress] = []
    for silo in victims:
        assert silo.address is not None, "a victim that never listened"
        addresses.append(silo.address)
    trials = {address: KillTrial(str(address), survivors=0) for address in addresses}
    killed_at = wall()
    for silo in victims:
        silo.send(signal.SIGKILL)
    pending = list(addresses)
    while pending and wall() < killed_at + bound:
        try:
            data = await asyncio.to_thread(bench.cluster.read)
        except TableUnavailableError:
            data = None
        if data is not None:
            pending = [address for address in pending if not record_dead(trials[address], data, address, killed_at)]
        if pending:
            await asyncio.sleep(bench.table_poll)
    return MassKillTrial([trials[address] for address in addresses], killed_at, bound)
