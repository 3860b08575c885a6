"""Local health: how much this silo should distrust its own judgement (Lifeguard).

A small score, 0 = healthy, capped at ``MAX_SCORE``. A silo whose event loop lags, whose
probes fail to everyone it probes, or that others suspect is more likely the sick one
than its targets. The score lengthens this silo's probe timeouts (``timeout * (1 + score)``)
and makes it report itself unhealthy when asked to be an intermediary, so its failed
indirect probes count as "unknown" instead of a vote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from membership_tables import SiloAddress
from silo.clock import Clock, Ticker
from silo.options import SiloOptions
from silo.snapshot import MembershipSnapshot

MAX_SCORE = 8
MAX_LAG_PENALTY = 4
MAX_SUSPICION_PENALTY = 2
ALL_PROBES_FAILING_PENALTY = 2


def lag_penalty(lag: float, probe_timeout: float) -> int:
    """One point per quarter of a probe timeout that the event loop was late, up to 4."""
    return min(MAX_LAG_PENALTY, max(0, int(lag / (probe_timeout / 4))))


def probe_penalty(last_results: Callable[[], list[bool]]) -> int:
    """Points when this silo's latest probes failed to every one of at least two targets."""
    results = last_results()
    return ALL_PROBES_FAILING_PENALTY if len(results) >= 2 and not any(results) else 0


def effective_timeout(probe_timeout: float, score: int) -> float:
    """The probe timeout lengthened by a poor local health score."""
    return probe_timeout * (1 + score)


class LocalHealth:
    """Tracks event-loop lag, our probe results and suspicion of us; ``score()`` sums them."""

    def __init__(
        self,
        *,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        snapshot: Callable[[], MembershipSnapshot],
    ) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._snapshot = snapshot
        self._lag = 0.0
        self._probe_results: dict[SiloAddress, bool] = {}
        self._ticker: Ticker | None = None
        self._task: asyncio.Task[None] | None = None

    def record_probe(self, target: SiloAddress, answered: bool) -> None:
        self._probe_results[target] = answered

    def forget(self, target: SiloAddress) -> None:
        """We stopped probing ``target``; its last result no longer says anything about us."""
        self._probe_results.pop(target, None)

    def record_loop_lag(self, lag: float) -> None:
        self._lag = lag

    def score(self) -> int:
        snapshot = self._snapshot()
        suspicion = min(
            MAX_SUSPICION_PENALTY, snapshot.fresh_votes_against(self._address, self._clock.now(), self._options)
        )
        probes = probe_penalty(lambda: list(self._probe_results.values()))
        return min(MAX_SCORE, lag_penalty(self._lag, self._options.probe_timeout) + probes + suspicion)

    def start(self) -> None:
        """Measure event-loop lag: how late a periodic task wakes up."""
        period = self._options.probe_timeout / 2
        self._ticker = Ticker(self._clock, period)
        self._task = asyncio.create_task(self._measure(self._ticker, period))

    async def _measure(self, ticker: Ticker, period: float) -> None:
        while True:
            started = self._clock.monotonic()
            if not await ticker.tick():
                return
            self.record_loop_lag(self._clock.monotonic() - started - period)

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
