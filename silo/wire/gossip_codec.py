"""Gossip on the wire: ``GossipMessage`` (with its delta and relay list) <-> ``GossipRequest``.

Apart from ``silo.wire.codec`` because it speaks the membership protocol's types, which the
client library, work callers and Spark (who use the codec) must never load.
"""

from __future__ import annotations

from membership_tables import TableVersion
from silo.membership.probing import GossipMessage
from silo.membership.snapshot import MembershipDelta
from silo.wire.codec import address_from_proto, address_to_proto, entry_from_proto, entry_to_proto
from silo.wire.proto.silo.v1 import membership_pb2 as pb


def gossip_to_proto(
    message: GossipMessage, request_header: pb.RequestHeader, encoded_delta: pb.MembershipDelta | None = None
) -> pb.GossipRequest:
    """``encoded_delta``: ``delta_to_proto(message.delta)`` if the caller has it already (one write
    goes to many silos: its rows need encoding once)."""
    request = pb.GossipRequest(
        header=request_header,
        version=message.version,
        relay_to=[address_to_proto(silo) for silo in message.relay_to],
    )
    if message.delta is not None:
        request.delta.CopyFrom(encoded_delta if encoded_delta is not None else delta_to_proto(message.delta))
    return request


def delta_to_proto(delta: MembershipDelta) -> pb.MembershipDelta:
    return pb.MembershipDelta(
        base_version=delta.base_version,
        version_etag=delta.version.etag,
        rows=[entry_to_proto(entry, etag) for entry, etag in delta.rows],
        since_version=delta.since_version or 0,
    )


def gossip_from_proto(request: pb.GossipRequest) -> GossipMessage:
    """The message a peer sent; raises ``InvalidEntryError`` or ``ValueError`` if it is not one we could send."""
    delta = None
    if request.HasField("delta"):
        delta = MembershipDelta(
            base_version=request.delta.base_version,
            version=TableVersion(request.version, request.delta.version_etag),
            rows=tuple(entry_from_proto(row) for row in request.delta.rows),
            since_version=request.delta.since_version or None,
        )
    return GossipMessage(request.version, delta, tuple(address_from_proto(silo) for silo in request.relay_to))
