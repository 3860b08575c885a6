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
- **Indirect probes are a veto of silence, never a vote.** From a third of the suspicion time on (and a
  probe missed: ``SiloOptions.missed_probe_silence``), up to ``num_indirect_probes`` distinct
  fresh intermediaries ping the target in parallel, until our silence would be a suspicion;
  any that reaches it cancels the suspicion (our link is the problem, not the target), from
  the moment its report came. An intermediary that fails says nothing: it did not observe a
  sustained silence itself.
- **A short cut is not silence.** While the target is silent for a probe timeout (and a probe
  missed), each probe also goes on a new connection (our usual one may still be backing off
  its TCP retries after a cut healed), and a bare TCP connect checks the path (the connect
  alone while our own loop lags; a refused one counts as a refusal). Before a vote on
  silence, if the path was seen down, a last connect decides: connected means the cut
  healed, and the target gets one ping on a new connection, whose answer ends the silence
  (docs/protocol.md, "Short cuts").
- **Our own pauses are not the target's silence.** When our process was not running (a
  GC pause, SIGSTOP, a starved CPU) for longer than two probe intervals, the time beyond one
  interval is added to ``last_heard``: we sent no probes then, so it is no evidence.
- **A vote** needs a suspicion, a finished indirect round that started after the target's
  last answer, was not vetoed and had a report from an intermediary (unless none exists), and
  the majority rule of the cluster health monitor (``may_vote``); a vote on refusals needs
  neither (no intermediary reaches an incarnation refusals prove gone, and no cut refuses;
  on an overloaded machine waiting for the rounds' reports held crashes' votes for minutes;
  ``_round_wanted``, ``_allowed_to_vote``). It is repeated every
  ``suspect_after`` while the silence lasts (on refusals at least every half
  ``death_vote_expiration``: ``_vote_again_after``), so a vote that expired or a quorum that
  shrank is completed.
- **A heal is not evidence.** When the cluster health monitor sees our majority come back
  because more silos answer (``disregard_silence_before``), silence before then does not count
  towards a vote: the target must stay silent a whole suspicion time after the heal, and an
  indirect round must start after it.
"""

from __future__ import annotations

import asyncio
import logging
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
from silo.membership.target_evidence import RefusalSource, TargetEvidence
from silo.membership.votes import VoteOutcome

logger = logging.getLogger(__name__)


class RequestVote(Protocol):
    """Vote against a target (the table manager's ``try_vote``); ``refused``: on the evidence of
    ``REFUSALS_TO_SUSPECT`` refusals, which prove its process gone; ``still_holds``: whether that
    evidence still calls for the vote (asked again until the vote is decided)."""

    def __call__(
        self, target: SiloAddress, *, refused: bool, still_holds: Callable[[], bool]
    ) -> Awaitable[VoteOutcome]: ...


class SiloHealthMonitor(TargetEvidence):
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
        super().__init__(target, options, clock, local_health)
        self._local = local
        self._prober = prober
        self._may_vote = may_vote
        self._vote = vote
        self._vote_delay = vote_delay
        self._vote_hold = vote_hold
        self._observer = observer
        self._was_suspected = False
        link = MonitoredLink(target, local, options, clock, prober, local_health)
        self._rounds = IndirectRounds(
            link, intermediaries=intermediaries, random=random, observer=observer, settled=self._round_settled
        )
        self._last_vote: float | None = None
        self._last_denied_log: float | None = None
        self._voting: asyncio.Task[None] | None = None
        self._new_connections = NewConnectionProbes(
            link, answered=self._answered_on_new_connection, refused=self._refused_on_connect
        )
        self._probes = BackgroundTasks()
        self._loop: asyncio.Task[None] | None = None
        self.votes_cast = 0
        self._pauses = PauseWatch(clock, options.effective_probe_interval)
        self.phase = 0.0
        """Fraction of the probe interval our probes leave after the grid's instants (``RingTargets.phase``)."""

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
            self._count_refusal(RefusalSource.PING)
        self._note_suspicion()
        await self.evaluate()

    def _count_refusal(self, source: str) -> None:
        """One more refusal in a row; a first one is checked again (``_confirm_refusal``)."""
        self.count_refusal(source)
        if self.refusals == 1:
            self._probes.spawn(self._confirm_refusal())

    async def _refused_on_connect(self) -> None:
        """A bare connect to the target was refused (``NewConnectionProbes.check_path``): nothing
        listens at its endpoint, the evidence a refused ping gives."""
        self._discount_pause()
        self._count_refusal(RefusalSource.CONNECT)
        self._note_suspicion()
        await self.evaluate()

    async def _confirm_refusal(self) -> None:
        """A first refusal is checked again on a new connection (``NewConnectionProbes.recheck``)."""
        sent, outcome = await self._new_connections.recheck()
        if outcome is ProbeOutcome.ANSWERED:
            self._answered_on_new_connection(sent)
        elif outcome is ProbeOutcome.REFUSED and self.refusals > 0:  # a timeout says nothing
            self._discount_pause()
            self._count_refusal(RefusalSource.RECHECK)
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
        early = self.silence() >= round_start(self.suspect_after(), self._options)
        if not (early or self.suspected()):
            return
        if self._round_wanted():
            self._rounds.start(watch_until=self._evidence_start() + self.suspect_after())
        now = self._clock.monotonic()
        held_by = self._vote_held_by(now)
        if held_by is None:
            self._last_vote = now
            self._voting = asyncio.create_task(self._cast_vote())
        elif self.proven_gone():
            logger.debug("silo %s: %s refuses us; no vote yet (%s)", self._local, self.target, held_by)

    def _vote_held_by(self, now: float) -> str | None:
        """What keeps a vote from being cast now (None: nothing)."""
        if self._voting is not None and not self._voting.done():
            return "a vote is under way"
        if self._last_vote is not None and now - self._last_vote < (again := self._vote_again_after()):
            return f"voted {now - self._last_vote:.1f}s ago, again after {again:.1f}s"
        return self._evidence_lacks(now)

    def _vote_again_after(self) -> float:
        """How long after our vote it is cast again while the evidence lasts: a suspicion time; on
        refusals at most half a vote's life (``death_vote_expiration``), so that ours is still in
        the row when another monitor's comes. Monitors of a crash on an overloaded machine (whose
        suspicion time local health had stretched ninefold) voted minutes apart, and each vote
        found the other's expired."""
        if self.proven_gone():
            return min(self.suspect_after(), self._options.death_vote_expiration / 2)
        return self.suspect_after()

    def _evidence_lacks(self, now: float) -> str | None:
        """What the evidence lacks for a vote: a suspicion, a round that covers it (refusals need
        none: ``_round_wanted``), the majority rule's leave (None: nothing)."""
        if not self._suspected_for_vote():
            return "not suspected"
        if not (self.proven_gone() or self._rounds.allow_vote(self._evidence_start())):
            return "waiting for an indirect round"
        return None if self._allowed_to_vote(now) else "the majority rule"

    def _round_wanted(self) -> bool:
        """A round is due for our silence. Never for refusals: a round vetoes silence (our link may
        be bad), and no intermediary can reach the incarnation refusals prove gone (docs/protocol.md)."""
        return (
            self._options.enable_indirect_probes
            and not self.proven_gone()
            and self._rounds.needed(self._evidence_start(), self.suspect_after())
        )

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
            if (lacks := self._evidence_lacks(self._clock.monotonic())) is not None:
                logger.debug("silo %s: no vote against %s after all: %s", self._local, self.target, lacks)
                self._last_vote = None  # the evidence changed while we held the vote: judge afresh
                return
        if not self.proven_gone():  # silence, maybe a cut's that just healed
            await self._new_connections.last_check(self._evidence_start())
            if not self._suspected_for_vote():
                self._last_vote = None
                return
        self.votes_cast += 1
        refused = self.proven_gone()
        if refused:  # a death without the majority rule: say what proved it
            logger.warning(
                "silo %s votes against %s on refusals (%s): silent for %.2fs",
                self._local, self.target, self.refusal_evidence(), self.silence(),
            )  # fmt: skip
        else:
            logger.info(
                "silo %s votes against %s: silent for %.2fs, %d refusals (it suspects after %.2fs; local health %d)",
                self._local, self.target, self.silence(), self.refusals, self.suspect_after(), self._health.score(),
            )  # fmt: skip
        outcome = await self._vote(self.target, refused=refused, still_holds=self._suspected_for_vote)
        if outcome is VoteOutcome.WITHDRAWN:
            self._last_vote = None  # it answered meanwhile: a new silence is judged afresh
        self._observer.vote_completed(self.target, outcome)
        logger.debug("silo %s: vote against %s: %s", self._local, self.target, outcome.value)
