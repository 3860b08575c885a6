"""``benchmarks.silo_cluster.victim_death_seen``: a survivor's stream message says when it saw the death."""

from __future__ import annotations

from datetime import timedelta

from benchmarks.silo_cluster import victim_death_seen
from membership_tables import MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.events import EventKind, MembershipEvent
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from tests.silo.harness import T0, address, row

SURVIVOR, VICTIM, OTHER = address(1), address(2), address(3)
SEEN = T0 + timedelta(seconds=5)


def message(victim_status: SiloStatus | None, *events: MembershipEvent) -> pb.MembershipView:
    entries = [row(SURVIVOR), row(OTHER)] + ([] if victim_status is None else [row(VICTIM, victim_status)])
    data = MembershipTableData(tuple((entry, "etag") for entry in entries), TableVersion(7, "v7"))
    return codec.view_to_proto(data, SURVIVOR, events)


def event(kind: EventKind, silo: SiloAddress) -> MembershipEvent:
    return MembershipEvent(kind=kind, silo=silo, name="", version=7, at=T0, observed_at=SEEN)


def test_the_death_event_gives_the_survivors_own_time() -> None:
    seen = victim_death_seen(message(SiloStatus.DEAD, event(EventKind.DECLARED_DEAD, VICTIM)), VICTIM)
    assert seen == SEEN.timestamp()


def test_a_view_that_still_holds_the_victim_is_not_a_death() -> None:
    assert victim_death_seen(message(SiloStatus.ACTIVE), VICTIM) is None
    assert victim_death_seen(message(SiloStatus.ACTIVE, event(EventKind.DECLARED_DEAD, OTHER)), VICTIM) is None


def test_a_victim_dead_or_gone_without_an_event_counts_from_the_message() -> None:
    assert victim_death_seen(message(SiloStatus.DEAD), VICTIM) == 0.0
    assert victim_death_seen(message(None), VICTIM) == 0.0
