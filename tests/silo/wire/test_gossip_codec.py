"""Gossip on the wire: a message survives the round trip, and one we could never send is refused."""

from __future__ import annotations

import dataclasses

import pytest

from membership_tables import InvalidEntryError, TableVersion
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import MembershipDelta
from silo.wire import codec
from silo.wire.gossip_codec import delta_to_proto, gossip_from_proto, gossip_to_proto
from tests.silo.harness import T0, address, row

HEADER = codec.header("c", address(1))


@pytest.mark.parametrize("since", [None, 1, 3])
def test_a_delta_and_its_relays_survive_the_round_trip(since: int | None) -> None:
    delta = MembershipDelta(5, TableVersion(6, "v6"), ((row(address(2)), "e2"), (row(address(3)), "e3")), since)
    message = GossipMessage(6, delta, (address(4), address(5)))
    assert gossip_from_proto(gossip_to_proto(message, HEADER)) == message


def test_a_delta_encoded_once_gives_the_same_request_for_each_relay() -> None:
    delta = MembershipDelta(5, TableVersion(6, "v6"), ((row(address(2)), "e2"),))
    encoded = delta_to_proto(delta)
    for relays in ((), (address(4),), (address(5), address(6))):
        message = GossipMessage(6, delta, relays)
        assert gossip_to_proto(message, HEADER, encoded) == gossip_to_proto(message, HEADER)


def test_a_delta_said_to_apply_after_its_base_is_refused() -> None:
    request = gossip_to_proto(
        GossipMessage(6, MembershipDelta(5, TableVersion(6, "v6"), ((row(address(2)), "e"),))), HEADER
    )
    request.delta.since_version = 6
    with pytest.raises(ValueError, match="at or before its base"):
        gossip_from_proto(request)


@pytest.mark.parametrize("field", ["start_time_unix_micros", "i_am_alive_time_unix_micros", "vote"])
@pytest.mark.parametrize("micros", [-(2**63) + 1, 2**62])
def test_a_row_with_a_time_past_any_calendar_is_refused_as_invalid(field: str, micros: int) -> None:
    voted = dataclasses.replace(row(address(2)), suspect_times=((address(3), T0),))
    request = gossip_to_proto(GossipMessage(6, MembershipDelta(5, TableVersion(6, "v6"), ((voted, "e"),))), HEADER)
    wire_row = request.delta.rows[0]
    if field == "vote":
        wire_row.suspicions[0].at_unix_micros = micros
    else:
        setattr(wire_row, field, micros)
    with pytest.raises(InvalidEntryError, match="out of range"):
        gossip_from_proto(request)
