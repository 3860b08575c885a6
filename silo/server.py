"""The gRPC server of one silo: the ``silo.v1.Membership`` service and the standard health service.

The server is bound before the silo exists, because the silo's address needs the port
the OS picked (``--port 0``); ``start(handler)`` then serves the silo. Every request
names its cluster: a request for another cluster is refused with ``FAILED_PRECONDITION``
and logged, so two clusters that share a table or a network never mix. The health
service (``grpc.health.v1.Health``) reports ``NOT_SERVING`` until ``set_serving(True)``
(the silo is Active) and again once the silo stops.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from membership_tables import InvalidEntryError
from silo import wire
from silo.probing import MembershipRpcHandler
from silo.proto.silo.v1 import membership_pb2 as pb

log = logging.getLogger(__name__)

HEALTH_SERVICES = ("", wire.SERVICE_NAME)
"""Health is reported for the whole server ("") and for the Membership service."""

_SERVER_OPTIONS = [
    # gRPC sets SO_REUSEPORT by default, which would let two silos "bind" the same port.
    ("grpc.so_reuseport", 0),
]


class BindError(OSError):
    """The server could not listen on the requested address."""


class MembershipServer:
    """One ``grpc.aio`` server for a silo (create it inside the running event loop)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._handler: MembershipRpcHandler | None = None
        self._server = grpc.aio.server(options=_SERVER_OPTIONS)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self._server.add_generic_rpc_handlers((self._membership_handler(),))
        self.ports: list[int] = []
        self.port = self.add_port(port)

    def add_port(self, port: int) -> int:
        """Also listen on ``port`` (0 = any free port) with the same services; returns the port."""
        address = f"[{self._host}]:{port}" if ":" in self._host else f"{self._host}:{port}"
        try:
            bound = int(self._server.add_insecure_port(address))
        except RuntimeError as exc:
            raise BindError(f"cannot listen on {address}: {exc}; pick another --port or free this one") from exc
        if bound == 0:  # older grpcio signals failure this way
            raise BindError(f"cannot listen on {address}; pick another --port or free this one")
        self.ports.append(bound)
        return bound

    async def start(self, handler: MembershipRpcHandler) -> None:
        """Serve ``handler``; health stays NOT_SERVING until ``set_serving(True)``."""
        self._handler = handler
        await self.set_serving(False)
        await self._server.start()

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in HEALTH_SERVICES:
            await self._health.set(service, status)

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; in-flight calls get ``grace`` seconds (None = cancel them at once)."""
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)

    def _membership_handler(self) -> Any:
        handlers = {
            wire.PING.name: _unary(wire.PING, self._ping),
            wire.PROBE_INDIRECTLY.name: _unary(wire.PROBE_INDIRECTLY, self._probe_indirectly),
            wire.GOSSIP.name: _unary(wire.GOSSIP, self._gossip),
            wire.GET_MEMBERSHIP.name: _unary(wire.GET_MEMBERSHIP, self._get_membership),
        }
        return grpc.method_handlers_generic_handler(wire.SERVICE_NAME, handlers)

    async def _admit(self, request_header: pb.RequestHeader, context: Any, method: str) -> MembershipRpcHandler:
        """The handler if the request is for our cluster; otherwise abort the call."""
        handler = self._handler
        if handler is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the silo is still starting; retry shortly")
            raise AssertionError("unreachable: abort raises")
        if request_header.cluster_id != handler.cluster_id:
            sender = _describe_sender(request_header)
            log.warning(
                "refused %s from %s: it is for cluster %r but this silo belongs to cluster %r",
                method,
                sender,
                request_header.cluster_id,
                handler.cluster_id,
            )
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"wrong cluster: {handler.silo_address} belongs to cluster {handler.cluster_id!r}, "
                f"not {request_header.cluster_id!r}; check the --cluster of {sender}",
            )
        return handler

    async def _ping(self, request: pb.PingRequest, context: Any) -> pb.PingResponse:
        handler = await self._admit(request.header, context, "Ping")
        return pb.PingResponse(
            responder=wire.address_to_proto(handler.silo_address), health_score=handler.health_score()
        )

    async def _probe_indirectly(self, request: pb.ProbeIndirectlyRequest, context: Any) -> pb.ProbeIndirectlyResponse:
        handler = await self._admit(request.header, context, "ProbeIndirectly")
        try:
            target = wire.address_from_proto(request.target)
        except InvalidEntryError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid probe target: {exc}")
            raise AssertionError("unreachable: abort raises") from exc
        if not request.timeout_seconds > 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "timeout_seconds must be positive")
        result = await handler.probe_for_peer(target, request.timeout_seconds)
        return pb.ProbeIndirectlyResponse(
            succeeded=result.succeeded,
            intermediary_health_score=result.intermediary_health_score,
            response_time_seconds=result.response_time,
            failure_message=result.failure_message,
        )

    async def _gossip(self, request: pb.GossipRequest, context: Any) -> pb.GossipResponse:
        handler = await self._admit(request.header, context, "Gossip")
        await handler.on_gossip(request.version)
        return pb.GossipResponse()

    async def _get_membership(self, request: pb.GetMembershipRequest, context: Any) -> pb.GetMembershipResponse:
        handler = await self._admit(request.header, context, "GetMembership")
        return wire.snapshot_to_proto(handler.membership_snapshot(), handler.silo_address)


def _unary(method: wire.Method[wire.Request, wire.Response], behaviour: Callable[..., Awaitable[Any]]) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        behaviour,
        request_deserializer=method.request.FromString,
        response_serializer=method.response.SerializeToString,
    )


def _describe_sender(request_header: pb.RequestHeader) -> str:
    if not request_header.HasField("sender"):
        return "an unnamed client"
    try:
        return str(wire.address_from_proto(request_header.sender))
    except InvalidEntryError:
        return "a client with an invalid address"
