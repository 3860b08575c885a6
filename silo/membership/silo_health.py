"""The silo health monitor: probes one target and asks for a vote when it stops answering.

One instance per probed silo. It probes every ``probe_timeout`` with a timeout
lengthened by our own local health (Lifeguard) and counts consecutive misses (reset by
any answer). From ``num_missed_probes_limit - 1`` misses it also asks a random healthy
Active third silo to probe the target (SWIM's indirect probe): a healthy intermediary that
cannot reach the target either adds its vote to ours; an intermediary that reports
itself unhealthy (or cannot be asked) means "unknown" and is not asked again until the
membership changes. At ``num_missed_probes_limit`` misses we vote alone. A lost race or
an unreachable table is not an error: the next probe tries again.
"""

from __future__ import annotations

import logging
import random as random_module
from collections.abc import Awaitable, Callable

from membership_tables import SiloAddress
from silo.membership.clock import Clock, Periodic, with_timeout
from silo.membership.local_health import LocalHealth, effective_timeout
from silo.membership.options import SiloOptions
from silo.membership.probing import IndirectProbeResult, Prober
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_manager import VoteOutcome

logger = logging.getLogger(__name__)

RequestVote = Callable[[SiloAddress, SiloAddress | None], Awaitable[VoteOutcome]]
"""Vote against a target, with a healthy intermediary as second voter (or None)."""


class SiloHealthMonitor:
    """Probes ``target`` periodically and requests votes against it."""

    def __init__(
        self,
        *,
        target: SiloAddress,
        local: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        prober: Prober,
        local_health: LocalHealth,
        snapshot: Callable[[], MembershipSnapshot],
        vote: RequestVote,
        random: random_module.Random,
    ) -> None:
        self.target = target
        self._local = local
        self._options = options
        self._clock = clock
        self._prober = prober
        self._health = local_health
        self._snapshot = snapshot
        self._vote = vote
        self._random = random
        self.missed_probes = 0
        self._unusable: set[SiloAddress] = set()
        self._unusable_version = -1
        self._prober_loop: Periodic | None = None

    def start(self) -> None:
        self._prober_loop = Periodic(self._clock, self._options.probe_timeout, self.probe_once, immediately=True)
        self._prober_loop.start()

    async def stop(self) -> None:
        if self._prober_loop is not None:
            await self._prober_loop.stop()

    def _timeout(self) -> float:
        return effective_timeout(self._options.probe_timeout, self._health.score())

    async def probe_once(self) -> None:
        """One round: a direct probe, maybe an indirect one, maybe a vote."""
        answered = await self._ping()
        self._health.record_probe(self.target, answered)
        if answered:
            self.missed_probes = 0
            return
        self.missed_probes += 1
        logger.debug("silo %s: %s missed %d probe(s)", self._local, self.target, self.missed_probes)
        limit = self._options.num_missed_probes_limit
        if self.missed_probes >= limit - 1 and self._options.enable_indirect_probes:
            intermediary = self._pick_intermediary()
            if intermediary is not None:
                verdict = await self._probe_through(intermediary)
                if verdict is True:
                    self.missed_probes = 0
                    return
                if verdict is False:
                    await self._request_vote(intermediary)
                    return
        if self.missed_probes >= limit:
            await self._request_vote(None)

    async def _ping(self) -> bool:
        try:
            return await with_timeout(self._clock, self._prober.ping(self.target, self._timeout()), self._timeout())
        except Exception as exc:
            logger.debug("silo %s: ping of %s failed: %r", self._local, self.target, exc)
            return False

    def _pick_intermediary(self) -> SiloAddress | None:
        snapshot = self._snapshot()
        if snapshot.version != self._unusable_version:
            self._unusable.clear()  # membership changed: give unhealthy intermediaries another chance
            self._unusable_version = snapshot.version
        candidates = [
            silo
            for silo in snapshot.active_non_stale(self._clock.now(), self._options)
            if silo not in (self.target, self._local) and silo not in self._unusable
        ]
        return self._random.choice(candidates) if candidates else None

    async def _probe_through(self, intermediary: SiloAddress) -> bool | None:
        """True: the target answered; False: a healthy intermediary could not reach it; None: unknown."""
        timeout = self._timeout()
        try:
            result: IndirectProbeResult = await with_timeout(
                self._clock, self._prober.probe_indirectly(intermediary, self.target, timeout), 2 * timeout
            )
        except Exception as exc:
            logger.debug("silo %s: cannot ask %s to probe %s: %r", self._local, intermediary, self.target, exc)
            self._unusable.add(intermediary)
            return None
        if result.succeeded:
            return True
        if result.intermediary_health_score > 0:
            logger.info(
                "silo %s: intermediary %s is unhealthy (score %d); its failed probe of %s is not a vote",
                self._local, intermediary, result.intermediary_health_score, self.target,
            )  # fmt: skip
            self._unusable.add(intermediary)
            return None
        return False

    async def _request_vote(self, intermediary: SiloAddress | None) -> None:
        outcome = await self._vote(self.target, intermediary)
        logger.debug("silo %s: vote against %s: %s", self._local, self.target, outcome.value)
