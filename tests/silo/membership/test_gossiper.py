from __future__ import annotations

import asyncio
from datetime import timedelta

from membership_tables import SiloAddress, SiloStatus, TableVersion
from silo.membership.clock import FakeClock, settle
from silo.membership.gossiper import Gossiper, gossip_targets, relay_plan
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage, NotDeliveredError
from silo.membership.ring import ring_order
from silo.membership.snapshot import MembershipDelta
from tests.silo.harness import T0, RecordingGossip, address, async_test, row, view

ME = address(1)
STATUSES = {
    address(2): SiloStatus.JOINING,
    address(3): SiloStatus.ACTIVE,
    address(4): SiloStatus.SHUTTING_DOWN,
    address(5): SiloStatus.STOPPING,
    address(6): SiloStatus.DEAD,
    address(7): SiloStatus.CREATED,
}
STALE = address(8)
PEER_ACTIVE = address(9)
NOW = T0 + timedelta(seconds=10)
SNAPSHOT = view(
    row(ME),
    *(row(silo, status, when=NOW) for silo, status in STATUSES.items()),
    row(STALE, when=NOW - timedelta(seconds=91)),
)


def is_fresh(silo: SiloAddress) -> bool:
    return silo != STALE


def test_gossip_goes_to_every_other_live_fresh_silo() -> None:
    assert gossip_targets(SNAPSHOT, ME, is_fresh) == [address(2), address(3), address(4), address(5)]


def test_a_silo_declared_dead_is_told_too() -> None:
    assert gossip_targets(SNAPSHOT, ME, is_fresh, declared_dead=(address(6),)) == [
        address(2),
        address(3),
        address(4),
        address(5),
        address(6),
    ]


@async_test
async def test_each_write_is_gossiped_fire_and_forget() -> None:
    clock = FakeClock(NOW)

    async def deliver(target: SiloAddress, message: GossipMessage) -> None:
        if target == address(3):
            raise ConnectionError("unreachable")

    sender = RecordingGossip(deliver=deliver)
    gossiper = Gossiper(address=ME, options=SiloOptions(), clock=clock, sender=sender, is_fresh=is_fresh)
    gossiper.publish(GossipMessage(17), SNAPSHOT)
    await settle()
    assert sorted(sender.sent) == [(address(2), 17), (address(3), 17), (address(4), 17), (address(5), 17)]
    await gossiper.stop()


async def stop_after(gossiper: Gossiper, clock: FakeClock, drain: float, waited: float) -> bool:
    """Stop ``gossiper`` with ``drain``, advancing ``clock`` by ``waited``: whether the stop is done."""
    stopping = asyncio.ensure_future(gossiper.stop(drain=drain))
    await clock.advance(waited)
    await settle()
    return stopping.done()


@async_test
async def test_stopping_lets_the_sends_under_way_and_the_re_deals_of_failed_relays_finish() -> None:
    """A leaving silo stops right after gossiping its Dead row: the sends still under way, and the
    re-deal of a failed relay's arc, get ``drain`` seconds (they were cancelled at once)."""
    clock = FakeClock(NOW)
    delivered: list[SiloAddress] = []

    async def deliver(target: SiloAddress, message: GossipMessage) -> None:
        await clock.sleep(0.3)
        if message.relay_to:
            raise ConnectionError("every relay is down")
        delivered.append(target)

    targets = [address(port) for port in range(2, 8)]
    gossiper = Gossiper(
        address=ME, options=SiloOptions(gossip_fanout=2), clock=clock, sender=RecordingGossip(deliver=deliver),
        is_fresh=lambda silo: True,
    )  # fmt: skip
    gossiper.publish(GossipMessage(9), view(row(ME), *(row(target, when=NOW) for target in targets)))
    await settle()
    assert await stop_after(gossiper, clock, drain=1.5, waited=1.0)  # two sends in flight at a time: 0.9 s
    heads = {target for target, arc in relay_plan(ring_order(ME, targets), 2) if arc}
    assert len(heads) == 2
    assert sorted(delivered) == sorted(set(targets) - heads)  # each arc re-dealt by us, then delivered


@async_test
async def test_stopping_gives_up_on_a_send_that_outlasts_the_drain() -> None:
    clock = FakeClock(NOW)
    delivered: list[SiloAddress] = []

    async def deliver(target: SiloAddress, message: GossipMessage) -> None:
        await clock.sleep(60 if target == address(3) else 0.1)  # address(3) hangs
        delivered.append(target)

    gossiper = Gossiper(address=ME, options=SiloOptions(), clock=clock, sender=RecordingGossip(deliver=deliver),
                        is_fresh=is_fresh)  # fmt: skip
    gossiper.publish(GossipMessage(9), SNAPSHOT)
    await settle()
    assert not await stop_after(gossiper, clock, drain=1.0, waited=0.5)  # the hung send holds it...
    await clock.advance(0.5)
    await settle()
    assert sorted(delivered) == [address(2), address(4), address(5)]  # ...until the drain time is up
    assert not gossiper._sends._tasks


@async_test
async def test_gossip_can_be_disabled() -> None:
    sender = RecordingGossip()
    options = SiloOptions(use_liveness_gossip=False)
    Gossiper(address=ME, options=options, clock=FakeClock(NOW), sender=sender, is_fresh=is_fresh).publish(
        GossipMessage(3), SNAPSHOT
    )
    await settle()
    assert sender.sent == []


def test_a_relay_plan_sends_to_at_most_fanout_silos_and_covers_every_target_once() -> None:
    targets = [address(port) for port in range(100, 150)]
    assert relay_plan(targets[:4], 4) == [(silo, ()) for silo in targets[:4]]
    plan = relay_plan(targets, 4)
    assert len(plan) == 4
    covered = [silo for head, rest in plan for silo in (head, *rest)]
    assert sorted(covered) == targets
    assert max(len(rest) for _, rest in plan) - min(len(rest) for _, rest in plan) <= 1
    assert [silo for head, rest in plan for silo in (head, *rest)] == targets, "contiguous arcs, in the given order"


def test_a_silo_a_write_is_about_heads_an_arc_only_if_the_arc_is_all_such_silos() -> None:
    targets = [address(port) for port in range(100, 110)]
    plan = relay_plan(targets, 5, last={address(100), address(102), address(103)})
    assert plan[:2] == [
        (address(101), (address(100),)),  # 100 is in last: its arc-mate heads the arc
        (address(102), (address(103),)),  # both in last: one of them has to head it
    ]
    assert plan[2:] == [(address(port), (address(port + 1),)) for port in (104, 106, 108)]


class Cluster:
    """In-process gossipers wired to each other: each one relays what it receives, as the runtime does."""

    def __init__(
        self,
        size: int,
        fanout: int,
        down: frozenset[SiloAddress] = frozenset(),
        slow: frozenset[SiloAddress] = frozenset(),
    ) -> None:
        """``down``: refuse every message (``NotDeliveredError``); ``slow``: receive and relay it,
        but answer too late (the sender's call times out)."""
        self.silos = [address(port) for port in range(1, size + 1)]
        self.snapshot = view(*(row(silo) for silo in self.silos))
        self.options = SiloOptions(gossip_fanout=fanout)
        self.received: dict[SiloAddress, int] = {}
        self.direct_sends: dict[SiloAddress, int] = {}
        self.peers: dict[SiloAddress, set[SiloAddress]] = {}
        self.down = down
        self.slow = slow
        self.gossipers = {silo: self.gossiper(silo) for silo in self.silos}

    def gossiper(self, me: SiloAddress) -> Gossiper:
        async def deliver(target: SiloAddress, message: GossipMessage) -> None:
            self.direct_sends[me] = self.direct_sends.get(me, 0) + 1
            self.peers.setdefault(me, set()).add(target)
            if target in self.down:
                raise NotDeliveredError(f"{target} is down")
            self.received[target] = self.received.get(target, 0) + 1
            self.gossipers[target].relay(message, self.snapshot)
            if target in self.slow:
                raise TimeoutError(f"{target} answered too late")

        return Gossiper(
            address=me,
            options=self.options,
            clock=FakeClock(NOW),
            sender=RecordingGossip(deliver=deliver),
            is_fresh=lambda silo: True,
        )


@async_test
async def test_past_the_fanout_a_write_reaches_every_silo_exactly_once_through_relays() -> None:
    cluster = Cluster(size=200, fanout=8)
    writer = cluster.silos[0]
    cluster.gossipers[writer].publish(GossipMessage(5), cluster.snapshot)
    await settle()
    assert sorted(cluster.received) == cluster.silos[1:]
    assert set(cluster.received.values()) == {1}, "199 messages in all: no silo hears a write twice"
    assert max(cluster.direct_sends.values()) <= 8, "no silo sends one message to more than gossip_fanout silos"


@async_test
async def test_whoever_writes_a_silo_sends_gossip_to_the_same_few_silos() -> None:
    """Arcs of the ring order, not random groups: each silo's gossip peers stay few whoever the
    writer is, so its channels to them stay open (random groups reached most of the cluster)."""
    cluster = Cluster(size=300, fanout=8)
    for writer in cluster.silos[::10]:
        cluster.gossipers[writer].publish(GossipMessage(5), cluster.snapshot)
    await settle()
    assert sorted(cluster.received) == cluster.silos
    peers = max(len(targets) for targets in cluster.peers.values())
    assert peers <= 4 * 8, f"a silo sent to {peers} distinct silos over 30 writes"


@async_test
async def test_when_a_relay_is_down_the_sender_deals_its_group_out_itself() -> None:
    down = frozenset({address(port) for port in range(2, 12)})
    cluster = Cluster(size=60, fanout=4, down=down)
    cluster.gossipers[address(1)].publish(GossipMessage(5), cluster.snapshot)
    await settle()
    assert sorted(cluster.received) == [silo for silo in cluster.silos[1:] if silo not in down]


@async_test
async def test_a_relay_that_answers_too_late_is_not_replaced_its_arc_hears_the_write_once() -> None:
    """Only a relay that surely did not get the write is replaced: one that answers too late
    passed it on, and a re-deal would send it twice to its whole arc (and, measured at 1,000
    silos, re-dealing on timeouts made join storms melt down: see ``Gossiper._send``)."""
    writer = address(1)
    heads = frozenset(head for head, arc in relay_plan(ring_order(writer, [address(p) for p in range(2, 61)]), 4))
    cluster = Cluster(size=60, fanout=4, slow=heads)
    cluster.gossipers[writer].publish(GossipMessage(5), cluster.snapshot)
    await settle()
    assert sorted(cluster.received) == cluster.silos[1:]
    assert set(cluster.received.values()) == {1}


@async_test
async def test_a_receiver_relays_only_to_silos_it_knows() -> None:
    sender = RecordingGossip()
    gossiper = Gossiper(address=ME, options=SiloOptions(), clock=FakeClock(NOW), sender=sender, is_fresh=is_fresh)
    stranger = SiloAddress("10.9.9.9", 22, 1)
    gossiper.relay(GossipMessage(9, relay_to=(address(2), stranger, ME)), SNAPSHOT)
    await settle()
    assert sender.sent == [(address(2), 9)]
    assert sender.messages[0][1].relay_to == ()


def own_join_write(me: SiloAddress, status: SiloStatus) -> GossipMessage:
    delta = MembershipDelta(4, TableVersion(5, "v5"), ((row(me, status), "e"),))
    return GossipMessage(5, delta)


@async_test
async def test_in_a_join_storm_a_silos_own_join_is_left_to_the_refresh() -> None:
    joining = [row(address(port), SiloStatus.JOINING) for port in range(100, 110)]
    active = [row(address(port)) for port in range(200, 240)]
    storm = view(row(ME, SiloStatus.JOINING), *joining, *active)
    sender = RecordingGossip()
    options = SiloOptions(gossip_fanout=4)
    gossiper = Gossiper(address=ME, options=options, clock=FakeClock(NOW), sender=sender, is_fresh=lambda silo: True)
    gossiper.publish(own_join_write(ME, SiloStatus.ACTIVE), storm)
    await settle()
    assert sender.messages == []
    calm = view(row(ME, SiloStatus.JOINING), *joining[:3], *active)  # 4 joining: not more than the fanout
    gossiper.publish(own_join_write(ME, SiloStatus.ACTIVE), calm)
    await settle()
    relayed = sender.messages
    assert len(relayed) == 4
    assert sum(1 + len(message.relay_to) for _, message in relayed) == 43, "few joining: everyone hears it"


@async_test
async def test_in_a_join_storm_a_death_still_reaches_everyone() -> None:
    joining = [row(address(port), SiloStatus.JOINING) for port in range(100, 110)]
    storm = view(row(ME), *joining, row(PEER_ACTIVE))
    sender = RecordingGossip()
    gossiper = Gossiper(
        address=ME, options=SiloOptions(gossip_fanout=4), clock=FakeClock(NOW), sender=sender, is_fresh=lambda s: True
    )
    dead = row(address(100), SiloStatus.DEAD)
    gossiper.publish(GossipMessage(5, MembershipDelta(4, TableVersion(5, "v"), ((dead, "e"),))), storm, (address(100),))
    await settle()
    reached = {target for target, message in sender.messages} | {
        silo for _, message in sender.messages for silo in message.relay_to
    }
    assert reached == {address(port) for port in range(100, 110)} | {PEER_ACTIVE}


@async_test
async def test_the_silos_a_write_is_about_never_relay_it() -> None:
    """A vote's target may be dead: if it headed a relay group, its group would hear the vote only
    after the send to it failed."""
    sender = RecordingGossip()
    silos = [address(port) for port in range(2, 41)]
    snapshot = view(row(ME), *(row(silo) for silo in silos))
    suspects = silos[::7]  # six of them, among 39 targets dealt into 4 groups
    delta = MembershipDelta(4, TableVersion(5, "v5"), tuple((row(silo), f"e{silo.port}") for silo in suspects))
    for writer in (ME, *silos[1:7]):
        sender.messages.clear()
        gossiper = Gossiper(
            address=writer, options=SiloOptions(gossip_fanout=4), clock=FakeClock(NOW), sender=sender,
            is_fresh=lambda silo: True,
        )  # fmt: skip
        gossiper.publish(GossipMessage(5, delta), snapshot)
        await settle()
        heads = [target for target, message in sender.messages if message.relay_to]
        assert len(heads) == 4
        assert not set(heads) & set(suspects), writer
        covered = {silo for target, message in sender.messages for silo in (target, *message.relay_to)}
        assert covered == (set(silos) | {ME}) - {writer}
        await gossiper.stop()
