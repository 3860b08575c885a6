"""What a monitor knows of its target: when it last answered, its refusals, and whether that
makes a suspicion (``SiloHealthMonitor`` gathers it; docs/protocol.md, "Failure detector")."""

from __future__ import annotations

import math

from membership_tables import SiloAddress
from silo.membership.clock import Clock
from silo.membership.local_health import LocalHealth
from silo.membership.options import SiloOptions

REFUSALS_TO_SUSPECT = 2
"""Consecutive refused probes that make a suspicion. A refusal cannot come from loss or a
partition (those are silence): only from a closed port or another incarnation. Two, so one
refusal while a restarted process binds is not enough (the second comes from a recheck a
quarter interval later, ``REFUSAL_RECHECK``)."""


class RefusalSource:
    """Through what a monitor met a refusal (``TargetEvidence.refused_by``): a vote on refusals
    declares a death without the majority rule, so its log line says what the refusals were."""

    PING = "refusal of a ping"
    """A ping on the usual connection: gRPC's "connection refused", or another incarnation answered."""
    RECHECK = "refusal of its recheck"
    """The recheck of a first refusal: a ping on a new connection (a bare connect while our loop lags)."""
    CONNECT = "refusal of a bare connect"
    """A bare TCP connect that checked the path to a silent target (``tcp_connect``)."""


class TargetEvidence:
    """The evidence about one target: the silence since its last answer (or veto), its refusals in
    a row, and the suspicion they make under our local health."""

    def __init__(self, target: SiloAddress, options: SiloOptions, clock: Clock, local_health: LocalHealth) -> None:
        self.target = target
        self._options = options
        self._clock = clock
        self._health = local_health
        self._evidence_from = -math.inf
        """Silence before this monotonic time is not evidence for a vote (a heal)."""
        self.last_heard = clock.monotonic()
        """Monotonic time of the last answer (or veto); the monitor's start counts as one."""
        self.refusals = 0
        self.refused_by: list[tuple[str, float]] = []
        """How each of ``refusals`` came (``RefusalSource``) and when (monotonic), oldest first."""
        self.answered = False
        """True once the target answered us (or an intermediary) at least once."""

    def suspect_after(self) -> float:
        """Seconds of silence before a suspicion, lengthened when we are degraded (Lifeguard)."""
        return self._options.detection_time * (1 + self._health.score())

    def count_refusal(self, source: str) -> None:
        """One more refusal in a row, which came through ``source`` (a ``RefusalSource``)."""
        self.refusals += 1
        self.refused_by.append((source, self._clock.monotonic()))
        del self.refused_by[:-REFUSALS_TO_SUSPECT]

    def refusal_evidence(self) -> str:
        """The refusals in a row, for a log line: through what and how long ago, latest last."""
        now = self._clock.monotonic()
        return ", ".join(f"{source} {now - when:.2f}s ago" for source, when in self.refused_by)

    def silence(self) -> float:
        return self._clock.monotonic() - self.last_heard

    def proven_gone(self) -> bool:
        """``REFUSALS_TO_SUSPECT`` refusals in a row: the target's process is gone, whatever cut
        or stall we are in (no cut, loss or slow loop makes a refusal)."""
        return self.refusals >= REFUSALS_TO_SUSPECT

    def heard_within(self, seconds: float) -> bool:
        """The target answered, the last time less than ``seconds`` ago, and is not refusing."""
        return self.answered and self.silence() < seconds and not self.proven_gone()

    def heard_recently(self) -> bool:
        """The target answered within half the suspicion time: it counts as heard for the majority rule.

        Half, not the whole: when a partition cuts several silos at once, their silences cross the
        suspicion threshold up to a probe interval apart, and the first one to cross must not find
        the others still counted as heard (found by the SPIN model). A monitor that never got an
        answer does not count either: on the minority side, monitors created after the split must
        not make the side look larger."""
        return self.heard_within(self.suspect_after() / 2)

    def suspected(self) -> bool:
        return self._suspected_since(self.last_heard)

    def disregard_silence_before(self, moment: float) -> None:
        """Our majority came back at ``moment`` because a cut healed: the silence measured until
        then was the cut's. A vote needs a suspicion time of silence after it, and a new round."""
        self._evidence_from = max(self._evidence_from, moment)

    def _evidence_start(self) -> float:
        """Where the silence that counts as evidence for a vote starts."""
        return max(self.last_heard, self._evidence_from)

    def _suspected_for_vote(self) -> bool:
        """``suspected``, counting only the silence since ``_evidence_start``."""
        return self._suspected_since(self._evidence_start())

    def _suspected_since(self, silent_from: float) -> bool:
        """Refusing, or silent since ``silent_from`` for at least ``suspect_after``."""
        silence = self._clock.monotonic() - silent_from
        return self.proven_gone() or silence >= self.suspect_after()

    def _alive_at(self, moment: float, *, vetoed: bool = False) -> None:
        """The target was alive at ``moment`` (it answered a probe sent then, or an intermediary
        reached it: ``vetoed``): it counts as heard, and the silence since our last answer was the
        network's, which local health remembers (``LocalHealth.record_silence``, ``record_veto``).
        Not before the first answer: the time a new monitor waits for its connection is no
        silence of the network."""
        if self.answered and moment > self.last_heard:
            silence = moment - self.last_heard
            if vetoed:
                self._health.record_veto(self.target, silence)
            else:
                self._health.record_silence(silence)
        self.last_heard = max(self.last_heard, moment)
        self.refusals = 0
        self.refused_by.clear()
        self.answered = True
