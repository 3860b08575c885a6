"""The majority rule over every fresh Active silo, checked before a vote under ring sampling.

With ring sampling (more fresh Active silos than the ones we monitor) our sample can, by
chance, sit mostly on our side of a cut, so before a vote ``MajorityCheck`` applies the rule
(``votes.may_vote``) to **every** fresh Active silo: it pings the fresh silos we do not monitor
(our gossip arc heads first, whose channels are open, then the others, each part in a random
order, a bounded number at a time, stopping as soon as a majority answered; beyond
``MAJORITY_SAMPLE`` of them, three quarters of a sample of that many answering confirms it
first) and counts the monitored ones we hear. A silo on the minority side of a symmetric
partition that still reaches the table sees the majority's heartbeats, so it counts them as
fresh, cannot reach them, and never votes: whatever its sample says.

**A heal is not evidence** (``MajorityHistory``): when the majority rule passes again because
more silos answer (the cut healed), the silences our monitors measured while we could not vote
were the cut's, not their targets'.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random as random_module
from collections.abc import Callable, Mapping

from membership_tables import SiloAddress
from silo.membership.clock import Clock
from silo.membership.liveness import LivenessTracker
from silo.membership.local_health import LocalHealth, effective_timeout
from silo.membership.options import SiloOptions
from silo.membership.probing import ProbeOutcome, Prober
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot, SnapshotPublisher
from silo.membership.votes import may_vote

logger = logging.getLogger(__name__)

MAJORITY_SAMPLE = 64
"""Beyond this many fresh silos we do not monitor, ``reaches_majority`` first pings a sample of
this many (our gossip arc heads, whose channels are open, then random ones)."""
MAJORITY_SAMPLE_SHARE = 0.75
"""The share of the sample that must answer for the sample alone to confirm a majority; below
it, a silo whose own event loop lags (``LocalHealth.lagging``) does not vote now (its missing
answers are likely its own slowness, and counting every silo would add N / 2 pings to an
overloaded machine); any other counts every silo as without a sample (a partition: failed
probes of the far side do not gate it). A silo that reaches at most half the cluster (a
minority side, or an even split) passes with probability P(Binomial(64, 0.5) >= 48) < 0.0001 a
check; a majority side of three quarters or more, or a cluster whose answers are only slowed
down (an overloaded machine), passes on 48 answers instead of N / 2. Pinging every silo cost a
1,000-silo cluster about 500 pings per check, mostly on channels opened for one ping: in an
overloaded 500-silo cluster four checks a second opened 700 channels a second, and the load they
added made more probes time out, hence more checks."""
MAJORITY_PINGS_IN_FLIGHT = 32
"""Pings of ``reaches_majority`` in flight at once: enough to settle a majority of hundreds of
silos within one probe timeout, few enough not to flood a large cluster when a cut makes
many silos check at once."""


class MajorityHistory:
    """Tells a heal from a shrinking cluster when the majority rule passes again.

    On an even or minority side a silo measures long silences of the silos across the cut but
    may not vote. When the cut heals, the silos it reaches first restore its majority while its
    monitors of the others, not reconnected yet, are still silent: voting on that silence
    declared live silos Dead (the 2|2 fault test: both silos of one side voted 2.4 s after the
    heal). The rule passing again with *more silos heard* than at any time while it failed is a
    heal; passing again because silos went stale (crashed ones stop heartbeating, so the fresh
    set shrinks) is not, and their silences stay evidence.
    """

    def __init__(self) -> None:
        self._failing = False
        self._most_heard_while_failing = 0

    def observe(self, allowed: bool, heard: int) -> bool:
        """Record one verdict of the rule and how many silos we heard; True on a heal."""
        if not allowed:
            most = self._most_heard_while_failing if self._failing else 0
            self._most_heard_while_failing = max(most, heard)
            self._failing = True
            return False
        healed = self._failing and heard > self._most_heard_while_failing
        self._failing = False
        return healed


def _answered(ping: asyncio.Task[ProbeOutcome]) -> bool:
    return not ping.cancelled() and ping.exception() is None and ping.result() is ProbeOutcome.ANSWERED


ObserveMajority = Callable[[bool, int, int], bool]
"""Feed one verdict of the rule (allowed, silos heard, fresh silos) to the heal detection; True on a heal."""


class MajorityCheck:
    """One silo's check of the majority rule over every fresh Active silo, shared by concurrent callers."""

    def __init__(
        self,
        *,
        local: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        publisher: SnapshotPublisher,
        liveness: LivenessTracker,
        prober: Prober,
        local_health: LocalHealth,
        random: random_module.Random,
        monitors: Mapping[SiloAddress, SiloHealthMonitor],
        arc_heads: Callable[[MembershipSnapshot], frozenset[SiloAddress]],
        observe: ObserveMajority,
    ) -> None:
        self._local = local
        self._options = options
        self._clock = clock
        self._publisher = publisher
        self._liveness = liveness
        self._prober = prober
        self._health = local_health
        self._random = random
        self._monitors = monitors
        self._arc_heads = arc_heads
        self._observe = observe
        self._check: asyncio.Task[bool] | None = None
        self._confirmed_at: float | None = None
        self.pings = 0
        """Pings sent so far (the check's cost; the tests read it)."""

    async def reached(self) -> bool:
        """Whether we reach a majority of the fresh Active silos. Concurrent callers share one
        check; a confirmed majority holds for one probe interval."""
        now = self._clock.monotonic()
        confirmed = self._confirmed_at
        if confirmed is not None and now - confirmed < self._options.effective_probe_interval:
            return True
        if self._check is None or self._check.done():
            self._check = asyncio.ensure_future(self._run())
        return await asyncio.shield(self._check)

    async def _run(self) -> bool:
        snapshot = self._publisher.current
        if snapshot is None:
            return False
        monitors = self._monitors
        fresh = [silo for silo in self._liveness.fresh(snapshot) if silo != self._local]
        unmonitored = [silo for silo in fresh if silo not in monitors]
        reached = sum(1 for silo in fresh if silo in monitors and monitors[silo].heard_recently())
        self._random.shuffle(unmonitored)
        arc_heads = self._arc_heads(snapshot)
        unmonitored.sort(key=lambda silo: silo not in arc_heads)  # stable: each part stays shuffled
        timeout = effective_timeout(self._options.probe_timeout, self._health.score())
        if len(unmonitored) > MAJORITY_SAMPLE:
            sample, unmonitored = unmonitored[:MAJORITY_SAMPLE], unmonitored[MAJORITY_SAMPLE:]
            enough = math.ceil(MAJORITY_SAMPLE_SHARE * len(sample))
            answered = await self._ping_until(sample, timeout, lambda answered: answered >= enough)
            if answered >= enough:
                return self._confirm(reached + answered, len(fresh))
            if self._health.lagging():
                logger.info(
                    "silo %s: %d of a sample of %d silos answered and its own event loop lags: it does not vote now",
                    self._local, answered, len(sample),
                )  # fmt: skip
                return False
            reached += answered  # not clear from the sample: count every silo
        reached += await self._ping_until(
            unmonitored, timeout, lambda answered: may_vote(reached + answered, len(fresh))
        )
        if may_vote(reached, len(fresh)):
            return self._confirm(reached, len(fresh))
        self._observe(False, reached, len(fresh))
        logger.info(
            "silo %s reaches %d of the %d other fresh Active silos, not a majority: it does not vote (minority side?)",
            self._local, reached, len(fresh),
        )  # fmt: skip
        return False

    def _confirm(self, reached: int, fresh: int) -> bool:
        """Remember a confirmed majority (it holds for one probe interval); True, unless it is a
        heal: then no vote now (the monitors' silences were just disregarded)."""
        if self._observe(True, reached, fresh):
            return False
        self._confirmed_at = self._clock.monotonic()
        return True

    async def _ping_until(self, silos: list[SiloAddress], timeout: float, enough: Callable[[int], bool]) -> int:
        """Ping ``silos`` (at most ``MAJORITY_PINGS_IN_FLIGHT`` at once, none once the pings in
        flight would be ``enough`` if answered) until ``enough(answered)``; how many answered."""
        pending = iter(silos)
        in_flight: set[asyncio.Task[ProbeOutcome]] = set()
        answered = 0

        def refill() -> None:
            while len(in_flight) < MAJORITY_PINGS_IN_FLIGHT and not enough(answered + len(in_flight)):
                silo = next(pending, None)
                if silo is None:
                    return
                self.pings += 1
                in_flight.add(asyncio.ensure_future(self._prober.ping(silo, timeout)))

        try:
            refill()
            while not enough(answered) and in_flight:
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    in_flight.discard(task)
                    answered += _answered(task)
                refill()
        finally:
            for task in in_flight:
                task.cancel()
        return answered

    def cancel(self) -> list[asyncio.Task[bool]]:
        """Cancel a check in flight; returns it to be awaited."""
        if self._check is None:
            return []
        self._check.cancel()
        return [self._check]
