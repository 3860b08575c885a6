from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from membership_tables import SiloAddress
from silo.membership.clock import FakeClock
from silo.membership.local_health import LocalHealth
from silo.membership.options import SiloOptions
from silo.membership.probing import IndirectProbeResult
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_manager import VoteOutcome
from tests.silo.harness import T0, FunctionProber, address, async_test, row, view

ME, TARGET, HELPER, OTHER = address(1), address(2), address(3), address(4)
OPTIONS = SiloOptions.local()  # 3 missed probes


@dataclass
class Scene:
    prober: FunctionProber
    snapshot: MembershipSnapshot = field(default_factory=lambda: view(row(ME), row(TARGET), row(HELPER)))
    votes: list[tuple[SiloAddress, SiloAddress | None]] = field(default_factory=list)
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))

    def monitor(self, health: LocalHealth | None = None) -> SiloHealthMonitor:
        async def vote(target: SiloAddress, intermediary: SiloAddress | None) -> VoteOutcome:
            self.votes.append((target, intermediary))
            return VoteOutcome.VOTED

        return SiloHealthMonitor(
            target=TARGET,
            local=ME,
            options=OPTIONS,
            clock=self.clock,
            prober=self.prober,
            local_health=health or LocalHealth(address=ME, options=OPTIONS, clock=self.clock, snapshot=self.view),
            snapshot=self.view,
            vote=vote,
            random=random.Random(1),
        )

    def view(self) -> MembershipSnapshot:
        return self.snapshot


def failed(health_score: int = 0) -> IndirectProbeResult:
    return IndirectProbeResult(succeeded=False, intermediary_health_score=health_score, response_time=0.1)


@async_test
async def test_misses_are_counted_and_reset_by_an_answer() -> None:
    answers = [False, False, True, False]
    scene = Scene(FunctionProber(reachable=lambda target: answers.pop(0)))
    scene.snapshot = view(row(ME), row(TARGET))  # no third silo: no indirect probes
    monitor = scene.monitor()
    counts = []
    for _ in range(4):
        await monitor.probe_once()
        counts.append(monitor.missed_probes)
    assert counts == [1, 2, 0, 1]
    assert scene.votes == []


@async_test
async def test_without_an_intermediary_the_silo_votes_alone_at_the_limit() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: False))
    scene.snapshot = view(row(ME), row(TARGET))
    monitor = scene.monitor()
    for _ in range(OPTIONS.num_missed_probes_limit - 1):
        await monitor.probe_once()
    assert scene.votes == []
    await monitor.probe_once()
    assert scene.votes == [(TARGET, None)]
    await monitor.probe_once()  # a lost race or a short quorum: the next miss votes again
    assert scene.votes == [(TARGET, None), (TARGET, None)]


@async_test
async def test_a_healthy_intermediary_that_cannot_reach_the_target_votes_with_us() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: False, indirect=lambda via, target: failed()))
    monitor = scene.monitor()
    await monitor.probe_once()
    assert scene.prober.indirect_calls == []
    await monitor.probe_once()  # limit - 1 misses: ask a third silo
    assert scene.prober.indirect_calls == [(HELPER, TARGET)]
    assert scene.votes == [(TARGET, HELPER)]


@async_test
async def test_an_indirect_answer_clears_the_suspicion() -> None:
    answered = IndirectProbeResult(succeeded=True, intermediary_health_score=0, response_time=0.1)
    scene = Scene(FunctionProber(reachable=lambda target: False, indirect=lambda via, target: answered))
    monitor = scene.monitor()
    await monitor.probe_once()
    await monitor.probe_once()
    assert monitor.missed_probes == 0
    assert scene.votes == []


@async_test
async def test_an_unhealthy_intermediary_gives_unknown_and_is_not_reused_until_membership_changes() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: False, indirect=lambda via, target: failed(health_score=3)))
    monitor = scene.monitor()
    await monitor.probe_once()
    await monitor.probe_once()  # unknown: no vote
    assert scene.votes == []
    await monitor.probe_once()  # the limit: vote alone, and HELPER is not asked again
    assert scene.prober.indirect_calls == [(HELPER, TARGET)]
    assert scene.votes == [(TARGET, None)]
    scene.snapshot = view(row(ME), row(TARGET), row(HELPER), version=2)
    await monitor.probe_once()
    assert scene.prober.indirect_calls == [(HELPER, TARGET), (HELPER, TARGET)]


@async_test
async def test_an_intermediary_that_cannot_be_asked_is_skipped_for_another() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: False))  # every indirect call raises
    scene.snapshot = view(row(ME), row(TARGET), row(HELPER), row(OTHER))
    monitor = scene.monitor()
    for _ in range(4):
        await monitor.probe_once()
    asked = [via for via, _ in scene.prober.indirect_calls]
    assert sorted(asked) == [HELPER, OTHER]
    assert scene.votes == [(TARGET, None), (TARGET, None)]


@async_test
async def test_a_ping_that_hangs_is_a_miss_after_the_timeout() -> None:
    hung: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    scene = Scene(FunctionProber(reachable=lambda target: hung))
    monitor = scene.monitor()
    probe = asyncio.create_task(monitor.probe_once())
    await scene.clock.advance(OPTIONS.probe_timeout / 2)
    assert not probe.done()
    await scene.clock.advance(OPTIONS.probe_timeout / 2)
    assert probe.done()
    assert monitor.missed_probes == 1


@async_test
async def test_poor_local_health_lengthens_the_probe_timeout() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: True))
    health = LocalHealth(address=ME, options=OPTIONS, clock=scene.clock, snapshot=scene.view)
    monitor = scene.monitor(health)
    await monitor.probe_once()
    health.record_loop_lag(OPTIONS.probe_timeout)  # four points of lag
    await monitor.probe_once()
    assert scene.prober.timeouts == [OPTIONS.probe_timeout, OPTIONS.probe_timeout * 5]


@async_test
async def test_the_probe_loop_runs_every_probe_timeout() -> None:
    scene = Scene(FunctionProber(reachable=lambda target: True))
    monitor = scene.monitor()
    monitor.start()
    await scene.clock.advance(OPTIONS.probe_timeout * 3)
    assert len(scene.prober.pings) == 4  # at start, then once per period
    await monitor.stop()
