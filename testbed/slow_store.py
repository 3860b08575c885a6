"""A slow store: real silos on a real PostgreSQL table whose every round trip is held 1-5 s.

The silos reach the table through a ``CountingProxy`` (``testbed.services.counting_proxy``). The
scenario starts one silo more than it measures and SIGKILLs it (kill -> Dead write at full
speed: the normal), measures the others' store traffic at full speed (the steady state), then
slows the proxy down (``slow_down``: each client flight held a delay drawn from [low, high])
for a while and checks, at every poll, that nobody is declared Dead and every silo runs; then
it lets the proxy run at full speed again, waits one table refresh period, SIGKILLs a silo and
times kill -> Dead write again. What it returns (``SlowStoreRun``) is what the test asserts on and the
benchmark (``benchmarks.slow_store``) reports.

The test reads the table directly (not through the proxy), so its own reads are neither slowed
nor counted. Fencing is read from the silos' logs (``is fenced``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from membership_tables import SiloStatus, TableUnavailableError
from membership_tables.history import load_history
from testbed.cluster_harness import Cluster, SiloProcess, death_bound
from testbed.services.counting_proxy import CountingProxy, Tally, through, uniform_delay
from testbed.services.postgres import PostgresServer

FENCED = "is fenced"
"""What a silo logs when its lease runs out (``silo.runtime.serving``)."""
POLL = 0.25


@dataclass(frozen=True)
class Traffic:
    """What the silos sent the store through the proxy over ``seconds``."""

    seconds: float
    tally: Tally

    def per_second(self) -> dict[str, float]:
        """Round trips (requests), connections and bytes per second."""
        tally, seconds = self.tally, self.seconds
        return {
            "round_trips": tally.round_trips / seconds,
            "connections": tally.connections / seconds,
            "bytes_sent": tally.bytes_sent / seconds,
            "bytes_received": tally.bytes_received / seconds,
        }


@dataclass
class SlowStoreRun:
    """What one slow-store scenario measured."""

    size: int
    delay: tuple[float, float]
    steady: Traffic
    slow: Traffic
    dead_while_slow: list[str] = field(default_factory=list)
    """Silos seen Dead (or not running) at any poll of the slow phase."""
    fenced: dict[str, int] = field(default_factory=dict)
    """Per silo, how often it fenced itself from the start of the slow phase on (log lines)."""
    baseline_kill_to_dead: float = 0.0
    """Seconds from a SIGKILL before the slow phase to the recorded Dead write (the normal)."""
    kill_to_dead: float = 0.0
    """Seconds from a SIGKILL one refresh period after full speed to the recorded Dead write."""
    death_bound: float = 0.0
    floor: float = 0.0

    @property
    def traffic_ratio(self) -> float:
        """Round trips per second while slow over round trips per second at full speed."""
        steady = self.steady.per_second()["round_trips"]
        return self.slow.per_second()["round_trips"] / steady if steady else float("inf")


class SlowStoreCluster:
    """``size`` silos (local preset) on a fresh database of ``postgres``, reached through a proxy."""

    def __init__(self, workdir: Path, postgres: PostgresServer, cluster_id: str, size: int = 5) -> None:
        self.size = size
        direct = postgres.create_database(cluster_id)
        self.proxy = CountingProxy("127.0.0.1", postgres.port)
        self.cluster = Cluster(workdir, through(direct, postgres.port, self.proxy), cluster_id, watch_uri=direct)

    def __enter__(self) -> SlowStoreCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cluster.close()
        self.proxy.close()

    def run(self, steady_seconds: float, slow_seconds: float, low: float = 1.0, high: float = 5.0) -> SlowStoreRun:
        """Start ``size + 1`` silos and kill one (the baseline kill -> Dead); measure ``steady_seconds``
        at full speed and ``slow_seconds`` slowed; one refresh period after full speed, kill another."""
        options = self.cluster.options
        silos = self.cluster.start_active(self.size + 1)
        bound = death_bound(options)
        baseline = self.kill_and_time(silos.pop(), bound)
        time.sleep(options.table_refresh_timeout)  # the death's reads and writes are over
        steady = self.measure(silos, steady_seconds)
        fenced_before = self.fence_counts()
        self.proxy.slow_down(uniform_delay(low, high))
        dead: set[str] = set()
        try:
            slow = self.measure(silos, slow_seconds, dead)
        finally:
            self.proxy.full_speed()
        fenced = {name: count - fenced_before.get(name, 0) for name, count in self.fence_counts().items()}
        time.sleep(options.table_refresh_timeout)
        after = self.kill_and_time(silos[-1], bound)
        return SlowStoreRun(
            self.size,
            (low, high),
            steady,
            slow,
            sorted(dead),
            {name: count for name, count in fenced.items() if count},
            baseline_kill_to_dead=baseline,
            kill_to_dead=after,
            death_bound=bound,
            floor=options.detection_time,
        )

    def measure(self, silos: list[SiloProcess], seconds: float, dead: set[str] | None = None) -> Traffic:
        """The proxy's counts over ``seconds``; with ``dead``, adds every silo seen Dead or not running."""
        with self.proxy.counting() as tally:
            started = time.monotonic()
            while (left := started + seconds - time.monotonic()) > 0:
                time.sleep(min(POLL, left))
                if dead is not None:
                    dead.update(self.not_alive(silos))
            elapsed = time.monotonic() - started
        return Traffic(elapsed, tally)

    def not_alive(self, silos: list[SiloProcess]) -> list[str]:
        """Names of ``silos`` that are Dead in the table or no longer running."""
        try:
            statuses = self.cluster.statuses(silos)
        except TableUnavailableError:
            statuses = [None] * len(silos)
        return [
            silo.log.stem
            for silo, status in zip(silos, statuses, strict=True)
            if status is SiloStatus.DEAD or not silo.running
        ]

    def fence_counts(self) -> dict[str, int]:
        return {silo.log.stem: silo.log_text().count(FENCED) for silo in self.cluster.silos}

    def kill_and_time(self, victim: SiloProcess, bound: float) -> float:
        """SIGKILL ``victim``; seconds until another silo's Dead write of its row was recorded."""
        killed_at = time.time()
        victim.kill()
        self.cluster.wait_statuses([victim], SiloStatus.DEAD, bound)
        for record in load_history(self.cluster.history_dir):
            if (
                record.silo == victim.address
                and record.entry.status is SiloStatus.DEAD
                and record.writer != str(victim.address)
            ):
                return record.recorded_at.timestamp() - killed_at
        raise AssertionError(f"{victim.address} is Dead but no silo's Dead write of it was recorded")
