"""The protocol's observer hooks fire with the right facts: in-process silos on a fake clock and network."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import FakeClock
from silo.membership.probing import ProbeOutcome
from silo.membership.votes import VoteOutcome
from silo.runtime.silo import Silo
from tests.silo.harness import LOCAL, T0, FakeNetwork, async_test, memory_table, network_silo

STEP = LOCAL.probe_timeout / 5


@dataclass
class RecordingObserver:
    """A ``MembershipObserver`` that keeps every fact it is told."""

    probes: Counter[tuple[SiloAddress, ProbeOutcome]] = field(default_factory=Counter)
    round_trips: list[float] = field(default_factory=list)
    suspicions: list[SiloAddress] = field(default_factory=list)
    rounds: list[tuple[SiloAddress, int, bool]] = field(default_factory=list)
    votes: list[tuple[SiloAddress, VoteOutcome]] = field(default_factory=list)
    refreshes: list[float] = field(default_factory=list)
    skipped_refreshes: int = 0
    gossip: list[tuple[int, bool]] = field(default_factory=list)

    def probe_completed(self, target: SiloAddress, outcome: ProbeOutcome, seconds: float) -> None:
        self.probes[target, outcome] += 1
        self.round_trips.append(seconds)

    def suspicion_started(self, target: SiloAddress) -> None:
        self.suspicions.append(target)

    def indirect_round_completed(self, target: SiloAddress, intermediaries: int, vetoed: bool) -> None:
        self.rounds.append((target, intermediaries, vetoed))

    def vote_completed(self, target: SiloAddress, outcome: VoteOutcome) -> None:
        self.votes.append((target, outcome))

    def refresh_completed(self, seconds: float) -> None:
        self.refreshes.append(seconds)

    def refresh_skipped(self) -> None:
        self.skipped_refreshes += 1

    def gossip_received(self, version: int, applied: bool) -> None:
        self.gossip.append((version, applied))


async def start(size: int) -> tuple[list[Silo], list[RecordingObserver], FakeNetwork, FakeClock]:
    clock, network, table = FakeClock(T0), FakeNetwork(), memory_table()
    silos, observers = [], []
    for port in range(1, size + 1):
        observer = RecordingObserver()
        silo = network_silo(table, port, clock, network, observer=observer)
        silos.append(silo)
        observers.append(observer)
    for silo in silos:
        await silo.start()
    return silos, observers, network, clock


@async_test
async def test_a_healthy_cluster_reports_answered_probes_refreshes_and_gossip_only() -> None:
    silos, observers, _, clock = await start(3)
    for _ in range(20):
        await clock.advance(STEP)
    for observer in observers:
        assert observer.probes
        assert {outcome for _, outcome in observer.probes} == {ProbeOutcome.ANSWERED}
        assert all(seconds >= 0 for seconds in observer.round_trips)
        assert (observer.suspicions, observer.rounds, observer.votes) == ([], [], [])
        assert observer.refreshes
        assert observer.skipped_refreshes == 0  # the local preset reads in full every period
    assert any(applied for observer in observers for _, applied in observer.gossip), "gossip of the joins applied"
    for silo in silos:
        await silo.stop()


@async_test
async def test_a_partitioned_silo_is_suspected_probed_indirectly_voted_and_declared_dead_once() -> None:
    silos, observers, network, clock = await start(4)
    for _ in range(10):
        await clock.advance(STEP)
    victim = silos[1].silo_address
    network.partitioned.add(victim)
    watcher = silos[0]
    for _ in range(100):
        await clock.advance(STEP)
        if watcher.snapshot.status_of(victim) is SiloStatus.DEAD:
            break
    assert watcher.snapshot.status_of(victim) is SiloStatus.DEAD
    survivors = [observer for silo, observer in zip(silos, observers, strict=True) if silo.silo_address != victim]
    assert sum(observer.probes[victim, ProbeOutcome.TIMED_OUT] for observer in survivors) >= 2
    assert any(victim in observer.suspicions for observer in survivors)
    assert any(target == victim and asked > 0 and not vetoed for o in survivors for target, asked, vetoed in o.rounds)
    outcomes = [outcome for observer in survivors for target, outcome in observer.votes if target == victim]
    assert outcomes.count(VoteOutcome.DECLARED_DEAD) == 1
    for silo in silos:
        await silo.stop()
