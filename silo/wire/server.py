"""The gRPC server of one silo: the ``silo.v1.Membership`` and ``silo.v1.Work`` services and health.

The server is bound before the silo exists, because the silo's address needs the port
the OS picked (``--port 0``); ``start(handler)`` then serves the silo. Every request
names its cluster: a request for another cluster is refused with ``FAILED_PRECONDITION``
and logged, so two clusters that share a table or a network never mix. The health
service (``grpc.health.v1.Health``) reports ``NOT_SERVING`` until ``set_serving(True)``
(the silo is Active) and again once the silo stops. With ``tls`` the server speaks mutual TLS
only, and every call is first authorized from the caller's certificate
(``silo.wire.peer_identity``): PERMISSION_DENIED or UNAUTHENTICATED, logged with the reason,
before the request is looked at.

Hostile input: a request that cannot be decoded is refused with ``INVALID_ARGUMENT``
(gRPC itself would answer ``INTERNAL``), as is a field out of range; a message larger
than ``MAX_MESSAGE_BYTES`` is refused by gRPC with ``RESOURCE_EXHAUSTED``.

``PingStream`` answers many pings over one bidirectional stream exactly as ``Ping`` answers one
(a prober keeps one stream per target: a probe costs about half the CPU of a unary call); the
caller is admitted once, from the first request, and a later request for another cluster ends
the stream the way ``Ping`` refuses it.

``WatchMembership`` streams the silo's snapshots (``Silo.snapshots()``): the current one,
then every newer version; when the silo stops the stream ends with ``UNAVAILABLE`` so a
client moves to another gateway. Other services are served through a seam (``ServedPart``):
the Work service (``silo.work.service``) is given to the server by the runtime, so the wire
never imports the work it serves.

gRPC server reflection (``grpc.reflection.v1alpha.ServerReflection``) is on unless ``reflection=False``
(``silo run --no-reflection``): ``grpcurl``, ``grpcui`` or Postman list and describe the services
from the silo itself. It reveals only the public contract (the ``.proto`` shipped in the wheel), and
under mutual TLS only to a caller with a certificate from the cluster's CA.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as grpc_reflection

from membership_tables import InvalidEntryError, MembershipTableData, SiloAddress, SiloStatus
from silo.errors import SiloError
from silo.events import membership_events
from silo.membership.probing import MembershipRpcHandler
from silo.membership.snapshot import MembershipSnapshot
from silo.wire import codec, gossip_codec
from silo.wire.channels import MESSAGE_SIZE_OPTIONS
from silo.wire.open_streams import OpenStreams
from silo.wire.peer_identity import authorize
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.rpc import Undecodable, abort, bidi, clip, decoded_stream, decoder, peer_identity, refuse, unary
from silo.wire.tls import TlsSettings, server_credentials

log = logging.getLogger(__name__)

StreamRequest = TypeVar("StreamRequest", pb.PingRequest, pb.GossipRequest)
"""What a bidirectional stream of the Membership service carries: each request names its cluster."""

FENCING_POLL_SECONDS = 0.2
"""How often a quiet watch stream checks whether its silo fenced itself."""

STREAMS_END_SECONDS = 1.0
"""How long ``stop()`` waits for the open streams it ended to finish before stopping the server."""

HEALTH_SERVICES = ("", codec.SERVICE_NAME, codec.WORK_SERVICE_NAME)
"""Health is reported for the whole server ("") and for each service."""

REFLECTED_SERVICES = (codec.SERVICE_NAME, codec.WORK_SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME)
"""What server reflection lists: every service a silo's ports serve."""

_SERVER_OPTIONS = [
    # gRPC sets SO_REUSEPORT by default, which would let two silos "bind" the same port.
    ("grpc.so_reuseport", 0),
    # Clients keep long WatchMembership streams alive with keepalive pings (every 10 s, see
    # silo.client.view_sources.GATEWAY_CHANNEL_OPTIONS); accept them instead of answering
    # GOAWAY "too_many_pings".
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    *MESSAGE_SIZE_OPTIONS,
]


class SiloRpcHandler(MembershipRpcHandler, Protocol):
    """What the server needs from the local silo beyond the silo-to-silo RPCs."""

    @property
    def status(self) -> SiloStatus:
        """This silo's own lifecycle status; Work is served only while it is Active."""
        ...

    def snapshots(self) -> AsyncIterator[MembershipSnapshot]:
        """The current snapshot, then every newer one in version order, until the silo stops."""
        ...

    @property
    def fenced(self) -> bool:
        """Whether this silo's membership lease ran out (its view is unconfirmed)."""
        ...


class ServedPart(Protocol):
    """A gRPC service the server serves beside Membership and health (the Work service), added
    with ``MembershipServer.add_service``; its calls are admitted with ``admit_cluster`` first."""

    def rpc_handler(self) -> grpc.GenericRpcHandler:
        """The service's method handlers."""
        ...

    def starting(self, silo_address: SiloAddress) -> None:
        """The server starts serving the silo at ``silo_address`` (a chance to warn of what is missing)."""
        ...

    def close(self) -> None:
        """The server stopped: release what the service holds (its worker threads)."""
        ...


class BindError(SiloError, OSError):
    """The server could not listen on the requested address."""


class MembershipServer:
    """One ``grpc.aio`` server for a silo (create it inside the running event loop)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        tls: TlsSettings | None = None,
        reflection: bool = True,
    ) -> None:
        """``now``: the wall clock
        that stamps the membership events of watch streams; ``tls``: serve mutual TLS only (every
        caller needs a certificate of this cluster, see ``silo.wire.peer_identity``), else plaintext;
        ``reflection``: serve gRPC server reflection (``REFLECTED_SERVICES``)."""
        self._host = host
        self._credentials = server_credentials(tls) if tls is not None else None
        self._now = now
        self._handler: SiloRpcHandler | None = None
        self._view_answer: tuple[MembershipTableData, pb.GetMembershipResponse] | None = None
        """The last GetMembership answer and the view it was built from: peers that fell behind
        pull the same view at once (N rows each), so it is built once per view."""
        self._server = grpc.aio.server(options=_SERVER_OPTIONS)
        self._health = health.aio.HealthServicer()
        self._services: list[ServedPart] = []
        self.on_drain: Callable[[], bool] | None = None
        """What a ``Drain`` call does: start the process's drain, returning whether it had started
        already (``silo.runtime.process`` sets it); None = ``Drain`` is refused (FAILED_PRECONDITION)."""
        self._streams = OpenStreams()
        """The open PingStream and GossipStream calls (``stop()`` ends them)."""
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self._server.add_generic_rpc_handlers((self._membership_handler(),))
        if reflection:
            # the generated module registered silo/v1/membership.proto in the default descriptor pool
            grpc_reflection.enable_server_reflection(REFLECTED_SERVICES, self._server)
        self.ports: list[int] = []
        self.port = self.add_port(port)

    def add_port(self, port: int) -> int:
        """Also listen on ``port`` (0 = any free port) with the same services; returns the port."""
        address = f"[{self._host}]:{port}" if ":" in self._host else f"{self._host}:{port}"
        try:
            if self._credentials is None:
                bound = int(self._server.add_insecure_port(address))
            else:
                bound = int(self._server.add_secure_port(address, self._credentials))
        except RuntimeError as exc:
            raise BindError(f"cannot listen on {address}: {exc}; pick another --port or free this one") from exc
        if bound == 0:  # older grpcio signals failure this way
            raise BindError(f"cannot listen on {address}; pick another --port or free this one")
        self.ports.append(bound)
        return bound

    def add_service(self, service: ServedPart) -> None:
        """Also serve ``service`` (before ``start``): the runtime adds the Work service
        (``silo.work.service.WorkService``); without it Work calls are UNIMPLEMENTED."""
        self._server.add_generic_rpc_handlers((service.rpc_handler(),))
        self._services.append(service)

    async def start(self, handler: SiloRpcHandler) -> None:
        """Serve ``handler``; health stays NOT_SERVING until ``set_serving(True)``."""
        for service in self._services:
            service.starting(handler.silo_address)
        self._handler = handler
        await self.set_serving(False)
        await self._server.start()

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in HEALTH_SERVICES:
            await self._health.set(service, status)

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; in-flight calls get ``grace`` seconds (None = cancel them at once). The
        PingStream and GossipStream calls, which peers keep open for as long as they probe or
        gossip with us, are ended first, quietly (``silo.wire.open_streams``)."""
        await self._streams.end(STREAMS_END_SECONDS)
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)
        for service in self._services:
            service.close()

    def _membership_handler(self) -> Any:
        handlers = {
            codec.PING.name: unary(codec.PING, self._ping),
            codec.PROBE_INDIRECTLY.name: unary(codec.PROBE_INDIRECTLY, self._probe_indirectly),
            codec.GOSSIP.name: unary(codec.GOSSIP, self._gossip),
            codec.GET_MEMBERSHIP.name: unary(codec.GET_MEMBERSHIP, self._get_membership),
            codec.CONFIRM_MEMBERSHIP.name: unary(codec.CONFIRM_MEMBERSHIP, self._confirm_membership),
            codec.WATCH_MEMBERSHIP.name: grpc.unary_stream_rpc_method_handler(
                decoded_stream(self._watch_membership),
                request_deserializer=decoder(codec.WATCH_MEMBERSHIP),
                response_serializer=codec.WATCH_MEMBERSHIP.response.SerializeToString,
            ),
            codec.PING_STREAM.name: bidi(codec.PING_STREAM, self._ping_stream),
            codec.GOSSIP_STREAM.name: bidi(codec.GOSSIP_STREAM, self._gossip_stream),
            codec.DRAIN.name: unary(codec.DRAIN, self._drain),
        }
        return grpc.method_handlers_generic_handler(codec.SERVICE_NAME, handlers)

    async def _admit(self, request_header: pb.RequestHeader, context: Any, method: str) -> SiloRpcHandler:
        """The handler if the request is for our cluster; otherwise abort the call."""
        return await self.admit_cluster(
            clip(request_header.cluster_id), partial(_describe_sender, request_header), context, method
        )

    async def admit_cluster(
        self, cluster_id: str, sender: Callable[[], str], context: Any, method: str
    ) -> SiloRpcHandler:
        """The silo if a call to ``method`` is for its cluster and the caller may make it; otherwise
        the call is aborted. ``sender`` describes the caller for a refusal (only then: every ping
        and gossip is admitted)."""
        handler = self._handler
        if handler is None:
            await abort(context, grpc.StatusCode.UNAVAILABLE, "the silo is still starting; retry shortly")
        if self._credentials is not None:
            # before anything else: an unauthorized caller learns nothing, not even the cluster id
            refusal = authorize(method, peer_identity(context), handler.cluster_id)
            if refusal is not None:
                log.warning("refused %s from %s at %s: %s", method, sender(), context.peer(), refusal.reason)
                await abort(context, refusal.code, refusal.reason)
        if cluster_id != handler.cluster_id:
            await _refuse_cluster(handler, cluster_id, sender(), context, method)
        return handler

    async def _ping(self, request: pb.PingRequest, context: Any) -> pb.PingResponse:
        return _ping_response(await self._admit(request.header, context, "Ping"), request)

    async def _ping_stream(
        self, requests: AsyncIterator[pb.PingRequest | Undecodable], context: Any
    ) -> AsyncIterator[pb.PingResponse]:
        """Answer every ping of the stream, like ``Ping``."""
        async for handler, request in self._admitted(requests, context, codec.PING_STREAM.name):
            yield _ping_response(handler, request)

    async def _gossip_stream(
        self, requests: AsyncIterator[pb.GossipRequest | Undecodable], context: Any
    ) -> AsyncIterator[pb.GossipResponse]:
        """Take every message of the stream like ``Gossip``, answering each once it is taken."""
        async for handler, request in self._admitted(requests, context, codec.GOSSIP_STREAM.name):
            await _take_gossip(handler, request, context)
            yield pb.GossipResponse(sequence=request.sequence)

    async def _admitted(
        self, requests: AsyncIterator[StreamRequest | Undecodable], context: Any, method: str
    ) -> AsyncIterator[tuple[SiloRpcHandler, StreamRequest]]:
        """The requests of a stream, each with our handler: the caller is admitted once, from the first
        request's header; a later request for another cluster or one not decodable ends the stream."""
        handler: SiloRpcHandler | None = None
        async for request in self._streams.requests(requests):
            if isinstance(request, Undecodable):
                await refuse(request, context)
            if handler is None:
                handler = await self._admit(request.header, context, method)
            elif request.header.cluster_id != handler.cluster_id:
                sender = _describe_sender(request.header)
                await _refuse_cluster(handler, clip(request.header.cluster_id), sender, context, method)
            yield handler, request

    async def _probe_indirectly(self, request: pb.ProbeIndirectlyRequest, context: Any) -> pb.ProbeIndirectlyResponse:
        handler = await self._admit(request.header, context, "ProbeIndirectly")
        try:
            target = codec.address_from_proto(request.target)
        except InvalidEntryError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, clip(f"invalid probe target: {exc}"))
        if not (math.isfinite(request.timeout_seconds) and request.timeout_seconds > 0):
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_seconds must be a positive number of seconds, got {request.timeout_seconds!r}",
            )
        result = await handler.probe_for_peer(target, request.timeout_seconds)
        return pb.ProbeIndirectlyResponse(
            succeeded=result.succeeded,
            intermediary_health_score=result.intermediary_health_score,
            response_time_seconds=result.response_time,
            failure_message=result.failure_message,
        )

    async def _gossip(self, request: pb.GossipRequest, context: Any) -> pb.GossipResponse:
        await _take_gossip(await self._admit(request.header, context, "Gossip"), request, context)
        return pb.GossipResponse()

    async def _get_membership(self, request: pb.GetMembershipRequest, context: Any) -> pb.GetMembershipResponse:
        handler = await self._admit(request.header, context, "GetMembership")
        view, answer = handler.membership_snapshot(), self._view_answer
        if answer is None or answer[0] is not view:
            answer = self._view_answer = (view, codec.snapshot_to_proto(view, handler.silo_address))
        return answer[1]

    async def _confirm_membership(
        self, request: pb.ConfirmMembershipRequest, context: Any
    ) -> pb.ConfirmMembershipResponse:
        handler = await self._admit(request.header, context, "ConfirmMembership")
        asker = codec.sender_of(request.header)
        if asker is None:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ConfirmMembership needs header.sender: the asker")
        answer = await handler.confirm_membership(asker, request.known_version)
        return pb.ConfirmMembershipResponse(
            responder=codec.address_to_proto(answer.responder),
            table_read=answer.table_read,
            asker_status=pb.SiloStatus.Name(int(answer.asker_status)),
            version=answer.version,
            newest_version_heard=answer.newest_version_heard,
            unconfirmed_writes=answer.unconfirmed_writes,
        )

    async def _watch_membership(
        self, request: pb.WatchMembershipRequest, context: Any
    ) -> AsyncIterator[pb.MembershipView]:
        """Every newer view until the silo stops, or fences itself: its view is then unconfirmed
        (the others may have moved on without it), and the stream ends with UNAVAILABLE so the
        client watches another gateway."""
        handler = await self._admit(request.header, context, "WatchMembership")
        after = request.after_version if request.HasField("after_version") else None
        previous: MembershipTableData | None = None
        views: asyncio.Queue[MembershipSnapshot | None] = asyncio.Queue()

        async def pump() -> None:
            async for snapshot in handler.snapshots():
                views.put_nowait(snapshot)
            views.put_nowait(None)

        pumping = asyncio.ensure_future(pump())
        try:
            while True:
                try:
                    snapshot = await asyncio.wait_for(views.get(), FENCING_POLL_SECONDS)
                except TimeoutError:
                    if handler.fenced:
                        break
                    continue
                if snapshot is None or handler.fenced:
                    break
                if after is None or snapshot.version > after:
                    events = membership_events(previous, snapshot.data, snapshot.observed_at or self._now())
                    previous = snapshot.data
                    yield codec.view_to_proto(snapshot.data, handler.silo_address, events)
        finally:
            pumping.cancel()
        if handler.fenced:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"silo {handler.silo_address} is fenced: the membership table has not confirmed it lately, so its "
                "view is unconfirmed; watch another gateway",
            )
        await abort(context, grpc.StatusCode.UNAVAILABLE, f"silo {handler.silo_address} stopped; watch another gateway")

    async def _drain(self, request: pb.DrainRequest, context: Any) -> pb.DrainResponse:
        handler = await self._admit(request.header, context, "Drain")
        if self.on_drain is None:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"silo {handler.silo_address} runs inside another program, not `silo run`: stop it there",
            )
        already = self.on_drain()
        log.info("silo %s asked to drain by %s%s", handler.silo_address, context.peer(), " (already)" * already)
        return pb.DrainResponse(silo=codec.address_to_proto(handler.silo_address), already_draining=already)


async def _take_gossip(handler: SiloRpcHandler, request: pb.GossipRequest, context: Any) -> None:
    """Hand one gossip message (unary or on a stream) to ``handler``; one that is not valid gossip aborts the call."""
    try:
        message = gossip_codec.gossip_from_proto(request)
    except (InvalidEntryError, ValueError) as exc:
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, clip(f"invalid gossip: {exc}"))
    await handler.on_gossip(message, codec.sender_of(request.header))


def _ping_response(handler: SiloRpcHandler, request: pb.PingRequest) -> pb.PingResponse:
    """The answer to one ping (unary or on a stream): who answers, its health, the ping's sequence.
    A version the caller knows of (a joiner's) is taken as heard before the answer goes out."""
    if request.known_version > 0:
        handler.hear_of(request.known_version)
    return pb.PingResponse(
        responder=codec.address_to_proto(handler.silo_address),
        health_score=handler.health_score(),
        sequence=request.sequence,
    )


async def _refuse_cluster(handler: SiloRpcHandler, cluster_id: str, sender: str, context: Any, method: str) -> NoReturn:
    log.warning(
        "refused %s from %s: it is for cluster %r but this silo belongs to cluster %r",
        method,
        sender,
        cluster_id,
        handler.cluster_id,
    )
    await abort(
        context,
        grpc.StatusCode.FAILED_PRECONDITION,
        f"wrong cluster: {handler.silo_address} belongs to cluster {handler.cluster_id!r}, "
        f"not {cluster_id!r}; check the --cluster of {sender}",
    )


def _describe_sender(request_header: pb.RequestHeader) -> str:
    return clip(codec.describe_sender(request_header))
