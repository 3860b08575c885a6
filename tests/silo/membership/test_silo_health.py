"""The silo health monitor on a fake clock: rate, silence, refusals, vetoes, the majority rule."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from membership_tables import SiloAddress
from silo.membership.clock import FakeClock
from silo.membership.indirect_rounds import REPORT_LEAD, ROUND_START
from silo.membership.local_health import SILENCE_MEMORY, LocalHealth
from silo.membership.new_connections import REFUSAL_RECHECK
from silo.membership.options import SiloOptions
from silo.membership.probing import IndirectProbeResult, ProbeOutcome
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.target_evidence import REFUSALS_TO_SUSPECT, RefusalSource
from silo.membership.votes import VoteOutcome
from tests.silo.harness import T0, FunctionProber, address, async_test, row, stop_cancelled_at_its_first_wait, view

ME, TARGET, HELPER, OTHER = address(1), address(2), address(3), address(4)
OPTIONS = SiloOptions.local()  # probes every 0.25 s, 0.5 s timeout, 1.5 s of silence to suspect
FLOOR = OPTIONS.detection_time


def result(succeeded: bool, health_score: int = 0) -> IndirectProbeResult:
    return IndirectProbeResult(succeeded=succeeded, intermediary_health_score=health_score, response_time=0.1)


@dataclass
class Scene:
    """A monitor of TARGET with scripted probes, intermediaries and majority rule."""

    prober: FunctionProber
    intermediaries: list[SiloAddress] = field(default_factory=list)
    majority: bool = True
    options: SiloOptions = OPTIONS
    votes: list[float] = field(default_factory=list)
    refused: list[bool] = field(default_factory=list)
    """Per vote, whether it was cast on refusals."""
    still_holds: list[Callable[[], bool]] = field(default_factory=list)
    """Per vote, what the caster asks before it decides the vote."""
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    health: LocalHealth | None = None
    vote_delay: float = 0.0
    vote_hold: float = 0.0

    def monitor(self) -> SiloHealthMonitor:
        async def vote(target: SiloAddress, *, refused: bool, still_holds: Callable[[], bool]) -> VoteOutcome:
            assert target == TARGET
            self.votes.append(self.clock.monotonic())
            self.refused.append(refused)
            self.still_holds.append(still_holds)
            return VoteOutcome.VOTED

        self.health = self.health or LocalHealth(address=ME, options=self.options, clock=self.clock, snapshot=self.view)
        return SiloHealthMonitor(
            target=TARGET,
            local=ME,
            options=self.options,
            clock=self.clock,
            prober=self.prober,
            local_health=self.health,
            intermediaries=lambda: list(self.intermediaries),
            may_vote=lambda: self.majority,
            vote=vote,
            random=random.Random(1),
            vote_delay=lambda: self.vote_delay,
            vote_hold=lambda: self.vote_hold,
        )

    def view(self) -> MembershipSnapshot:
        return view(row(ME), row(TARGET), *(row(silo) for silo in self.intermediaries))


def hanging(clock: FakeClock) -> Callable[[SiloAddress], asyncio.Future[bool]]:
    """A target that stopped answering: every ping waits for ever (until its timeout)."""

    def ping(target: SiloAddress) -> asyncio.Future[bool]:
        return asyncio.get_running_loop().create_future()

    return ping


async def run_for(scene: Scene, monitor: SiloHealthMonitor, seconds: float, step: float = 0.05) -> None:
    elapsed = 0.0
    while elapsed < seconds - 1e-9:
        await scene.clock.advance(step)
        elapsed += step


async def expect_a_vote_after_a_silence_of_the_floor(scene: Scene, monitor: SiloHealthMonitor) -> None:
    """The target hangs from now on: exactly one vote, a floor after its last answer."""
    heard = monitor.last_heard
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR + 0.2)
    assert len(scene.votes) == 1
    assert scene.votes[0] - heard == pytest.approx(FLOOR, abs=OPTIONS.probe_interval)
    assert scene.refused == [False], "silence may be a cut's: under ring sampling its death still settles"


@async_test
async def test_probes_leave_at_a_fixed_rate_even_while_earlier_ones_hang() -> None:
    scene = Scene(FunctionProber())
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    # at 0, 0.25, 0.5, 0.75 and 1.0 s: a hung probe does not delay the next one
    assert len(scene.prober.pings) == 5
    await monitor.stop()


@pytest.mark.parametrize(
    ("align", "expected"),
    [
        # the monitors started at 0.37 and 0.61 s send together from 0.75 s on
        (True, [0.37, 0.5, 0.61, 0.75, 0.75, 1.0, 1.0, 1.25, 1.25]),
        (False, [0.37, 0.61, 0.62, 0.86, 0.87, 1.11, 1.12]),
    ],
)
@async_test
async def test_aligned_monitors_started_apart_probe_at_the_same_instants(align: bool, expected: list[float]) -> None:
    """``align_probes``: after its first probe every monitor keeps to the grid of the probe interval,
    so the monitors of one machine send (and their targets answer) together; off, each keeps its phase."""
    scene = Scene(FunctionProber(), options=OPTIONS.with_overrides({"align_probes": str(align).lower()}))
    sent: list[float] = []
    scene.prober.reachable = lambda target: sent.append(scene.clock.monotonic()) is None
    monitors = [scene.monitor(), scene.monitor()]
    for monitor, start in zip(monitors, (0.37, 0.61), strict=True):
        await run_for(scene, monitor, start - scene.clock.monotonic(), step=0.01)
        monitor.start()
    await run_for(scene, monitors[0], 1.3 - scene.clock.monotonic(), step=0.01)
    for monitor in monitors:
        await monitor.stop()
    assert sent == pytest.approx(expected, abs=0.011)


@async_test
async def test_a_monitor_at_half_phase_probes_half_an_interval_after_the_grid() -> None:
    """``phase`` (``targets.RingTargets.phase``): a monitor of the second phase keeps to the grid shifted
    by half an interval, and takes up a change of phase after its next probe."""
    scene = Scene(FunctionProber())
    sent: list[float] = []
    scene.prober.reachable = lambda target: sent.append(scene.clock.monotonic()) is None
    monitor = scene.monitor()
    monitor.phase = 0.5
    await run_for(scene, monitor, 0.37, step=0.01)
    monitor.start()
    await run_for(scene, monitor, 1.0 - scene.clock.monotonic(), step=0.01)
    assert sent == pytest.approx([0.37, 0.625, 0.875], abs=0.011)
    monitor.phase = 0.0
    await run_for(scene, monitor, 1.55 - scene.clock.monotonic(), step=0.01)
    await monitor.stop()
    assert sent[3:] == pytest.approx([1.125, 1.5], abs=0.011)  # 1.25 is the nearest instant: 1.5 the next


@async_test
async def test_a_stop_cancelled_while_it_waits_leaves_no_probe_running_and_casts_no_vote() -> None:
    """The cluster monitor stopping while a view change stops this monitor cancels that stop
    mid-wait; a probe left running would time out later and vote for a monitor nobody holds."""
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR - 0.1)  # probes in flight that time out past the floor
    await stop_cancelled_at_its_first_wait(monitor.stop())
    pings = len(scene.prober.pings)
    await run_for(scene, monitor, 3 * FLOOR)
    assert scene.votes == []
    assert monitor.votes_cast == 0
    assert len(scene.prober.pings) == pings


@async_test
async def test_a_hung_target_is_voted_against_after_the_silence_floor_not_before() -> None:
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    assert monitor.last_heard == pytest.approx(1.0)
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR - 0.1)
    assert scene.votes == []
    await run_for(scene, monitor, 0.2)
    assert len(scene.votes) == 1
    assert scene.votes[0] - 1.0 == pytest.approx(FLOOR, abs=OPTIONS.probe_interval)
    await monitor.stop()


@async_test
async def test_our_own_pause_is_not_counted_as_the_targets_silence() -> None:
    """SIGSTOPped for longer than the floor, we resume to a target whose first probes are lost.

    Counting the pause would make it silent for the floor at once, and with nobody to ask for a
    veto our own evidence would decide: a vote against a live silo. We sent nothing while
    paused, so the silence is only what follows the pause.
    """
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)  # the probes right after the pause are lost
    await scene.clock.pause(2 * FLOOR)
    # (a little under half the floor: a longer silence of a live target would lengthen the floor)
    await run_for(scene, monitor, FLOOR / 2 - 2 * OPTIONS.probe_interval)
    scene.prober.reachable = lambda target: True
    await run_for(scene, monitor, FLOOR)
    assert scene.votes == []
    assert monitor.paused_seconds == pytest.approx(2 * FLOOR - OPTIONS.probe_interval, abs=OPTIONS.probe_interval)
    # the discount is for our pauses only: a real silence after it is still a vote at the floor
    await expect_a_vote_after_a_silence_of_the_floor(scene, monitor)
    await monitor.stop()


@async_test
async def test_a_live_targets_long_silence_lengthens_the_silence_needed_for_a_vote() -> None:
    """TCP stalls on a lossy network: a live target silent for 1.2 s, then answering again.

    The network has just shown that a live silo can be that quiet, so the next suspicion needs
    twice that (a floor of 1.5 s x 2 = 3 s > 2.4 s): a 2 s silence is no vote now, though it is
    more than the floor. Once the remembered silence is older than ``SILENCE_MEMORY`` detection
    times, a silence of the floor is a vote again.
    """
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, 1.2)
    scene.prober.reachable = lambda target: True
    await run_for(scene, monitor, 1.0)
    assert monitor.suspect_after() == pytest.approx(2 * FLOOR)
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, 2.0)
    assert scene.votes == []
    scene.prober.reachable = lambda target: True  # the stall ends: 2 s is now the longest silence
    await run_for(scene, monitor, SILENCE_MEMORY * FLOOR + 0.5)
    assert monitor.suspect_after() == pytest.approx(FLOOR)
    await expect_a_vote_after_a_silence_of_the_floor(scene, monitor)
    await monitor.stop()


@async_test
async def test_a_silence_ended_by_a_veto_counts_as_a_live_targets_silence() -> None:
    """Our link to the target stalls; a later indirect round reaches it: the silence was the network's.

    (The majority rule holds the vote back meanwhile, so the first round's failure is no vote.)"""
    helper_reaches = [False]
    prober = FunctionProber(indirect=lambda intermediary, target: result(helper_reaches[0]))
    scene = Scene(prober, intermediaries=[HELPER], majority=False)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR)  # the round at half the floor fails
    helper_reaches[0] = True
    await run_for(scene, monitor, FLOOR)  # the next round, a suspicion time later, vetoes
    assert len(prober.indirect_calls) == 2
    assert scene.votes == []
    # the vetoing round started 2.25 s (1.5 floors) into the silence: now it needs twice that
    assert monitor.suspect_after() >= 3 * FLOOR
    await monitor.stop()


@async_test
async def test_a_link_that_stays_cut_does_not_keep_raising_the_silence_needed() -> None:
    """A non-transitive cut: we never reach the target, an intermediary always does. Each round
    is vetoed, half a suspicion time after the last; only the first veto earns a point (the silence
    needed doubles for ``SILENCE_MEMORY`` floors), so the score does not climb a point a round to
    its maximum (nine floors before we suspect anyone) but comes back to the floor.

    Probes every 0.3 s: a veto's silence then ends a little past half the silence needed, as
    event-loop jitter makes it end in a real process (on the fake clock's 0.25 s grid it would
    end at exactly half, which earns no point)."""
    prober = FunctionProber(indirect=lambda intermediary, target: result(True))
    scene = Scene(prober, intermediaries=[HELPER], options=dataclasses.replace(OPTIONS, probe_interval=0.3))
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)
    needed = []
    for _ in range(40):  # a minute
        await run_for(scene, monitor, FLOOR)
        needed.append(monitor.suspect_after())
    assert scene.votes == []
    assert max(needed) <= 2 * FLOOR
    assert needed[-1] == pytest.approx(FLOOR)
    assert len(prober.indirect_calls) >= 40  # the suspicion is still re-checked at least once a floor
    await monitor.stop()


@pytest.mark.parametrize("reports", [False, True], ids=["no intermediary can be asked", "one reports"])
@async_test
async def test_a_round_in_which_no_intermediary_reported_is_no_evidence(reports: bool) -> None:
    """A hung target; our calls to the intermediaries fail (an overloaded or half-cut host of
    ours). Without a report that some intermediary could not reach the target, no vote: rounds
    are asked again, a probe timeout apart. One report, and the silence is voted on."""

    def intermediary(via: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
        if not reports:
            raise ConnectionError(f"cannot ask {via}")
        return result(False)

    scene = Scene(FunctionProber(indirect=intermediary), intermediaries=[HELPER, OTHER])
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, 3 * FLOOR)
    assert bool(scene.votes) is reports
    rounds = len(scene.prober.indirect_calls) // 2
    assert rounds >= (3 * FLOOR / OPTIONS.probe_timeout - 2 if not reports else 1)
    await monitor.stop()


@pytest.mark.parametrize("report_latency", [0.0, 0.02, 0.9 * REPORT_LEAD * OPTIONS.probe_interval])
@async_test
async def test_a_hangs_vote_does_not_wait_for_the_intermediaries_reports(report_latency: float) -> None:
    """The round watches until ``REPORT_LEAD`` of an interval before our suspicion, so reports that
    take up to that long to come back are in when it comes: the vote is cast at the floor."""
    scene = Scene(FunctionProber(), intermediaries=[HELPER, OTHER])

    async def silent_target(intermediary: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
        await scene.clock.sleep(scene.prober.indirect_timeouts[-1] + report_latency)
        return result(False)

    scene.prober.indirect = silent_target
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    heard = monitor.last_heard
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR + 0.2, step=0.01)
    assert len(scene.votes) == 1
    assert scene.votes[0] - heard == pytest.approx(FLOOR, abs=1e-6)
    window = (1 - ROUND_START) * FLOOR - REPORT_LEAD * OPTIONS.probe_interval
    assert scene.prober.indirect_timeouts == pytest.approx([window, window])
    await monitor.stop()


PAUSE = 0.8
"""A pause of the target over half the floor and under the two thirds an indirect round watches."""


@pytest.mark.parametrize(("pause", "voted"), [(PAUSE, False), (FLOOR, True)], ids=["short pause", "control"])
@async_test
async def test_pauses_of_a_target_across_a_cut_link_are_vetoed_when_shorter_than_a_round_s_watch(
    pause: float, voted: bool
) -> None:
    """A cut link: we never reach the target. It pauses for ``pause`` seconds every 3 s (a GC, a
    starved host): an intermediary's pings wait, and are answered when it resumes. Every round
    watches it from a third of the silence needed until the suspicion (two thirds of the floor),
    so a shorter pause ends in a veto; a pause as long as the floor is a hang, and is voted on.
    (Rounds that watched a probe timeout from half the silence voted on 0.8 s pauses.)"""
    assert PAUSE < (1 - ROUND_START) * FLOOR < FLOOR
    scene = Scene(FunctionProber(), intermediaries=[HELPER])
    period = 3.0
    paused_from = scene.clock.monotonic() + 2.0

    def resumes(now: float) -> float:
        """When the target answers a ping sent at ``now``: at once, or when its pause ends."""
        into = (now - paused_from) % period
        return now if now < paused_from or into >= pause else now + pause - into

    async def through_intermediary(intermediary: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
        asked, window = scene.clock.monotonic(), scene.prober.indirect_timeouts[-1]
        answer = resumes(asked)
        await scene.clock.sleep(min(answer - asked, window))
        return IndirectProbeResult(answer - asked <= window, 0, scene.clock.monotonic() - asked)

    scene.prober.indirect = through_intermediary
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)  # answering
    scene.prober.reachable = hanging(scene.clock)  # the link is cut from now on
    await run_for(scene, monitor, 10 * period)
    assert bool(scene.votes) is voted
    if not voted:
        assert min(scene.prober.indirect_timeouts) > pause  # every round watched past any pause
    await monitor.stop()


@async_test
async def test_answers_keep_the_target_unsuspected_whatever_else_times_out() -> None:
    answers = iter([True, False, False, True] * 100)  # half the probes lost, in bursts of two
    scene = Scene(FunctionProber(reachable=lambda target: next(answers)))
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 10 * FLOOR)
    assert scene.votes == []
    assert not monitor.suspected()
    await monitor.stop()


SPACED = dataclasses.replace(OPTIONS, probe_interval=OPTIONS.probe_timeout)
"""Probes as far apart as their timeout (Orleans' 5 s / 5 s): a target answering every probe is a
probe timeout, a third of the floor, silent just before each one."""


@async_test
async def test_probes_as_far_apart_as_their_timeout_start_nothing_while_every_probe_is_answered() -> None:
    scene = Scene(FunctionProber(), intermediaries=[HELPER, OTHER], options=SPACED)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 10 * FLOOR)
    assert len(scene.prober.pings) >= 10 * FLOOR / SPACED.probe_interval - 1
    assert scene.prober.new_connection_pings == []
    assert scene.prober.connects_made == []
    assert scene.prober.indirect_calls == []
    assert scene.votes == []
    await monitor.stop()


@async_test
async def test_probes_as_far_apart_as_their_timeout_still_ask_intermediaries_and_vote_on_a_hang() -> None:
    scene = Scene(FunctionProber(indirect=lambda via, target: result(False)), intermediaries=[HELPER], options=SPACED)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    heard = monitor.last_heard
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, SPACED.missed_probe_silence - 0.1)
    assert scene.prober.indirect_calls == []  # only the gap before the next probe so far
    await run_for(scene, monitor, 0.2)
    assert scene.prober.indirect_calls == [(HELPER, TARGET)]  # that probe went unanswered
    await run_for(scene, monitor, FLOOR)
    assert scene.prober.new_connection_pings  # from the next probe on
    assert scene.prober.connects_made
    assert len(scene.votes) == 1
    assert scene.votes[0] - heard == pytest.approx(FLOOR, abs=SPACED.probe_interval)
    await monitor.stop()


def lagging_scene() -> Scene:
    """A monitor of TARGET (probes as far apart as their timeout) whose own event loop lags."""
    scene = Scene(FunctionProber(indirect=lambda via, target: result(False)), intermediaries=[HELPER], options=SPACED)
    scene.health = LocalHealth(address=ME, options=SPACED, clock=scene.clock, snapshot=scene.view)
    scene.health.record_loop_lag(SPACED.probe_timeout / 4)  # one point: the silence needed doubles
    assert scene.health.lagging()
    return scene


@async_test
async def test_a_monitor_whose_own_loop_lags_opens_no_new_connection_and_still_votes_on_a_hang() -> None:
    """Our event loop lags (an overloaded host): a silence is then likelier ours than a cut's, so
    no probe also goes on a new connection (a channel opened on both hosts); the path is checked
    with a bare connect per probe at most, and the hang (its kernel accepts) is still voted on,
    after the silence the lag lengthens."""
    scene = lagging_scene()
    monitor = scene.monitor()
    monitor.start()
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, 3 * FLOOR)
    assert scene.prober.new_connection_pings == []
    assert 0 < len(scene.prober.connects_made) <= len(scene.prober.pings)
    assert len(scene.votes) == 1
    assert scene.refused == [False]
    assert scene.votes[0] == pytest.approx(2 * FLOOR, abs=SPACED.probe_interval)
    await monitor.stop()


@pytest.mark.parametrize("lagging", [True, False], ids=["our loop lags", "our loop keeps time"])
@async_test
async def test_a_refused_connect_to_a_silent_target_is_a_refusal(
    lagging: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A crashed target whose pings time out (our loop too late to see their refusals, or a
    connection that lingers): the bare connects its silence brings are refused, which proves it
    gone; the vote stands on refusals, well before the silence (the floor, or twice it while
    lagging) would make one, and while lagging no ping goes on a new connection."""
    scene = lagging_scene() if lagging else Scene(FunctionProber(), intermediaries=[HELPER], options=SPACED)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    heard = monitor.last_heard
    scene.prober.reachable = hanging(scene.clock)  # the usual connection: no answer in time
    scene.prober.reachable_on_new_connection = lambda target: ProbeOutcome.REFUSED
    scene.prober.connects = lambda target: ProbeOutcome.REFUSED
    with caplog.at_level(logging.WARNING, logger="silo.membership.silo_health"):
        await run_for(scene, monitor, FLOOR)
    assert scene.refused == [True]
    assert scene.votes[0] - heard < FLOOR
    if lagging:
        assert scene.prober.new_connection_pings == []
    (vote,) = [record.getMessage() for record in caplog.records if "on refusals" in record.getMessage()]
    assert f"{RefusalSource.CONNECT} " in vote, "the WARNING says what proved the target gone"
    await monitor.stop()


@async_test
async def test_a_silent_process_whose_host_accepts_connects_gets_one_new_connection_until_it_answers() -> None:
    """A new connection that goes unanswered while a connect to the host gets through says the
    process is slow or hung: the next probes check the path only (each new connection was a
    channel on both hosts: an eighth of a silo host's samples in an overloaded 2,000-silo join).
    A path seen down, or an answer, brings new connections back."""
    scene = Scene(FunctionProber(indirect=lambda via, target: result(False)), intermediaries=[HELPER], options=SPACED)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, SPACED.missed_probe_silence + 6 * SPACED.probe_interval)
    # one (and one more sent before the first timed out: probes as far apart as their timeout)
    assert 1 <= len(scene.prober.new_connection_pings) <= 2, "then the path alone"
    assert len(scene.prober.connects_made) >= 5
    before = len(scene.prober.new_connection_pings)
    scene.prober.connects = lambda target: False  # now the path is down too: a cut
    await run_for(scene, monitor, 3 * SPACED.probe_interval)
    assert len(scene.prober.new_connection_pings) > before, "a cut: new connections again, to see its heal"
    scene.prober.connects = lambda target: True
    scene.prober.reachable = lambda target: True
    await run_for(scene, monitor, SPACED.probe_interval)
    scene.prober.new_connection_pings.clear()
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, SPACED.missed_probe_silence + 6 * SPACED.probe_interval)
    assert 1 <= len(scene.prober.new_connection_pings) <= 2, "it answered meanwhile: new connections again"
    await monitor.stop()


CUT = 1.0
"""A cut shorter than the floor: after it heals, the usual connection stays mute as long again
(TCP's retransmission backoff), pushing the silence past the floor."""


@pytest.mark.parametrize("new_connections_answer", [True, False], ids=["new connections answer", "control"])
@pytest.mark.parametrize(
    "heard_before_the_cut", [True, False], ids=["heard before the cut", "cut before its first answer"]
)
@async_test
async def test_a_cut_shorter_than_the_floor_is_not_voted_on_when_a_new_connection_answers_after_it(
    new_connections_answer: bool, heard_before_the_cut: bool
) -> None:
    """Also when the cut begins before the monitor's first answer: a silo cut off just after it
    joined, whose new monitors count its silence from their start (it was voted Dead once)."""
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    if heard_before_the_cut:
        monitor.start()
        await run_for(scene, monitor, 1.0)  # answering on the usual connection
        assert scene.prober.new_connection_pings == []  # never while the usual connection answers
    healed_at = scene.clock.monotonic() + CUT
    scene.prober.reachable = hanging(scene.clock)  # the cut, then the usual connection's backoff
    scene.prober.reachable_on_new_connection = lambda target: (
        new_connections_answer and (scene.clock.monotonic() >= healed_at)
    )
    scene.prober.connects = lambda target: scene.clock.monotonic() >= healed_at  # the path is down while cut
    if not heard_before_the_cut:
        monitor.start()
    await run_for(scene, monitor, 2 * FLOOR)
    if new_connections_answer:
        assert scene.votes == []
        assert monitor.last_heard >= healed_at
    else:
        assert len(scene.votes) == 1  # the control: the same silence is voted on at the floor
    assert scene.prober.new_connection_pings, "silent for a probe timeout: pings also go on new connections"
    await monitor.stop()


@pytest.mark.parametrize(
    ("heals_before_the_floor", "voted"), [(True, False), (False, True)], ids=["healed just before", "still cut"]
)
@async_test
async def test_a_silence_that_saw_the_path_down_is_checked_once_more_before_the_vote(
    heals_before_the_floor: bool, voted: bool
) -> None:
    """The cut heals between two probe ticks, just before the floor: no tick's ping on a new
    connection was sent after the heal, so only the last check before the vote can see it."""
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    heard = monitor.last_heard
    healed_at = heard + FLOOR - (0.01 if heals_before_the_floor else -10.0)

    def healed(target: SiloAddress) -> bool:
        return scene.clock.monotonic() >= healed_at

    def new_connection(target: SiloAddress) -> bool | asyncio.Future[bool]:
        return True if healed(target) else asyncio.get_running_loop().create_future()  # a SYN lost in the cut

    scene.prober.reachable = hanging(scene.clock)  # the usual connection stays mute throughout
    scene.prober.reachable_on_new_connection = new_connection
    scene.prober.connects = healed
    await run_for(scene, monitor, FLOOR + 0.2)
    assert scene.prober.connects_made, "silent for a probe timeout: the path is checked"
    assert bool(scene.votes) is voted
    if voted:  # still cut at the floor: the last connect's short wait is all the check costs
        assert scene.votes[0] - heard <= FLOOR + OPTIONS.probe_interval
    else:
        assert monitor.last_heard >= healed_at
    await monitor.stop()


@async_test
async def test_repeated_refusals_are_a_crash_found_well_inside_the_floor(caplog: pytest.LogCaptureFixture) -> None:
    scene = Scene(FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED))
    monitor = scene.monitor()
    monitor.start()
    with caplog.at_level(logging.WARNING, logger="silo.membership.silo_health"):
        await run_for(scene, monitor, OPTIONS.probe_interval * REFUSAL_RECHECK + 0.01, step=0.01)
    (vote,) = [record.getMessage() for record in caplog.records if "on refusals" in record.getMessage()]
    assert vote.index(RefusalSource.PING) < vote.index(RefusalSource.RECHECK), "the ping's, then its recheck's"
    assert len(scene.votes) == 1, "the second refusal is a recheck on a new connection, not the next probe"
    assert scene.votes[0] <= FLOOR / 2
    assert scene.refused == [True], "the vote says it stands on refusals: the death need not settle"
    assert scene.prober.new_connection_pings == [TARGET]
    await monitor.stop()


@async_test
async def test_a_refusal_that_a_new_connection_does_not_confirm_is_no_suspicion() -> None:
    scene = Scene(
        FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED, reachable_on_new_connection=lambda t: True)
    )
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, OPTIONS.probe_interval * REFUSAL_RECHECK + 0.01, step=0.01)
    assert monitor.refusals == 0, "the same incarnation answered: it is alive"
    assert not monitor.suspected()
    assert scene.votes == []
    await monitor.stop()


CRASH_SUSPECTED_AT = OPTIONS.probe_interval * REFUSAL_RECHECK
"""When refusals from the first probe on make a suspicion (no intermediary to ask)."""


@pytest.mark.parametrize("hold", [0.0, 0.1], ids=["its turn", "held once more while others gather the quorum"])
@async_test
async def test_a_monitor_past_the_first_ranks_casts_its_vote_once_its_delay_is_over(hold: float) -> None:
    scene = Scene(FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED), vote_delay=0.1, vote_hold=hold)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, CRASH_SUSPECTED_AT + 0.09 + hold, step=0.01)
    assert scene.votes == []
    await run_for(scene, monitor, 0.02, step=0.01)
    assert scene.votes == [pytest.approx(CRASH_SUSPECTED_AT + 0.1 + hold)]
    await monitor.stop()


@async_test
async def test_a_held_vote_is_dropped_when_the_target_answers_before_its_turn() -> None:
    outcomes = iter([ProbeOutcome.REFUSED] * REFUSALS_TO_SUSPECT + [ProbeOutcome.ANSWERED] * 100)
    scene = Scene(FunctionProber(reachable=lambda target: next(outcomes)), vote_delay=OPTIONS.probe_interval * 1.2)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 2 * FLOOR, step=0.01)
    assert scene.votes == []
    await monitor.stop()


@pytest.mark.parametrize("on_refusals", [False, True], ids=["silence", "refusals"])
@async_test
async def test_a_vote_in_flight_no_longer_holds_once_the_target_answers(on_refusals: bool) -> None:
    """What the caster asks before it writes the vote: true while the evidence stands, false once the
    target answered (a vote on a saturated machine was written minutes after the answer came)."""
    scene = Scene(FunctionProber())
    scene.prober.reachable = (lambda target: ProbeOutcome.REFUSED) if on_refusals else hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, FLOOR + 0.2, step=0.01)
    assert scene.refused == [on_refusals]
    (still_holds,) = scene.still_holds
    assert still_holds()
    scene.prober.reachable = lambda target: True
    await run_for(scene, monitor, OPTIONS.probe_interval + 0.01, step=0.01)
    assert not still_holds()
    await monitor.stop()


@async_test
async def test_a_held_vote_waits_for_the_majority_rule_and_is_cast_when_it_allows_one_again() -> None:
    scene = Scene(FunctionProber(), vote_delay=0.1)
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, FLOOR + 0.05, step=0.01)
    scene.majority = False  # while the vote is held: at its turn the rule forbids it
    await run_for(scene, monitor, 0.5, step=0.01)
    assert scene.votes == []
    scene.majority = True
    back = scene.clock.monotonic()
    await run_for(scene, monitor, OPTIONS.probe_interval + OPTIONS.probe_timeout + 0.1 + 0.01, step=0.01)
    assert len(scene.votes) == 1  # judged afresh at the next probe, not a suspicion time later
    assert scene.votes[0] - back <= OPTIONS.probe_interval + OPTIONS.probe_timeout + 0.1 + 1e-6
    assert scene.refused == [False]
    await monitor.stop()


@async_test
async def test_refusals_are_voted_on_whatever_the_majority_rule_says() -> None:
    """The rule guards against silence that is a cut's; no cut refuses a connection."""
    scene = Scene(FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED), majority=False)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, CRASH_SUSPECTED_AT + 0.01, step=0.01)
    assert len(scene.votes) == 1
    assert scene.refused == [True]
    await monitor.stop()


def never_reports(via: SiloAddress, target: SiloAddress) -> asyncio.Future[IndirectProbeResult]:
    return asyncio.get_running_loop().create_future()


@pytest.mark.parametrize(
    "report", [never_reports, lambda via, target: result(True)], ids=["late reports", "a veto (a rejecting link)"]
)
@async_test
async def test_refusals_are_voted_on_without_asking_intermediaries(
    report: Callable[[SiloAddress, SiloAddress], IndirectProbeResult | asyncio.Future[IndirectProbeResult]],
) -> None:
    """A round vetoes silence (our link may be bad); a refusal is no silence, so no intermediary is
    asked and the vote waits for none: on an overloaded machine their reports came minutes late."""
    scene = Scene(
        FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED, indirect=report), intermediaries=[HELPER, OTHER]
    )
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, CRASH_SUSPECTED_AT + 0.01, step=0.01)
    assert len(scene.votes) == 1
    assert scene.refused == [True]
    assert scene.prober.indirect_calls == []
    await monitor.stop()


@async_test
async def test_a_vote_on_refusals_is_cast_again_before_it_expires_however_long_the_suspicion_time() -> None:
    """Silence is voted on again a suspicion time later; refusals before our vote expires, so that
    it is still in the row when another monitor's comes (their suspicion times, stretched by
    local health on an overloaded machine, let each vote expire before the next one came)."""
    options = OPTIONS.with_overrides({"death_vote_expiration": "2s"})  # half of it is shorter than the suspicion time
    scene = Scene(FunctionProber(reachable=lambda target: ProbeOutcome.REFUSED), options=options)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, CRASH_SUSPECTED_AT + 3.5, step=0.01)
    gaps = [later - earlier for earlier, later in itertools.pairwise(scene.votes)]
    assert len(gaps) >= 2
    assert max(gaps) <= options.death_vote_expiration / 2 + options.probe_interval
    await monitor.stop()


@async_test
async def test_a_single_refusal_is_not_a_suspicion() -> None:
    outcomes = iter([ProbeOutcome.REFUSED] + [ProbeOutcome.ANSWERED] * 100)
    scene = Scene(FunctionProber(reachable=lambda target: next(outcomes)))
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 2 * FLOOR)
    assert scene.votes == []
    await monitor.stop()


@async_test
async def test_intermediaries_are_asked_in_parallel_early_and_their_failures_are_no_votes() -> None:
    scene = Scene(FunctionProber(indirect=lambda via, target: result(False)), intermediaries=[HELPER, OTHER])
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, FLOOR / 2 + 0.05)
    # half the floor: both asked at once, before any vote
    assert sorted(via for via, _ in scene.prober.indirect_calls) == [HELPER, OTHER]
    assert scene.votes == []
    await run_for(scene, monitor, FLOOR / 2)
    assert len(scene.votes) == 1  # our own silence votes; the intermediaries' failures added nothing
    await monitor.stop()


@async_test
async def test_a_hang_is_voted_at_the_floor_when_the_early_round_found_no_one_who_hears_it() -> None:
    scene = Scene(FunctionProber(indirect=lambda via, target: result(False)), intermediaries=[HELPER, OTHER])
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 1.0)
    scene.prober.reachable = hanging(scene.clock)
    await run_for(scene, monitor, FLOOR + 0.1)
    assert len(scene.votes) == 1
    # no second round at the floor: the verdict is not delayed by another probe timeout
    assert scene.votes[0] - 1.0 <= FLOOR + 0.06
    assert len(scene.prober.indirect_calls) == 2
    await monitor.stop()


@async_test
async def test_any_intermediary_that_reaches_the_target_vetoes_the_vote() -> None:
    def indirect(via: SiloAddress, target: SiloAddress) -> IndirectProbeResult:
        return result(via == OTHER)  # HELPER fails, OTHER still hears the target: our link is bad

    scene = Scene(FunctionProber(indirect=indirect), intermediaries=[HELPER, OTHER])
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 10 * FLOOR)
    assert scene.votes == []
    assert len(scene.prober.indirect_calls) > 4  # the suspicion is re-checked while our link stays bad
    await monitor.stop()


@async_test
async def test_an_intermediary_that_cannot_be_asked_neither_vetoes_nor_votes() -> None:
    scene = Scene(FunctionProber(), intermediaries=[HELPER])  # every indirect call raises
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, FLOOR + 0.3)
    assert len(scene.votes) == 1
    await monitor.stop()


@async_test
async def test_a_silo_on_the_minority_side_does_not_vote_until_it_is_the_majority() -> None:
    scene = Scene(FunctionProber(), majority=False)
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 3 * FLOOR)
    assert scene.votes == []
    scene.majority = True  # e.g. the silent silos went stale: they left the count
    await run_for(scene, monitor, 2 * OPTIONS.probe_interval)
    assert len(scene.votes) == 1
    await monitor.stop()


@async_test
async def test_the_vote_is_repeated_once_per_suspicion_period_while_the_silence_lasts() -> None:
    scene = Scene(FunctionProber())
    scene.prober.reachable = hanging(scene.clock)
    monitor = scene.monitor()
    monitor.start()
    await run_for(scene, monitor, 3 * FLOOR + 0.1)
    assert len(scene.votes) == 3
    assert scene.votes[1] - scene.votes[0] == pytest.approx(FLOOR, abs=OPTIONS.probe_interval)
    await monitor.stop()


@async_test
async def test_poor_local_health_lengthens_timeouts_and_the_silence_needed() -> None:
    scene = Scene(FunctionProber())
    scene.health = LocalHealth(address=ME, options=OPTIONS, clock=scene.clock, snapshot=scene.view)
    monitor = scene.monitor()
    scene.health.record_loop_lag(OPTIONS.probe_timeout / 4)  # one point: everything doubles
    assert monitor.suspect_after() == pytest.approx(2 * FLOOR)
    await monitor.probe_once()
    assert scene.prober.timeouts == [2 * OPTIONS.probe_timeout]


@async_test
async def test_majority_bookkeeping_counts_only_targets_that_answered() -> None:
    scene = Scene(FunctionProber())
    monitor = scene.monitor()
    assert not monitor.heard_recently()  # created after a split: it must not inflate our side
    await monitor.probe_once()
    assert monitor.heard_recently()
