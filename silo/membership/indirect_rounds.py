"""Indirect probe rounds: the veto a suspicion must survive before a vote (docs/protocol.md, rule 4).

From a third of the suspicion time on (``ROUND_START``; ``round_start``), a monitor asks up to
``num_indirect_probes`` distinct fresh intermediaries at once to ping its target, each for as long
as it takes our own silence to become a suspicion (``watch_until``, less ``REPORT_LEAD``): a
target that answers any of them within that window vetoes, and our link to it is the problem, not
the target. So a vote along a cut link needs the target silent to the intermediaries too, for the
last two thirds of the silence we measured: a pause or a stall of the target shorter than that (a
GC pause, a starved process, a TCP retransmission) is answered late rather than not at all, and
vetoes. One that fails adds nothing (it did not itself observe a sustained silence). A vote needs
a finished round that started after the silence that counts as evidence began, was not vetoed, and
in which at least one intermediary reported that it could not reach the target (or no intermediary
to ask): a round none of whose intermediaries could be asked (our own calls failing, as on an
overloaded or half-cut host) is no evidence, and another one is asked a probe timeout later.
"""

from __future__ import annotations

import asyncio
import logging
import random as random_module
from collections.abc import Awaitable, Callable, Sequence

from membership_tables import SiloAddress
from silo.membership.observer import MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import MonitoredLink, reached_through

logger = logging.getLogger(__name__)

ROUND_START = 1 / 3
"""The fraction of the suspicion time after which a silent target's indirect round starts.

Early enough that the intermediaries watch the target for the remaining two thirds before our
suspicion (a pause of the target shorter than that cannot make a vote along a cut link), late
enough that a target whose answers are a probe timeout late under loss is not asked about."""

REPORT_LEAD = 1 / 8
"""The fraction of a probe interval before our suspicion at which the intermediaries stop watching.

Their reports are a round trip away, and our suspicion falls on an instant of our probe grid,
when every silo of the machine that probes in our phase sends and answers at once: reports
from a watch that ended at the suspicion came 20-40 ms after it (20 silos on two cores), and
every hang's vote waited for them. Ended an eighth of an interval before (31 ms locally), the
watch still covers all but that sliver of the two thirds of the silence the vote needs."""


def round_start(suspect_after: float, options: SiloOptions) -> float:
    """The silence at which a silent target's round starts: ``ROUND_START`` of ``suspect_after``,
    but never before a probe went unanswered (``SiloOptions.missed_probe_silence``)."""
    return max(suspect_after * ROUND_START, options.missed_probe_silence)


RoundSettled = Callable[[float, bool], Awaitable[None]]
"""Told when a round ends: ``(moment, vetoed)``: for a veto the monotonic time its report came
(the target was alive then, as far as we can tell), otherwise the round's start."""


class IndirectRounds:
    """One target's indirect probe rounds, for its ``SiloHealthMonitor``."""

    def __init__(
        self,
        link: MonitoredLink,
        *,
        intermediaries: Callable[[], Sequence[SiloAddress]],
        random: random_module.Random,
        observer: MembershipObserver,
        settled: RoundSettled,
    ) -> None:
        self._link = link
        self._intermediaries = intermediaries
        self._random = random
        self._observer = observer
        self._settled = settled
        self.started: float | None = None
        """Monotonic start of the latest round (None before the first)."""
        self.task: asyncio.Task[None] | None = None
        self._vetoed = False
        self._reported = False
        """Some intermediary of the latest round reported (reached the target or not)."""

    def needed(self, evidence_start: float, suspect_after: float) -> bool:
        """A round is needed when none covers the silence counted from ``evidence_start``, or the
        last one is a whole suspicion period old (fresh evidence for a repeated vote). Not at the
        suspicion itself: the round started at a third of the silence watches until then, and
        waiting for another one would delay every hang's verdict."""
        if self.task is not None and not self.task.done():
            return False
        if self.started is None or self.started <= evidence_start:
            return True  # no round covers the current silence yet (or the last one vetoed, or a heal)
        since = self._link.clock.monotonic() - self.started
        return since >= suspect_after or (not self._reported and since >= self._link.probe_timeout())

    def allow_vote(self, evidence_start: float) -> bool:
        """No veto from a finished round that covers the silence from ``evidence_start`` (or no one to ask)."""
        if not self._link.options.enable_indirect_probes:
            return True
        if self.started is None:
            return not self._candidates()  # no intermediary exists: our own evidence decides
        in_flight = self.task is not None and not self.task.done() and self.task is not asyncio.current_task()
        return not in_flight and self.started > evidence_start and self._reported and not self._vetoed

    def start(self, watch_until: float) -> None:
        """Ask up to ``num_indirect_probes`` intermediaries, chosen at random, all at once, to ping
        the target until ``REPORT_LEAD`` of a probe interval before the monotonic time
        ``watch_until`` (our suspicion), for at least a probe timeout."""
        candidates = self._candidates()
        if not candidates:
            return
        chosen = self._random.sample(candidates, min(self._link.options.num_indirect_probes, len(candidates)))
        self.started = now = self._link.clock.monotonic()
        self._vetoed = self._reported = False
        lead = REPORT_LEAD * self._link.options.effective_probe_interval
        window = max(self._link.probe_timeout(), watch_until - lead - now)
        logger.debug(
            "silo %s: asking %s to ping %s for up to %.2fs",
            self._link.local, ", ".join(map(str, chosen)), self._link.target, window,
        )  # fmt: skip
        self.task = asyncio.create_task(self._round(chosen, now, window))

    def _candidates(self) -> list[SiloAddress]:
        return [silo for silo in self._intermediaries() if silo not in (self._link.target, self._link.local)]

    async def _round(self, intermediaries: Sequence[SiloAddress], started: float, window: float) -> None:
        """Ends at the first intermediary that reached the target (a veto), or when all have failed."""
        probes = [asyncio.ensure_future(self._probe_through(via, window)) for via in intermediaries]
        try:
            for finished in asyncio.as_completed(probes):
                reached = await finished
                self._reported = self._reported or reached is not None
                if reached:
                    self._vetoed = True
                    break
        finally:
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
        self._observer.indirect_round_completed(self._link.target, len(intermediaries), self._vetoed)
        if self._vetoed:
            logger.info(
                "silo %s: %s answered an intermediary, so it is alive (our link to it may be bad): no vote",
                self._link.local, self._link.target,
            )  # fmt: skip
        await self._settled(self._link.clock.monotonic() if self._vetoed else started, self._vetoed)

    async def _probe_through(self, intermediary: SiloAddress, window: float) -> bool | None:
        return await reached_through(
            self._link.prober, self._link.clock, self._link.local, intermediary, self._link.target, window
        )
