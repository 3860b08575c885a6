from __future__ import annotations

from datetime import timedelta

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import FakeClock, settle
from silo.membership.gossiper import Gossiper, gossip_targets
from silo.membership.options import SiloOptions
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

    async def deliver(target: SiloAddress, version: int) -> None:
        if target == address(3):
            raise ConnectionError("unreachable")

    sender = RecordingGossip(deliver=deliver)
    gossiper = Gossiper(address=ME, options=SiloOptions(), clock=clock, sender=sender, is_fresh=is_fresh)
    gossiper.publish(17, SNAPSHOT)
    await settle()
    assert sorted(sender.sent) == [(address(2), 17), (address(3), 17), (address(4), 17), (address(5), 17)]
    await gossiper.stop()


@async_test
async def test_gossip_can_be_disabled() -> None:
    sender = RecordingGossip()
    options = SiloOptions(use_liveness_gossip=False)
    Gossiper(address=ME, options=options, clock=FakeClock(NOW), sender=sender, is_fresh=is_fresh).publish(3, SNAPSHOT)
    await settle()
    assert sender.sent == []
