"""The silo health monitor: watches one target and votes against it on its own evidence.

One instance per probed silo. The rules (docs/protocol.md, "Failure detector"):

- **Probes at a fixed rate.** A ping leaves every ``probe_interval`` seconds, scheduled from
  the previous send, each with its own timeout (``probe_timeout``, lengthened by our local
  health): probes overlap, so a hung target is noticed at the same pace as a healthy one is
  confirmed, and one slow answer does not delay the next probe.
- **Three outcomes.** *Answered* resets everything. *Refused* (nothing listens there, or
  another incarnation answered) counts towards ``REFUSALS_TO_SUSPECT`` consecutive refusals:
  strong evidence of a crash. *Timed out* says nothing by itself; what counts is the
  **silence**: seconds since the last answer.
- **Suspicion**: silence of ``suspect_after`` (``num_missed_probes_limit * probe_timeout``
  times our local-health multiplier, Lifeguard), or repeated refusals. Every silence that
  ends with an answer or a veto is reported to local health, which keeps ``suspect_after`` at
  least twice the longest such silence of the recent past (a lossy network's TCP stalls); of
  the vetoes of one unbroken silence only the first counts (``LocalHealth.record_veto``).
- **Indirect probes are a veto, never a vote.** From a third of the suspicion time on (and a
  probe missed: ``SiloOptions.missed_probe_silence``), up to ``num_indirect_probes`` distinct
  fresh intermediaries ping the target in parallel, until our silence would be a suspicion;
  any that reaches it cancels the suspicion (our link is the problem, not the target), from
  the moment its report came. An intermediary that fails says nothing: it did not observe a
  sustained silence itself.
- **A short cut is not silence.** While the target is silent for a probe timeout (and a probe
  missed), each probe also goes on a new connection (our usual one may still be backing off
  its TCP retries after a cut healed), and a bare TCP connect checks the path. Before a vote
  on silence, if the path was seen down, a last connect decides: connected means the cut
  healed, and the target gets one ping on a new connection, whose answer ends the silence
  (docs/protocol.md, "Short cuts").
- **Our own pauses are not the target's silence.** When our process was not running (a
  GC pause, SIGSTOP, a starved CPU) for longer than two probe intervals, the time beyond one
  interval is added to ``last_heard``: we sent no probes then, so it is no evidence.
- **A vote** needs a suspicion, a finished indirect round that started after the target's
  last answer, was not vetoed and had a report from an intermediary (unless none exists), and
  the majority rule of the cluster health monitor (``may_vote``). It is repeated every
  ``suspect_after`` while the silence lasts, so a vote that expired or a quorum that shrank is
  completed.
- **A heal is not evidence.** When the cluster health monitor sees our majority come back
  because more silos answer (``disregard_silence_before``), silence before then does not count
  towards a vote: the target must stay silent a whole suspicion time after the heal, and an
  indirect round must start after it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random as random_module
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from membership_tables import SiloAddress
from silo.membership.background import BackgroundTasks
from silo.membership.clock import Clock, PauseWatch, until_next_probe, with_timeout
from silo.membership.indirect_rounds import IndirectRounds, round_start
from silo.membership.local_health import LocalHealth, effective_timeout
from silo.membership.new_connections import NewConnectionProbes
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import MonitoredLink, ProbeOutcome, Prober
from silo.membership.votes import VoteOutcome

logger = logging.getLogger(__name__)

REFUSALS_TO_SUSPECT = 2
"""Consecutive refused probes that make a suspicion. A refusal cannot come from loss or a
partition (those are silence): only from a closed port or another incarnation. Two, so one
refusal while a restarted process binds is not enough (the second comes from a recheck a
quarter interval later, ``REFUSAL_RECHECK``)."""


class RequestVote(Protocol):
    """Vote against a target (the table manager's ``try_vote``); ``refused``: on the evidence of
    ``REFUSALS_TO_SUSPECT`` refusals, which prove its process gone."""

    def __call__(self, target: SiloAddress, *, refused: bool) -> Awaitable[VoteOutcome]: ...


class SiloHealthMonitor:
    """Probes ``target`` at a fixed rate, asks for vetoes, and votes on sustained silence."""

    def __init__(
        self,
        *,
        target: SiloAddress,
        local: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        prober: Prober,
        local_health: LocalHealth,
        intermediaries: Callable[[], Sequence[SiloAddress]],
        may_vote: Callable[[], bool],
        vote: RequestVote,
        random: random_module.Random,
        observer: MembershipObserver = NULL_OBSERVER,
        vote_delay: Callable[[], float] = lambda: 0.0,
        vote_hold: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.target = target
        self._local = local
        self._options = options
        self._clock = clock
        self._prober = prober
        self._health = local_health
        self._may_vote = may_vote
        self._vote = vote
        self._vote_delay = vote_delay
        self._vote_hold = vote_hold
        self._observer = observer
        self._was_suspected = False
        self._evidence_from = -math.inf
        """Silence before this monotonic time is not evidence for a vote (a heal: see above)."""
        self.last_heard = clock.monotonic()
        """Monotonic time of the last answer (or veto); the monitor's start counts as one."""
        self.refusals = 0
        self.answered = False
        """True once the target answered us (or an intermediary) at least once."""
        link = MonitoredLink(target, local, options, clock, prober, local_health)
        self._rounds = IndirectRounds(
            link, intermediaries=intermediaries, random=random, observer=observer, settled=self._round_settled
        )
        self._last_vote: float | None = None
        self._last_denied_log: float | None = None
        self._voting: asyncio.Task[None] | None = None
        self._new_connections = NewConnectionProbes(link, answered=self._answered_on_new_connection)
        self._probes = BackgroundTasks()
        self._loop: asyncio.Task[None] | None = None
        self.votes_cast = 0
        self._pauses = PauseWatch(clock, options.effective_probe_interval)
        self.phase = 0.0
        """Fraction of the probe interval our probes leave after the grid's instants (``RingTargets.phase``)."""

    # --- what others read -----------------------------------------------------------

    def suspect_after(self) -> float:
        """Seconds of silence before a suspicion, lengthened when we are degraded (Lifeguard)."""
        return self._options.detection_time * (1 + self._health.score())

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

    # --- lifecycle ------------------------------------------------------------------

    def start(self, first_probe_after: float = 0.0) -> None:
        """Start probing; the first probe ``first_probe_after`` seconds from now (the silence, and
        our own activity, are counted from then)."""
        self.last_heard = self._clock.monotonic()
        self._pauses.awake()
        self._loop = asyncio.create_task(self._run(first_probe_after))

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every task of this monitor now: its tasks, for the caller to await. Nothing is
        awaited first: a stop cancelled while it waited once left probes that voted later."""
        tasks = [task for task in (self._loop, self._rounds.task, self._voting) if task is not None]
        for task in tasks:
            task.cancel()
        return tasks + self._probes.cancel()

    async def stop(self) -> None:
        await asyncio.gather(*self.cancel(), return_exceptions=True)

    async def _run(self, first_probe_after: float) -> None:
        if first_probe_after > 0:
            await self._clock.sleep(first_probe_after)
            self.last_heard = self._clock.monotonic()
        self._pauses.awake()
        while True:
            self._discount_pause()
            self._probes.spawn(self.probe_once())
            if self._new_connections.wanted(self.silence(), self.refusals):
                self._probes.spawn(self._new_connections.probe_again(self.last_heard))
            await self._until_next_probe()

    async def _until_next_probe(self) -> None:
        """Sleep until the next probe; evaluate on the way when the silence reaches a round's start
        (``round_start``), which a veto's moment takes off the grid our probes time out on."""
        now = self._clock.monotonic()
        wake = now + until_next_probe(now, self._options, self.phase)
        round_at = max(now, self.last_heard + round_start(self.suspect_after(), self._options))
        if round_at < wake:
            await self._clock.sleep(round_at - now)
            await self.evaluate()
        await self._clock.sleep(max(0.0, wake - self._clock.monotonic()))

    # --- one probe and its consequences ----------------------------------------------

    async def probe_once(self) -> None:
        """Send one ping, record its outcome, then act on the evidence."""
        sent = self._clock.monotonic()
        outcome = await self._ping()
        self._discount_pause()
        self._observer.probe_completed(self.target, outcome, self._clock.monotonic() - sent)
        self._health.record_probe(self.target, outcome is ProbeOutcome.ANSWERED)
        if outcome is ProbeOutcome.ANSWERED:
            self._alive_at(sent)
        elif outcome is ProbeOutcome.REFUSED:
            self.refusals += 1
            if self.refusals == 1:
                self._probes.spawn(self._confirm_refusal())
        self._note_suspicion()
        await self.evaluate()

    async def _confirm_refusal(self) -> None:
        """A first refusal is checked again on a new connection (``NewConnectionProbes.recheck``)."""
        sent, outcome = await self._new_connections.recheck()
        if outcome is ProbeOutcome.ANSWERED:
            self._answered_on_new_connection(sent)
        elif outcome is ProbeOutcome.REFUSED and self.refusals > 0:  # a timeout says nothing
            self._discount_pause()
            self.refusals += 1
            self._note_suspicion()
            await self.evaluate()

    def _note_suspicion(self) -> None:
        if self.suspected() and not self._was_suspected:
            self._observer.suspicion_started(self.target)
        self._was_suspected = self.suspected()

    async def _round_settled(self, moment: float, vetoed: bool) -> None:
        """An indirect round ended: a veto counts as an answer at ``moment``, when its report came."""
        self._discount_pause()
        if not vetoed:
            return await self.evaluate()
        self._alive_at(moment, vetoed=True)

    def _answered_on_new_connection(self, sent: float) -> None:
        self._discount_pause()
        self._alive_at(sent)
        self._was_suspected = self.suspected()

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
        self.answered = True

    async def _ping(self) -> ProbeOutcome:
        timeout = effective_timeout(self._options.probe_timeout, self._health.score())
        try:
            return await with_timeout(self._clock, self._prober.ping(self.target, timeout), timeout)
        except TimeoutError:
            return ProbeOutcome.TIMED_OUT
        except Exception as exc:
            logger.debug("silo %s: ping of %s failed: %r", self._local, self.target, exc)
            return ProbeOutcome.TIMED_OUT

    @property
    def paused_seconds(self) -> float:
        """Time not counted as silence because we were paused ourselves."""
        return self._pauses.paused_seconds

    def _discount_pause(self) -> None:
        """Move ``last_heard`` forward by the part of a gap in our own activity that was a pause
        (``PauseWatch``): no probe left then, and the answers that came could not be read.
        Whichever callback runs first after the pause (the loop, a timed-out probe, a round)
        notices it, before any evaluation, so a resumed observer never votes on its own stall."""
        if (blind := self._pauses.blind()) > 0:
            self.last_heard = min(self._clock.monotonic(), self.last_heard + blind)
            logger.info(
                "silo %s: not running for %.2fs (paused or starved); that time is not counted as silence of %s",
                self._local, blind, self.target,
            )  # fmt: skip

    async def evaluate(self) -> None:
        """Start an indirect round or a vote if the evidence calls for one."""
        self._discount_pause()
        early = self.silence() >= round_start(self.suspect_after(), self._options) or self.refusals > 0
        if not (early or self.suspected()):
            return
        if self._options.enable_indirect_probes and self._rounds.needed(self._evidence_start(), self.suspect_after()):
            self._rounds.start(watch_until=self._evidence_start() + self.suspect_after())
        if not self._suspected_for_vote() or not self._rounds.allow_vote(self._evidence_start()):
            return
        if self._voting is not None and not self._voting.done():
            return
        now = self._clock.monotonic()
        if self._last_vote is not None and now - self._last_vote < self.suspect_after():
            return
        if not self._allowed_to_vote(now):
            return
        self._last_vote = now
        self._voting = asyncio.create_task(self._cast_vote())

    def _allowed_to_vote(self, now: float) -> bool:
        """The majority rule allows a vote, and asking it found no heal; or the evidence is refusals,
        which no cut makes (``proven_gone``, ``SiloRoles.vote_against``)."""
        if not self.proven_gone() and not self._may_vote():
            if self._last_denied_log is None or now - self._last_denied_log >= self.suspect_after():
                self._last_denied_log = now
                logger.info(
                    "silo %s suspects %s but hears too few of the silos it monitors to vote (minority side?)",
                    self._local, self.target,
                )  # fmt: skip
            return False
        return self._suspected_for_vote()  # asking may have found a heal: the silence so far no longer counts

    async def _cast_vote(self) -> None:
        delay = self._vote_delay()
        if delay > 0:
            await self._clock.sleep(delay)
            if (more := self._vote_hold()) > 0:
                logger.debug(
                    "silo %s: others are voting against %s; holding ours %.2fs more", self._local, self.target, more
                )
                await self._clock.sleep(more)
            self._discount_pause()
            if not (
                self._suspected_for_vote()
                and self._rounds.allow_vote(self._evidence_start())
                and self._allowed_to_vote(self._clock.monotonic())
            ):
                self._last_vote = None  # the evidence changed while we held the vote: judge afresh
                return
        if not self.proven_gone():  # silence, maybe a cut's that just healed
            await self._new_connections.last_check(self._evidence_start())
            if not self._suspected_for_vote():
                self._last_vote = None
                return
        self.votes_cast += 1
        logger.info(
            "silo %s votes against %s: silent for %.2fs, %d refusals (it suspects after %.2fs; local health %d)",
            self._local, self.target, self.silence(), self.refusals, self.suspect_after(), self._health.score(),
        )  # fmt: skip
        outcome = await self._vote(self.target, refused=self.proven_gone())
        self._observer.vote_completed(self.target, outcome)
        logger.debug("silo %s: vote against %s: %s", self._local, self.target, outcome.value)
