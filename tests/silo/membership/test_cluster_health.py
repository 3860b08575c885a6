from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import FakeClock
from silo.membership.cluster_health import VOTE_STAGGER_RANKS, VOTE_STAGGER_STEP, ClusterHealthMonitor
from silo.membership.gossiper import gossip_peers
from silo.membership.liveness import LivenessTracker
from silo.membership.local_health import LocalHealth
from silo.membership.majority import MAJORITY_SAMPLE, MAJORITY_SAMPLE_SHARE, MajorityHistory
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets, ring_index
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import LARGE_VIEW, MembershipSnapshot, SnapshotPublisher
from silo.membership.targets import RingTargets, SuspectWatchers, select_targets
from silo.membership.votes import VoteOutcome
from tests.silo.harness import T0, FunctionProber, address, async_test, row, view

ME = address(1)
PEERS = [address(port) for port in range(2, 8)]
NOW = T0 + timedelta(seconds=1)
ONE_RING = SiloOptions(num_probed_silos=1, num_votes_for_death_declaration=1)


def everyone_fresh(silo: SiloAddress) -> bool:
    return True


def test_an_active_silo_probes_its_ring_successors() -> None:
    snapshot = view(row(ME), *(row(peer) for peer in PEERS))
    options = SiloOptions(num_probed_silos=3)
    assert select_targets(snapshot, ME, NOW, options, everyone_fresh) == probe_targets(ME, [ME, *PEERS], 3)


def test_suspected_and_stale_silos_are_probed_too() -> None:
    ring = probe_targets(ME, [ME, *PEERS], 1)
    others = [peer for peer in PEERS if peer not in ring]
    suspected, stale, dead, joining = others[:4]
    snapshot = view(
        row(ME, when=NOW),
        *(row(peer, when=NOW) for peer in PEERS if peer not in (suspected, stale, dead, joining)),
        row(suspected, when=NOW).replace(suspect_times=((ring[0], NOW),)),
        row(stale, when=NOW),  # its heartbeat has not changed in our reads for too long: see is_fresh
        row(dead, SiloStatus.DEAD).replace(suspect_times=((ring[0], NOW),)),
        row(joining, SiloStatus.JOINING, when=NOW),
    )
    targets = select_targets(snapshot, ME, NOW, ONE_RING, lambda silo: silo != stale)
    assert targets == [*ring, *sorted([suspected, stale])]


def test_a_joining_silo_probes_only_suspects_and_an_absent_one_nobody() -> None:
    suspected = PEERS[0]
    snapshot = view(
        row(ME, SiloStatus.JOINING, when=NOW),
        row(suspected, when=NOW).replace(suspect_times=((PEERS[1], NOW),)),
        *(row(peer, when=NOW) for peer in PEERS[1:]),
    )
    assert select_targets(snapshot, ME, NOW, SiloOptions(), everyone_fresh) == [suspected]
    assert select_targets(view(*(row(peer) for peer in PEERS)), ME, NOW, SiloOptions(), everyone_fresh) == []


@dataclass
class Rig:
    """A cluster health monitor of ME whose silo health monitors probe through ``reachable``."""

    reachable: Callable[[SiloAddress], bool] = lambda silo: True
    options: SiloOptions = field(default_factory=SiloOptions.local)
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    publisher: SnapshotPublisher = field(default_factory=SnapshotPublisher)
    rereads: list[float] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def __post_init__(self) -> None:
        self.prober = FunctionProber(reachable=lambda silo: self.reachable(silo))
        self.liveness = LivenessTracker(self.options, self.clock.monotonic)
        self.health = LocalHealth(
            address=ME, options=self.options, clock=self.clock, snapshot=lambda: self.publisher.current or view()
        )
        self.cluster = ClusterHealthMonitor(
            local=ME,
            options=self.options,
            clock=self.clock,
            publisher=self.publisher,
            liveness=self.liveness,
            create_monitor=self._create,
            local_health=self.health,
            prober=self.prober,
            on_minority=lambda: self.rereads.append(self.clock.monotonic()),
            random=self.rng,
        )

    def _create(self, target: SiloAddress, owner: ClusterHealthMonitor) -> SiloHealthMonitor:
        async def vote(target: SiloAddress, *, refused: bool, still_holds: Callable[[], bool]) -> VoteOutcome:
            return VoteOutcome.VOTED

        return SiloHealthMonitor(
            target=target,
            local=ME,
            options=self.options,
            clock=self.clock,
            prober=self.prober,
            local_health=self.health,
            intermediaries=owner.intermediaries,
            may_vote=owner.may_vote,
            vote=vote,
            random=random.Random(0),
        )


@async_test
async def test_one_monitor_per_target_created_and_stopped_with_the_membership() -> None:
    rig = Rig()
    clock, publisher, liveness, cluster = rig.clock, rig.publisher, rig.liveness, rig.cluster
    cluster.start()
    liveness.observe(view(row(ME), row(PEERS[0]), row(PEERS[1]), version=1))
    await publisher.publish(view(row(ME), row(PEERS[0]), row(PEERS[1]), version=1))
    await clock.advance(0)
    assert set(cluster.monitors) == {PEERS[0], PEERS[1]}
    first = cluster.monitors[PEERS[0]]
    await publisher.publish(view(row(ME), row(PEERS[0]), row(PEERS[1], SiloStatus.DEAD), version=2))
    await clock.advance(0)
    assert set(cluster.monitors) == {PEERS[0]}
    assert cluster.monitors[PEERS[0]] is first
    await cluster.stop()
    assert cluster.monitors == {}


@async_test
async def test_the_majority_rule_counts_the_fresh_targets_we_hear_and_asks_a_minority_to_reread() -> None:
    heard = {PEERS[0]}  # we hear 1 of 4 fresh targets: 2 of 5, a minority
    rig = Rig(reachable=lambda silo: silo in heard)
    clock, publisher, liveness, cluster, options, rereads = (
        rig.clock, rig.publisher, rig.liveness, rig.cluster, rig.options, rig.rereads
    )  # fmt: skip
    snapshot = view(row(ME), *(row(peer) for peer in PEERS[:4]), version=1)
    liveness.observe(snapshot)
    cluster.start()
    await publisher.publish(snapshot)
    for _ in range(4):
        await clock.advance(options.detection_time)  # the silent three go suspected...
        liveness.observe(view(row(ME), *(row(peer, when=clock.now()) for peer in PEERS[:4]), version=1))  # ...alive
    assert not cluster.may_vote()
    assert len(rereads) >= 4  # every probe timeout once we knew we were the minority
    heard.update(PEERS[1:3])  # now 3 of 4 answer: 4 of 5
    await clock.advance(options.probe_interval * 2)
    assert cluster.may_vote()
    count = len(rereads)
    await clock.advance(options.probe_timeout * 4)
    assert len(rereads) == count  # the majority does not re-read
    await cluster.stop()


async def even_split_rig(heard: set[SiloAddress]) -> Rig:
    """ME and PEERS[:3] (every silo monitors the others), hearing only ``heard``, which keeps
    changing; every silo heartbeats. Run until the silent silos are long suspected."""
    rig = Rig(reachable=lambda silo: silo in heard)
    snapshot = view(row(ME), *(row(peer) for peer in PEERS[:3]), version=1)
    rig.liveness.observe(snapshot)
    rig.cluster.start()
    await rig.publisher.publish(snapshot)
    await advance_heartbeating(rig, rig.options.detection_time, PEERS[:3])
    silent = [monitor for silo, monitor in rig.cluster.monitors.items() if silo not in heard]
    while not all(monitor.suspected() for monitor in silent):  # our failed probes lengthen it (Lifeguard)
        await advance_heartbeating(rig, rig.options.probe_interval, PEERS[:3])
    await advance_heartbeating(rig, rig.options.detection_time, PEERS[:3])
    return rig


async def advance_heartbeating(rig: Rig, seconds: float, alive: list[SiloAddress]) -> None:
    """Advance ``seconds``, one probe interval at a time, while ``alive`` heartbeat into the table."""
    end = rig.clock.monotonic() + seconds
    while rig.clock.monotonic() < end:
        await rig.clock.advance(rig.options.probe_interval)
        rig.liveness.observe(view(row(ME), *(row(peer, when=rig.clock.now()) for peer in alive), version=1))


@async_test
async def test_after_a_heal_the_silence_measured_during_the_split_is_no_evidence() -> None:
    """2|2 of 4, then a heal that reconnects one far silo before the other (the fault test's
    race): our majority is back, but the one still silent gets no vote until it has been silent
    a whole suspicion time after the heal; if it answers by then, never."""
    heard = {PEERS[0]}
    rig = await even_split_rig(heard)
    late = rig.cluster.monitors[PEERS[2]]
    assert late.suspected()
    assert not rig.cluster.may_vote()
    assert all(monitor.votes_cast == 0 for monitor in rig.cluster.monitors.values())
    heard.add(PEERS[1])  # the heal reaches PEERS[1] first
    healed = rig.clock.monotonic()
    # until the shortest suspicion time after the heal (the score that the split raised decays)
    while rig.clock.monotonic() - healed < rig.options.detection_time - rig.options.probe_interval:
        await advance_heartbeating(rig, rig.options.probe_interval, PEERS[:3])
        assert late.votes_cast == 0  # before the fix it voted a probe interval after the heal
    assert rig.cluster.may_vote()
    assert late.suspected()
    heard.add(PEERS[2])  # ...and PEERS[2] a moment later
    await advance_heartbeating(rig, 2 * late.suspect_after(), PEERS[:3])
    assert late.votes_cast == 0
    await rig.cluster.stop()


@async_test
async def test_after_a_heal_a_silo_still_silent_is_voted_on_its_silence_since_the_heal() -> None:
    heard = {PEERS[0]}
    rig = await even_split_rig(heard)
    late = rig.cluster.monitors[PEERS[2]]
    heard.add(PEERS[1])
    healed = rig.clock.monotonic()
    await advance_heartbeating(rig, late.suspect_after() + 4 * rig.options.probe_timeout, PEERS[:3])
    assert late.votes_cast >= 1  # it never answered after the heal: a death in the split
    assert rig.prober.indirect_calls  # after a new indirect round
    assert rig.clock.monotonic() - healed >= late.suspect_after()
    await rig.cluster.stop()


@async_test
async def test_a_majority_regained_because_crashed_silos_went_stale_votes_at_once() -> None:
    """Two of four crash: the survivor hears 1 of 3 and may not vote until the two stop counting
    (stale heartbeats). That is no heal: their silence still counts, and they are voted on at once."""
    heard = {PEERS[0]}
    rig = await even_split_rig(heard)
    crashed = [rig.cluster.monitors[PEERS[1]], rig.cluster.monitors[PEERS[2]]]
    while rig.liveness.is_fresh(PEERS[1]) or rig.liveness.is_fresh(PEERS[2]):
        assert not rig.cluster.may_vote()
        await advance_heartbeating(rig, rig.options.probe_interval, [PEERS[0]])
    await advance_heartbeating(rig, 2 * rig.options.probe_interval, [PEERS[0]])
    assert all(monitor.votes_cast >= 1 for monitor in crashed)
    await rig.cluster.stop()


RING_OF_TWO = replace(SiloOptions.local(), num_probed_silos=2, num_votes_for_death_declaration=2)
TWELVE = [address(port) for port in range(2, 13)]  # ME and 11 others: ring sampling with 2 targets


async def rig_among(peers: list[SiloAddress], options: SiloOptions, our_side: set[SiloAddress] | None = None) -> Rig:
    """ME among ``peers`` (all fresh and Active), one probe interval after the view arrived,
    reaching only ``our_side`` (everyone if None)."""
    reachable = (lambda silo: True) if our_side is None else (lambda silo: silo in our_side)
    rig = Rig(reachable=reachable, options=options)
    snapshot = view(row(ME), *(row(peer) for peer in peers), version=1)
    rig.liveness.observe(snapshot)
    rig.cluster.start()
    await rig.publisher.publish(snapshot)
    await rig.clock.advance(rig.options.probe_interval)
    return rig


async def ring_sampling_rig(our_side: set[SiloAddress]) -> Rig:
    """ME among 12 fresh Active silos, monitoring 2, hearing only ``our_side`` (a symmetric cut)."""
    return await rig_among(TWELVE, RING_OF_TWO, our_side)


@async_test
async def test_new_monitors_that_had_no_detection_time_yet_do_not_make_a_silo_reread() -> None:
    rig = Rig(reachable=lambda silo: False)  # nobody answers: a minority, once the monitors had their chance
    clock, publisher, liveness, cluster, options, rereads = (
        rig.clock, rig.publisher, rig.liveness, rig.cluster, rig.options, rig.rereads
    )  # fmt: skip
    snapshot = view(row(ME), *(row(peer) for peer in PEERS[:4]), version=1)
    liveness.observe(snapshot)
    cluster.start()
    await publisher.publish(snapshot)
    while clock.monotonic() + options.probe_timeout < options.detection_time:
        await clock.advance(options.probe_timeout)
    assert rereads == []  # not judged yet (a join storm creates monitors all the time)
    await clock.advance(options.detection_time)
    liveness.observe(view(row(ME), *(row(peer, when=clock.now()) for peer in PEERS[:4]), version=1))
    await clock.advance(options.probe_timeout * 2)
    assert rereads  # silent for a whole detection time: we look for our verdict


@async_test
async def test_with_ring_sampling_a_minority_silo_that_hears_its_sample_still_does_not_vote() -> None:
    sample = probe_targets(ME, [ME, *TWELVE], RING_OF_TWO.num_probed_silos)
    minority = {*sample, *[peer for peer in TWELVE if peer not in sample][:3]}  # 6 of 12 with us: not a strict majority
    rig = await ring_sampling_rig(minority)
    assert set(rig.cluster.monitors) == set(sample)
    assert rig.cluster.may_vote()  # our sample alone would let us vote against the other side
    assert not await rig.cluster.reaches_majority()
    assert rig.cluster.majority_pings == len(TWELVE) - len(sample)  # asked everyone before giving up
    await rig.cluster.stop()


@async_test
async def test_with_ring_sampling_the_check_that_finds_a_heal_does_not_let_a_vote_through() -> None:
    sample = probe_targets(ME, [ME, *TWELVE], RING_OF_TWO.num_probed_silos)
    our_side = {*sample, *[peer for peer in TWELVE if peer not in sample][:3]}  # 6 of 12 with us
    rig = await ring_sampling_rig(our_side)
    assert not await rig.cluster.reaches_majority()
    our_side.update(TWELVE)  # the cut heals
    assert not await rig.cluster.reaches_majority()  # a heal: the monitors' silences are disregarded
    assert await rig.cluster.reaches_majority()  # from then on the majority holds
    await rig.cluster.stop()


def test_majority_history_tells_a_heal_from_a_shrinking_cluster() -> None:
    history = MajorityHistory()
    assert not history.observe(True, 3)  # never failed
    assert not history.observe(False, 1)
    assert not history.observe(False, 2)
    assert not history.observe(True, 2)  # no more heard than while failing: the fresh set shrank
    assert not history.observe(False, 2)
    assert history.observe(True, 3)  # more heard: a heal
    assert not history.observe(True, 4)  # once


@async_test
async def test_with_ring_sampling_the_majority_side_votes_after_pinging_only_enough_silos() -> None:
    sample = probe_targets(ME, [ME, *TWELVE], RING_OF_TWO.num_probed_silos)
    majority = {*sample, *[peer for peer in TWELVE if peer not in sample][:5]}  # 8 of 12 with us
    rig = await ring_sampling_rig(majority)
    checks = await asyncio.gather(rig.cluster.reaches_majority(), rig.cluster.reaches_majority())
    assert checks == [True, True]
    pings = rig.cluster.majority_pings
    assert 4 <= pings < len(TWELVE) - len(sample)  # 2 heard + 4 pinged = 7 of 12: it stops there
    assert await rig.cluster.reaches_majority()
    assert rig.cluster.majority_pings == pings  # concurrent callers shared one check; it holds a probe interval
    await rig.clock.advance(rig.options.probe_interval)
    assert await rig.cluster.reaches_majority()
    assert rig.cluster.majority_pings > pings  # then it is checked again
    await rig.cluster.stop()


@async_test
async def test_with_ring_sampling_a_majority_silo_whose_sample_is_all_across_the_cut_still_votes() -> None:
    """Our two targets on the minority side: they fall silent, yet we reach 8 of 12 and may vote."""
    sample = probe_targets(ME, [ME, *TWELVE], RING_OF_TWO.num_probed_silos)
    majority = {peer for peer in TWELVE if peer not in sample}  # 9 others + us of 12, none of our sample
    rig = await ring_sampling_rig(majority)
    await rig.clock.advance(RING_OF_TWO.detection_time)
    assert not rig.cluster.may_vote()  # the monitored-silos rule alone would silence a majority silo
    assert rig.cluster.may_try_vote()  # under ring sampling the global rule decides
    assert await rig.cluster.reaches_majority()
    await rig.cluster.stop()


@async_test
async def test_with_every_silo_monitored_the_majority_check_sends_no_extra_pings() -> None:
    rig = Rig(options=SiloOptions.local())
    snapshot = view(row(ME), *(row(peer) for peer in PEERS[:4]), version=1)
    rig.liveness.observe(snapshot)
    rig.cluster.start()
    await rig.publisher.publish(snapshot)
    await rig.clock.advance(rig.options.probe_interval)
    assert await rig.cluster.reaches_majority()
    assert rig.cluster.majority_pings == 0
    await rig.cluster.stop()


FORTY = [address(port) for port in range(100, 140)]
RING_OF_TWO_FANOUT_FOUR = replace(RING_OF_TWO, gossip_fanout=4)


async def forty_silo_rig() -> Rig:
    """ME among 41 fresh Active silos that all answer, monitoring 2, sending gossip to 4 arc heads."""
    return await rig_among(FORTY, RING_OF_TWO_FANOUT_FOUR)


@async_test
async def test_the_majority_check_pings_our_gossip_arc_heads_first() -> None:
    """Their channels are open: the first pings of a check cost no channel setup."""
    rig = await forty_silo_rig()
    heads = set(gossip_peers(ME, FORTY, 4)) - set(rig.cluster.monitors)
    rig.prober.pings.clear()
    assert await rig.cluster.reaches_majority()
    assert set(rig.prober.pings[: len(heads)]) == heads
    assert len(rig.prober.pings) < len(FORTY)  # and it stops once a majority answered
    await rig.cluster.stop()


@async_test
async def test_indirect_probes_go_through_our_gossip_arc_heads_while_there_are_enough() -> None:
    rig = await forty_silo_rig()
    assert set(rig.cluster.intermediaries()) == set(gossip_peers(ME, FORTY, 4))
    await rig.cluster.stop()
    few_heads = Rig(options=replace(RING_OF_TWO, gossip_fanout=3))  # 3 arc heads: one may be the target
    snapshot = view(row(ME), *(row(peer) for peer in FORTY), version=1)
    few_heads.liveness.observe(snapshot)
    await few_heads.publisher.publish(snapshot)
    assert set(few_heads.cluster.intermediaries()) == set(FORTY)


THREE_HUNDRED = [address(port) for port in range(1000, 1300)]


async def large_rig(our_side: set[SiloAddress]) -> Rig:
    """ME among 301 fresh Active silos, monitoring 2, reaching only ``our_side``."""
    rig = await rig_among(THREE_HUNDRED, RING_OF_TWO, our_side)
    rig.prober.pings.clear()
    return rig


@async_test
async def test_in_a_large_cluster_a_sample_that_answers_confirms_the_majority_without_pinging_half() -> None:
    rig = await large_rig(set(THREE_HUNDRED))
    assert await rig.cluster.reaches_majority()
    assert len(rig.prober.pings) == math.ceil(MAJORITY_SAMPLE_SHARE * MAJORITY_SAMPLE)  # not 150
    await rig.cluster.stop()


@async_test
async def test_in_a_large_cluster_a_minority_silo_pings_everyone_and_does_not_vote() -> None:
    rig = await large_rig(set(THREE_HUNDRED[:140]))  # 141 of 301 with us
    assert not await rig.cluster.reaches_majority()
    assert len(rig.prober.pings) == len(THREE_HUNDRED) - len(rig.cluster.monitors)
    await rig.cluster.stop()


@async_test
async def test_in_a_large_cluster_a_narrow_majority_is_counted_silo_by_silo() -> None:
    """55% reachable: a sample shows less than three quarters, so every silo counts (exact rule)."""
    rig = await large_rig(set(THREE_HUNDRED[:165]))
    assert await rig.cluster.reaches_majority()
    assert len(rig.prober.pings) > MAJORITY_SAMPLE
    await rig.cluster.stop()


@async_test
async def test_a_lagging_silo_whose_sample_falls_short_does_not_vote_and_pings_no_more() -> None:
    """An overloaded silo's missing answers are likely its own slowness: no N / 2 pings on top."""
    rig = await large_rig(set(THREE_HUNDRED[:165]))
    rig.health.record_loop_lag(rig.options.probe_timeout)
    assert rig.health.lagging()
    assert not await rig.cluster.reaches_majority()
    assert len(rig.prober.pings) == MAJORITY_SAMPLE
    await rig.cluster.stop()


@pytest.mark.parametrize("silos", [LARGE_VIEW - 8, LARGE_VIEW + 8], ids=["small view", "large view"])
@async_test
async def test_in_a_large_view_probe_targets_follow_the_latest_view_at_most_once_a_probe_interval(silos: int) -> None:
    """Each update is O(N): in a large cluster, changes gossiped in between are taken together."""
    peers = [address(port) for port in range(2000, 2000 + silos)]
    rig = await rig_among(peers, SiloOptions.local())
    before = set(rig.cluster.monitors)
    assert len(before) == rig.options.num_probed_silos
    # A silo joins right after us on every ring: our new successor on each.
    newcomer = next(
        candidate
        for port in range(3000, 4000)
        if set(probe_targets(ME, [*peers, candidate := address(port)], 1)) == {candidate}
    )
    await rig.publisher.publish(view(row(ME), *(row(peer) for peer in peers), version=2))  # taken at once
    await rig.clock.advance(0)
    snapshot = view(row(ME), *(row(peer) for peer in [*peers, newcomer]), version=3)
    rig.liveness.observe(snapshot)
    await rig.publisher.publish(snapshot)
    await rig.clock.advance(0)
    large = len(snapshot.entries) > LARGE_VIEW
    assert (newcomer in rig.cluster.monitors) is not large
    await rig.clock.advance(rig.options.effective_probe_interval)
    assert newcomer in rig.cluster.monitors
    await rig.cluster.stop()


def probers_of(
    suspect: SiloAddress, snapshot: MembershipSnapshot, is_fresh: Callable[[SiloAddress], bool]
) -> set[SiloAddress]:
    """The silos of ``snapshot`` that probe ``suspect``, each choosing its targets as a monitor does."""
    options = SiloOptions(num_probed_silos=3)
    probers = set()
    for local in (entry.silo_address for entry in snapshot.entries):
        watchers = SuspectWatchers(local, options.num_probed_silos, is_fresh).for_view(snapshot)
        if suspect in select_targets(snapshot, local, NOW, options, is_fresh, watches=watchers):
            probers.add(local)
    return probers


@pytest.mark.parametrize("silos", [LARGE_VIEW - 4, LARGE_VIEW + 36], ids=["small view", "large view"])
def test_in_a_large_view_a_suspect_is_probed_by_its_ring_probers_and_a_few_watchers_not_by_all(silos: int) -> None:
    """One vote made every silo of a 1,000-silo cluster probe the suspect, then check its majority and try to vote."""
    peers = [address(port) for port in range(2000, 2000 + silos)]
    suspect, voter, stuck = peers[0], peers[1], peers[2]
    snapshot = view(
        row(suspect, when=NOW).replace(suspect_times=((voter, NOW),)),
        row(stuck, SiloStatus.JOINING, when=NOW),  # stale: it never became Active
        *(row(peer, when=NOW) for peer in [*peers[3:], voter]),
    )
    is_fresh = lambda silo: silo != stuck  # noqa: E731
    ring_probers = {silo for silo in snapshot.active_silos if suspect in probe_targets(silo, snapshot.active_silos, 3)}
    if not snapshot.large:
        assert probers_of(suspect, snapshot, is_fresh) == set(peers) - {suspect}
        assert probers_of(stuck, snapshot, is_fresh) == set(peers) - {stuck}
        return
    watchers = list(itertools.islice(filter(is_fresh, ring_index(snapshot.active_silos).preceding(suspect)), 3))
    assert probers_of(suspect, snapshot, is_fresh) == ring_probers | set(watchers)
    assert len(probers_of(stuck, snapshot, is_fresh)) == 3  # off the ring: its watchers only


@async_test
async def test_in_a_large_view_a_silo_whose_full_reads_stopped_watches_no_peer_as_stale() -> None:
    """In a 2,000-silo storm, silos whose full reads had stopped for minutes found every peer stale
    and, counting only fresh silos before each suspect, watched every Active silo: 900 monitors each."""
    peers = [address(port) for port in range(2000, 2000 + LARGE_VIEW + 8)]
    rig = await rig_among(peers, SiloOptions.local())
    ring = set(rig.cluster.monitors)
    assert len(ring) == rig.options.num_probed_silos
    await rig.clock.advance(10 * rig.liveness.limit)  # no full read of ours meanwhile
    await rig.cluster.update(rig.publisher.current or view())
    assert set(rig.cluster.monitors) == ring, "nobody went stale while we could not watch"
    await rig.cluster.stop()


ELEVEN_PEERS = [address(port) for port in range(2, 12)]
"""The silos besides ME of the 11-silo rings below."""


async def five_ring_targets_and_a_suspect_off_the_ring(rings: int = 5) -> tuple[Rig, list[SiloAddress], SiloAddress]:
    """ME among 11 Active silos, probing 5 ring targets (or ``rings``), one other silo suspected by
    ring[0]: (the rig, after its first ``update``; our ring targets in order; the suspect)."""
    options = replace(SiloOptions.local(), num_probed_silos=rings)
    rig = Rig(options=options)
    peers = ELEVEN_PEERS
    ring = probe_targets(ME, [ME, *peers], options.num_probed_silos)
    suspect = next(peer for peer in peers if peer not in ring)
    snapshot = view(
        row(ME), *(row(peer) for peer in peers if peer != suspect), row(suspect).replace(suspect_times=((ring[0], T0),))
    )
    rig.liveness.observe(snapshot)
    await rig.cluster.update(snapshot)
    return rig, ring, suspect


@pytest.mark.parametrize(
    ("rings", "steps", "phases"),
    [
        # two quorums of ring targets: two phases of the grid, a quorum of first ranks in each
        (5, [0, 0, 0, 0, 1], [0, 0, 0.5, 0.5, 0]),
        # fewer (Orleans' 3 probed silos at scale): one grid, one quorum of first ranks
        (3, [0, 0, 1], [0, 0, 0]),
    ],
)
@async_test
async def test_votes_are_staggered_by_our_rank_among_the_targets_monitors_per_grid_phase(
    rings: int, steps: list[int], phases: list[float]
) -> None:
    """Ring targets among whose monitors we rank first (``targets.monitors_in_rank_order``),
    ``num_votes_for_death_declaration`` of them per grid phase (``targets.RingTargets``), get our
    vote at once, each later one a step later (up to ``VOTE_STAGGER_RANKS`` steps), a suspect
    off our ring the last: the first monitors of the phase that heard a dead silo the longer ago
    complete its quorum before the others' turn."""
    rig, ring, suspect = await five_ring_targets_and_a_suspect_off_the_ring(rings)
    silos = (ME, *ELEVEN_PEERS)
    ranks = [RingTargets.of(view(*map(row, silos)), ME, rig.options).ranks[target] for target in ring]
    assert ranks == list(range(rings))  # on these rings our rank is the target's place in our ring order
    assert suspect in rig.cluster.monitors  # probed, though off our ring
    step = VOTE_STAGGER_STEP * rig.options.probe_timeout
    assert [rig.cluster.vote_delay(target) for target in ring] == pytest.approx([count * step for count in steps])
    assert rig.cluster.vote_delay(suspect) == pytest.approx(VOTE_STAGGER_RANKS * step)
    assert [rig.cluster.monitors[target].phase for target in ring] == phases
    assert rig.cluster.monitors[suspect].phase == 0
    await rig.cluster.stop()


@async_test
async def test_a_backup_holds_its_vote_once_more_while_another_silos_fresh_vote_is_in_the_view() -> None:
    """Our turn came after a first vote against the target: the first ranks are completing its
    quorum, and voting too would read the table and race them."""
    rig, ring, expired = await five_ring_targets_and_a_suspect_off_the_ring(rings=7)
    first, *_, backup, unvoted, mine_only = ring  # two grid phases: ranks 4 to 6 are backups
    now = rig.clock.now()
    old = now - timedelta(seconds=rig.options.death_vote_expiration + 1)
    votes = {
        first: ((PEERS[0], now),),
        backup: ((PEERS[0], now),),
        mine_only: ((ME, now),),
        expired: ((PEERS[0], old),),
    }
    others = [row(peer) for peer in ELEVEN_PEERS if peer not in votes]
    voted = [row(silo).replace(suspect_times=times) for silo, times in votes.items()]
    snapshot = view(row(ME), *others, *voted, version=2)
    await rig.publisher.publish(snapshot)
    assert probe_targets(ME, snapshot.active_silos, rig.options.num_probed_silos) == ring
    assert rig.cluster.vote_hold(first) == 0  # a first rank completes the quorum at once
    assert rig.cluster.vote_delay(backup) > 0
    assert rig.cluster.vote_hold(backup) == pytest.approx(rig.cluster.vote_delay(backup))
    assert [rig.cluster.vote_hold(silo) for silo in (unvoted, mine_only, expired)] == [0, 0, 0]
    await rig.cluster.stop()


@async_test
async def test_a_suspect_off_our_ring_is_first_probed_at_our_votes_turn_our_ring_at_once() -> None:
    """A vote makes every silo of a small cluster watch the suspect: probing it at once, each
    opened a channel to it and asked intermediaries about it just before the death's gossip."""
    rig, ring, suspect = await five_ring_targets_and_a_suspect_off_the_ring()
    turn = rig.cluster.vote_delay(suspect)
    await rig.clock.advance(turn - 0.01)
    assert set(rig.prober.pings) == set(ring)
    await rig.clock.advance(0.02)
    assert suspect in rig.prober.pings
    await rig.cluster.stop()


@async_test
async def test_a_watched_suspect_that_never_answered_us_stays_watched_after_its_votes_expire() -> None:
    """Our vote needs our own silence: a watch stopped with the votes that started it lost that
    silence, and a watcher whose suspicion time outlasts the vote expiry never voted beside the
    next vote (a 4|3 cut of 7 with ring sampling: a cut-off silo Active for 30 s). The watch ends
    when the suspect answers us, or leaves."""
    rig, _, suspect = await five_ring_targets_and_a_suspect_off_the_ring()
    rig.reachable = lambda silo: silo != suspect
    watch = rig.cluster.monitors[suspect]
    await rig.clock.advance(rig.options.death_vote_expiration + 1)
    everyone = [row(ME), *(row(peer) for peer in ELEVEN_PEERS)]  # the vote against the suspect expired
    await rig.cluster.update(view(*everyone, version=2))
    assert rig.cluster.monitors.get(suspect) is watch  # never answered us: still watched, its silence kept
    rig.reachable = lambda silo: True
    await rig.clock.advance(rig.options.effective_probe_interval + rig.options.probe_timeout)
    assert watch.answered
    await rig.cluster.update(view(*everyone, version=3))
    assert suspect not in rig.cluster.monitors  # it answered: an ordinary silo off our ring again
    await rig.cluster.stop()


@async_test
async def test_a_watched_suspect_that_leaves_is_no_longer_watched() -> None:
    rig, _, suspect = await five_ring_targets_and_a_suspect_off_the_ring()
    rig.reachable = lambda silo: silo != suspect
    await rig.clock.advance(rig.cluster.vote_delay(suspect) + 0.01)
    others = [row(ME), *(row(peer) for peer in ELEVEN_PEERS if peer != suspect)]
    await rig.cluster.update(view(*others, row(suspect, SiloStatus.DEAD), version=2))
    assert suspect not in rig.cluster.monitors
    await rig.cluster.stop()


@async_test
async def test_in_a_large_view_a_watch_kept_after_the_votes_ends_when_we_are_no_longer_a_watcher() -> None:
    """Watchers move as silos join: a stuck joiner of a storm kept every silo that was ever its
    watcher, and their probes, unless the watch ends with our turn as a watcher."""
    options = replace(SiloOptions.local(), num_probed_silos=3)
    peers = [address(port) for port in range(2000, 2000 + LARGE_VIEW + 16)]
    active = [ME, *peers]

    def watchers(silos: list[SiloAddress], suspect: SiloAddress) -> list[SiloAddress]:
        return list(itertools.islice(ring_index(tuple(silos)).preceding(suspect), 3))

    suspect = next(peer for peer in peers if ME in watchers(active, peer) and peer not in probe_targets(ME, active, 3))
    newcomers = [
        candidate
        for port in range(5000, 6000)
        if (candidate := address(port)) in watchers([*active, candidate], suspect)
    ][:3]
    assert ME not in watchers([*active, *newcomers], suspect)
    rig = Rig(reachable=lambda silo: silo != suspect, options=options)
    voted = view(row(ME), *(row(peer) for peer in peers if peer != suspect),
                 row(suspect).replace(suspect_times=((peers[0], T0),)), version=1)  # fmt: skip
    rig.liveness.observe(voted)
    await rig.cluster.update(voted)
    watch = rig.cluster.monitors[suspect]
    await rig.clock.advance(options.death_vote_expiration + 1)
    unvoted = [row(ME), *(row(peer) for peer in peers)]
    await rig.cluster.update(view(*unvoted, version=2))
    assert rig.cluster.monitors.get(suspect) is watch  # still a watcher: kept, though the votes expired
    joined = view(*unvoted, *(row(silo) for silo in newcomers), version=3)
    rig.liveness.observe(joined)
    await rig.cluster.update(joined)
    assert suspect not in rig.cluster.monitors
    await rig.cluster.stop()


class Midpoint(random.Random):
    """``uniform`` gives the middle of its range: a random point a test can name."""

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2


@async_test
async def test_a_ring_target_new_after_our_first_ring_is_first_probed_within_an_interval_not_at_once() -> None:
    """A death gives several monitors a new target as its gossip arrives: their new ping streams
    were set up in the middle of the death's spread, on the cores its other receivers needed."""
    options = replace(SiloOptions.local(), num_probed_silos=5)
    rig = Rig(options=options, rng=Midpoint(0))
    peers = ELEVEN_PEERS
    ring = probe_targets(ME, [ME, *peers], options.num_probed_silos)
    first = view(row(ME), *(row(peer) for peer in peers), version=1)
    rig.liveness.observe(first)
    await rig.cluster.update(first)
    await rig.clock.advance(0.001)
    assert set(rig.prober.pings) == set(ring)  # our first ring: at once

    dead = ring[0]
    after = view(row(ME), row(dead, SiloStatus.DEAD), *(row(peer) for peer in peers if peer != dead), version=2)
    rig.liveness.observe(after)
    await rig.cluster.update(after)
    [new] = set(rig.cluster.monitors) - set(ring)
    half = options.effective_probe_interval / 2
    await rig.clock.advance(half - 0.01)
    assert new not in rig.prober.pings
    await rig.clock.advance(0.02)
    assert new in rig.prober.pings
    await rig.cluster.stop()
