"""Local health: how much this silo should distrust its own judgement (Lifeguard).

A small score, 0 = healthy, capped at ``MAX_SCORE``. A silo whose event loop lags, whose
probes fail to everyone it probes, whose probes time out to most of its targets now and then
(a lossy network), or that others suspect is more likely to misjudge than its targets are
to be dead. The score lengthens this silo's probe timeouts and the silence it needs before
suspecting anyone (``x (1 + score)``), and it reports the score when asked to be an
intermediary.

Loss is judged by the *typical* target: the lower median, over the targets, of the fraction
of their recent probes that timed out. A dead or hung target times out every probe but is one
target, so it does not raise the median; loss on the network (or on our own link) shows on
most of them.

Loss over TCP mostly shows as **silences**, not as timed-out fractions: gRPC's connection
retransmits a lost segment after 200 ms, 400 ms, 800 ms..., so at 20-30% packet loss most probes
are answered and the lower median stays near 0, but now and then one connection stalls for
several seconds (a fault test measured silences of 3-5 s between answers of live silos at 20%,
up to 12 s at 30%, while the score stayed 0-2 and the suspicion threshold 1.5-4.5 s). So the
score also remembers the longest **completed silence** of the recent past: a silence that
ended with an answer (or a veto), proof that a live silo can be that quiet on this network
now. The silence needed before a suspicion is kept at least ``SILENCE_MARGIN`` times it. A dead
silo's silence never completes, so it raises nothing; on a healthy network live silos answer
within a probe interval and the score stays 0.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable

from membership_tables import SiloAddress
from silo.membership.clock import Clock, Periodic
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot

MAX_SCORE = 8
MAX_LAG_PENALTY = 4
MAX_SUSPICION_PENALTY = 2
ALL_PROBES_FAILING_PENALTY = 2
RECENT_PROBES = 16
"""Probe results kept per target for the loss estimate (4 s of probes on the local preset)."""
SCORE_REUSE_FRACTION = 0.25
"""A score is reused for this fraction of a probe interval while its inputs (probe results, lag,
the snapshot) are unchanged: only the expiry of votes against us moves it then, and a vote's
expiry seen a quarter of an interval late changes nothing. Each probe asks for the score
several times (its timeout, its suspicion threshold, the answer to a peer's ping)."""
LOSS_PENALTIES = ((0.2, 3), (0.1, 2), (0.05, 1))
"""(fraction of a typical target's recent probes that timed out, points): 5% costs one point
(the silence needed doubles), 20% three (it quadruples)."""


SILENCE_MARGIN = 2.0
"""The silence needed before a suspicion is at least this many times the longest silence of a
live silo remembered (``silence_penalty``). TCP's doubling retransmission timer makes long
silences rare but heavy-tailed: each doubling of the silence is about as likely again as one more
lost retransmission (a third as likely at 20% loss each way)."""
SILENCE_MEMORY = 10
"""Detection times (``SiloOptions.detection_time``) a completed silence is remembered: 15 s on the
local preset, 150 s in production; longer than the vote expiry (10 s, 120 s), so the voters of one
quorum judge with thresholds raised by the same recent past, and short enough that an overload
(a join storm's timed-out probes) no longer slows the detection of a crash a few minutes later."""


def silence_penalty(longest: float, detection_time: float) -> int:
    """Points that make ``detection_time * (1 + points)`` at least ``SILENCE_MARGIN * longest``."""
    return max(0, math.ceil(SILENCE_MARGIN * longest / detection_time) - 1)


def lag_penalty(lag: float, probe_timeout: float) -> int:
    """One point per quarter of a probe timeout that the event loop was late, up to 4."""
    return min(MAX_LAG_PENALTY, max(0, int(lag / (probe_timeout / 4))))


def probe_penalty(last_results: Callable[[], list[bool]]) -> int:
    """Points when this silo's latest probes failed to every one of at least two targets."""
    results = last_results()
    return ALL_PROBES_FAILING_PENALTY if len(results) >= 2 and not any(results) else 0


def loss_penalty(recent: Iterable[Iterable[bool]]) -> int:
    """Points for a lossy network: by the lower median over targets of their timed-out fraction."""
    fractions = []
    for results in recent:
        outcomes = list(results)
        if outcomes:
            fractions.append(outcomes.count(False) / len(outcomes))
    if len(fractions) < 2:
        return 0  # one target cannot tell our network from its failure
    typical = statistics.median_low(fractions)
    return next((points for threshold, points in LOSS_PENALTIES if typical >= threshold), 0)


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
        self._probe_results: dict[SiloAddress, deque[bool]] = {}
        self._silences: deque[tuple[float, float]] = deque()
        """(monotonic time, seconds) of the completed silences that earn points, oldest first."""
        self._vetoed: set[SiloAddress] = set()
        """Targets whose current silence (no answer to our own probes since) already had a veto."""
        self._silence_memory = SILENCE_MEMORY * options.detection_time
        self._lag_period = options.probe_timeout / 2
        self._last_round = 0.0
        self._meter: Periodic | None = None
        self._changes = 0
        """Bumped by every change of the score's inputs, so a cached score knows it is outdated."""
        self._cached: tuple[int, MembershipSnapshot, float, int] | None = None
        """(changes, snapshot, monotonic time, score) of the last computed score."""
        self._reuse_for = options.effective_probe_interval * SCORE_REUSE_FRACTION

    def record_probe(self, target: SiloAddress, answered: bool) -> None:
        """Record one probe's result; the score is outdated only if this result can move it.

        One more answer from a target whose recent probes all answered moves nothing (its last
        result and its timed-out fraction stay the same), and that is nearly every probe of a
        healthy cluster: the cached score then stays valid. Recomputing it after every answer
        was 8% of py-spy's samples of an idle silo's main thread (20 silos, local preset), though
        the idle cluster's CPU did not move measurably without it (0.65-0.73 cores either way)."""
        if answered:
            self._vetoed.discard(target)  # our link to it works: its next veto ends a new silence
        results = self._probe_results.setdefault(target, deque(maxlen=RECENT_PROBES))
        moves_nothing = answered and bool(results) and False not in results
        results.append(answered)
        if not moves_nothing:
            self._changes += 1

    def record_silence(self, silence: float) -> None:
        """A live target was silent for ``silence`` seconds before its latest answer (or a veto).

        Only silences that earn a point are kept (none on a healthy network)."""
        if silence_penalty(silence, self._options.detection_time) == 0:
            return
        self._silences.append((self._clock.monotonic(), silence))
        self._changes += 1

    def record_veto(self, target: SiloAddress, silence: float) -> None:
        """An intermediary reached ``target`` after our own link to it had been silent ``silence``
        seconds: a completed silence (``record_silence``), but only for the first veto since
        ``target`` last answered our own probes.

        A round starts at half the silence needed, so every veto ends a silence of at least half
        of it, and ``SILENCE_MARGIN`` (2) turns that into one more point: counting each veto of
        a link that stays cut (a non-transitive partition) raised the score by a point a round,
        to ``MAX_SCORE`` within a minute, and with it the silence this silo needs before it
        suspects *anyone* (nine floors). The first veto proves how long a live link can stall
        here; the later ones only prove that this one link is still down, which the vetoes
        themselves already handle."""
        if target in self._vetoed:
            return
        self._vetoed.add(target)
        self.record_silence(silence)

    def _longest_silence(self) -> float:
        """The longest silence remembered, once those older than the memory are dropped."""
        now = self._clock.monotonic()
        while self._silences and now - self._silences[0][0] >= self._silence_memory:
            self._silences.popleft()
        return max((silence for _, silence in self._silences), default=0.0)

    def forget(self, target: SiloAddress) -> None:
        """We stopped probing ``target``; its last result no longer says anything about us."""
        self._probe_results.pop(target, None)
        self._vetoed.discard(target)
        self._changes += 1

    def record_loop_lag(self, lag: float) -> None:
        timeout = self._options.probe_timeout
        if lag_penalty(lag, timeout) != lag_penalty(self._lag, timeout):
            self._changes += 1
        self._lag = lag

    def lagging(self) -> bool:
        """Whether our own event loop lags enough to count in the score (we are overloaded)."""
        return lag_penalty(self._lag, self._options.probe_timeout) > 0

    def score(self) -> int:
        snapshot, now = self._snapshot(), self._clock.monotonic()
        cached = self._cached
        if (
            cached is not None
            and cached[0] == self._changes
            and cached[1] is snapshot
            and now - cached[2] < self._reuse_for
        ):
            return cached[3]
        score = self._compute(snapshot)
        self._cached = (self._changes, snapshot, now, score)
        return score

    def _compute(self, snapshot: MembershipSnapshot) -> int:
        suspicion = min(
            MAX_SUSPICION_PENALTY, snapshot.fresh_votes_against(self._address, self._clock.now(), self._options)
        )
        probes = probe_penalty(lambda: [results[-1] for results in self._probe_results.values() if results])
        loss = loss_penalty(self._probe_results.values())
        lag = lag_penalty(self._lag, self._options.probe_timeout)
        silence = silence_penalty(self._longest_silence(), self._options.detection_time)
        return min(MAX_SCORE, max(lag + probes + loss + suspicion, silence))

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
