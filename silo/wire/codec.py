"""The gRPC wire format: typed RPC method descriptors and model <-> protobuf conversion.

``silo.wire.server``, ``silo.wire.prober`` and the clients build their handlers and calls from the
method descriptors here, so each RPC's path and message types are declared exactly once. Times travel as
microseconds since the Unix epoch (UTC); statuses as ``silo.v1.SiloStatus``, whose
numbers equal ``membership_tables.SiloStatus``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from google.protobuf.message import Message

from membership_tables import (
    InvalidEntryError,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)
from silo.events import EventKind, MembershipEvent
from silo.wire.proto.silo.v1 import membership_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Membership"].full_name
"""``silo.v1.Membership``: also a service name the health service reports on."""
WORK_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Work"].full_name
"""``silo.v1.Work``: application work routed to silos."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)
Message_co = TypeVar("Message_co", bound=Message, covariant=True)


Request_contra = TypeVar("Request_contra", bound=Message, contravariant=True)


class StreamCall(Protocol[Message_co]):
    """A server-streaming call in flight: iterate it for the messages; ``cancel()`` ends it."""

    def __aiter__(self) -> AsyncIterator[Message_co]: ...

    def cancel(self) -> bool: ...


class BidiCall(Protocol[Request_contra, Message_co]):
    """A bidirectional call in flight: ``write`` (one writer at a time), ``read`` (``grpc.aio.EOF`` at
    the end), ``cancel()`` ends it; ``done()`` once it has ended."""

    async def write(self, request: Request_contra) -> None: ...

    async def read(self) -> Message_co | object: ...

    def cancel(self) -> bool: ...

    def done(self) -> bool: ...


@dataclass(frozen=True)
class Method(Generic[Request, Response]):
    """One unary RPC (of the Membership service unless ``service`` says otherwise)."""

    name: str
    request: type[Request]
    response: type[Response]
    service: str = field(default=SERVICE_NAME, kw_only=True)

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"

    def bind(self, channel: Any) -> Callable[..., Awaitable[Response]]:
        """The callable for this RPC on a ``grpc.aio`` channel: ``await rpc(request, timeout=...)``."""
        rpc: Callable[..., Awaitable[Response]] = channel.unary_unary(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        )
        return rpc

    def bind_future(self, channel: Any) -> Callable[..., Any]:
        """Start this RPC on a blocking ``grpc`` channel without waiting: ``rpc(request, timeout=...)`` returns
        a ``grpc.Future`` (also the call), whose ``result()`` waits for the response."""
        future: Callable[..., Any] = channel.unary_unary(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        ).future
        return future

    def bind_sync(self, channel: Any) -> Callable[..., Response]:
        """The callable for this RPC on a blocking ``grpc`` channel: ``rpc(request, timeout=...)``."""
        rpc: Callable[..., Response] = channel.unary_unary(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        )
        return rpc


@dataclass(frozen=True)
class _StreamingMethod(Generic[Request, Response]):
    """What every streaming RPC of the Membership service has: its name, message types and path."""

    name: str
    request: type[Request]
    response: type[Response]

    @property
    def path(self) -> str:
        return f"/{SERVICE_NAME}/{self.name}"


@dataclass(frozen=True)
class StreamMethod(_StreamingMethod[Request, Response]):
    """One server-streaming RPC of the Membership service."""

    def bind(self, channel: Any) -> Callable[..., StreamCall[Response]]:
        """The callable on a ``grpc.aio`` channel: ``async for message in rpc(request, timeout=...)``."""
        rpc: Callable[..., StreamCall[Response]] = channel.unary_stream(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        )
        return rpc


@dataclass(frozen=True)
class BidiStreamMethod(_StreamingMethod[Request, Response]):
    """One bidirectional-streaming RPC of the Membership service."""

    def bind(self, channel: Any) -> Callable[[], BidiCall[Request, Response]]:
        """The callable on a ``grpc.aio`` channel: ``call = rpc()`` opens the stream (no deadline)."""
        rpc: Callable[[], BidiCall[Request, Response]] = channel.stream_stream(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        )
        return rpc


PING = Method("Ping", pb.PingRequest, pb.PingResponse)
PROBE_INDIRECTLY = Method("ProbeIndirectly", pb.ProbeIndirectlyRequest, pb.ProbeIndirectlyResponse)
GOSSIP = Method("Gossip", pb.GossipRequest, pb.GossipResponse)
GET_MEMBERSHIP = Method("GetMembership", pb.GetMembershipRequest, pb.GetMembershipResponse)
CONFIRM_MEMBERSHIP = Method("ConfirmMembership", pb.ConfirmMembershipRequest, pb.ConfirmMembershipResponse)
WATCH_MEMBERSHIP = StreamMethod("WatchMembership", pb.WatchMembershipRequest, pb.MembershipView)
PING_STREAM = BidiStreamMethod("PingStream", pb.PingRequest, pb.PingResponse)
GOSSIP_STREAM = BidiStreamMethod("GossipStream", pb.GossipRequest, pb.GossipResponse)
DRAIN = Method("Drain", pb.DrainRequest, pb.DrainResponse)
PROCESS = Method("Process", pb.ProcessRequest, pb.ProcessResponse, service=WORK_SERVICE_NAME)


def to_micros(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """The instant a peer sent; raises ``InvalidEntryError`` for one no ``datetime`` can hold (past year 9999)."""
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError as exc:
        raise InvalidEntryError(f"time {micros} microseconds from the epoch is out of range (years 1-9999)") from exc


def address_to_proto(address: SiloAddress) -> pb.SiloAddress:
    return pb.SiloAddress(host=address.host, port=address.port, generation=address.generation)


def address_from_proto(message: pb.SiloAddress) -> SiloAddress:
    """The model address; raises ``InvalidEntryError`` if a peer sent an invalid one."""
    return SiloAddress(message.host, message.port, message.generation)


def header(cluster_id: str, sender: SiloAddress | None) -> pb.RequestHeader:
    """The header every request carries; ``sender`` is None for tools that are not silos."""
    if sender is None:
        return pb.RequestHeader(cluster_id=cluster_id)
    return pb.RequestHeader(cluster_id=cluster_id, sender=address_to_proto(sender))


def sender_of(request_header: pb.RequestHeader) -> SiloAddress | None:
    """The silo a request says it comes from, or None if it named none or an invalid one (a tool, or garbage)."""
    if not request_header.HasField("sender"):
        return None
    try:
        return address_from_proto(request_header.sender)
    except InvalidEntryError:
        return None


def describe_sender(request_header: pb.RequestHeader) -> str:
    """Who a request says it comes from, for a log line or a refusal (clipped by the caller)."""
    if not request_header.HasField("sender"):
        return "an unnamed client"
    sender = sender_of(request_header)
    return "a client with an invalid address" if sender is None else str(sender)


def entry_to_proto(entry: MembershipEntry, etag: str) -> pb.MembershipRow:
    return pb.MembershipRow(
        address=address_to_proto(entry.silo_address),
        status=pb.SiloStatus.Name(int(entry.status)),
        silo_name=entry.silo_name,
        host_name=entry.host_name,
        role_name=entry.role_name,
        proxy_port=entry.proxy_port,
        update_zone=entry.update_zone,
        fault_zone=entry.fault_zone,
        start_time_unix_micros=to_micros(entry.start_time),
        i_am_alive_time_unix_micros=to_micros(entry.i_am_alive_time),
        suspicions=[
            pb.SuspicionVote(by=address_to_proto(by), at_unix_micros=to_micros(at)) for by, at in entry.suspect_times
        ],
        properties=dict(entry.properties),
        etag=etag,
    )


def entry_from_proto(row: pb.MembershipRow) -> tuple[MembershipEntry, str]:
    entry = MembershipEntry(
        silo_address=address_from_proto(row.address),
        status=SiloStatus(row.status),
        silo_name=row.silo_name,
        host_name=row.host_name,
        role_name=row.role_name,
        proxy_port=row.proxy_port,
        update_zone=row.update_zone,
        fault_zone=row.fault_zone,
        start_time=from_micros(row.start_time_unix_micros),
        i_am_alive_time=from_micros(row.i_am_alive_time_unix_micros),
        suspect_times=tuple((address_from_proto(vote.by), from_micros(vote.at_unix_micros)) for vote in row.suspicions),
        properties=dict(row.properties),
    )
    return entry, row.etag


def snapshot_to_proto(snapshot: MembershipTableData, responder: SiloAddress) -> pb.GetMembershipResponse:
    return pb.GetMembershipResponse(**_snapshot_fields(snapshot, responder))


def view_to_proto(
    snapshot: MembershipTableData, responder: SiloAddress, events: Sequence[MembershipEvent] = ()
) -> pb.MembershipView:
    """One message of the ``WatchMembership`` stream: ``GetMembershipResponse``'s fields plus events."""
    return pb.MembershipView(**_snapshot_fields(snapshot, responder), events=[event_to_proto(e) for e in events])


_EVENT_KINDS = {
    EventKind.JOINED: pb.MEMBERSHIP_EVENT_KIND_JOINED,
    EventKind.SUSPECTED: pb.MEMBERSHIP_EVENT_KIND_SUSPECTED,
    EventKind.DECLARED_DEAD: pb.MEMBERSHIP_EVENT_KIND_DECLARED_DEAD,
    EventKind.LEFT: pb.MEMBERSHIP_EVENT_KIND_LEFT,
    EventKind.PROPERTIES_CHANGED: pb.MEMBERSHIP_EVENT_KIND_PROPERTIES_CHANGED,
}
_EVENT_KINDS_BACK = {wire: kind for kind, wire in _EVENT_KINDS.items()}


def event_to_proto(event: MembershipEvent) -> pb.MembershipEvent:
    return pb.MembershipEvent(
        kind=_EVENT_KINDS[event.kind],
        silo=address_to_proto(event.silo),
        silo_name=event.name,
        version=event.version,
        at_unix_micros=to_micros(event.at),
        observed_at_unix_micros=to_micros(event.observed_at),
        by=[address_to_proto(voter) for voter in event.by],
        properties=dict(event.properties),
    )


def events_from_proto(message: pb.MembershipView) -> tuple[MembershipEvent, ...]:
    """The view's events; kinds this version does not know (added later) are skipped."""
    return tuple(
        MembershipEvent(
            kind=_EVENT_KINDS_BACK[event.kind],
            silo=address_from_proto(event.silo),
            name=event.silo_name,
            version=event.version,
            at=from_micros(event.at_unix_micros),
            observed_at=from_micros(event.observed_at_unix_micros),
            by=tuple(address_from_proto(voter) for voter in event.by),
            properties=dict(event.properties),
        )
        for event in message.events
        if event.kind in _EVENT_KINDS_BACK
    )


def _snapshot_fields(snapshot: MembershipTableData, responder: SiloAddress) -> dict[str, Any]:
    return {
        "version": snapshot.version.version,
        "version_etag": snapshot.version.etag,
        "rows": [entry_to_proto(entry, etag) for entry, etag in snapshot.rows],
        "responder": address_to_proto(responder),
    }


def snapshot_from_proto(message: pb.GetMembershipResponse | pb.MembershipView) -> MembershipTableData:
    return MembershipTableData(
        rows=tuple(entry_from_proto(row) for row in message.rows),
        version=TableVersion(message.version, message.version_etag),
    )
