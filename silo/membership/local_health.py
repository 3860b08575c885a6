"""Local health: how much this silo should distrust its own judgement (Lifeguard).

A small score, 0 = healthy, capped at ``MAX_SCORE``. A silo whose event loop lags, whose
probes fail to everyone it probes, or that others suspect is more likely the sick one
than its targets. The score lengthens this silo's probe timeouts (``timeout * (1 + score)``)
and makes it report itself unhealthy when asked to be an intermediary, so its failed
indirect probes count as "unknown" instead of a vote.
"""

from __future__ import annotations

from collections.abc import Callable

from membership_tables import SiloAddress
from silo.membership.clock import Clock, Periodic
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot

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
        self._lag_period = options.probe_timeout / 2
        self._last_round = 0.0
        self._meter: Periodic | None = None

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
        self._last_round = self._clock.monotonic()
        self._meter = Periodic(self._clock, self._lag_period, self._measure)
        self._meter.start()

    async def _measure(self) -> None:
        now = self._clock.monotonic()
        self.record_loop_lag(now - self._last_round - self._lag_period)
        self._last_round = now

    async def stop(self) -> None:
        if self._meter is not None:
            await self._meter.stop()
