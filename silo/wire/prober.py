"""``GrpcProber``: the ``Prober`` and ``GossipSender`` seams over gRPC.

One ``grpc.aio`` channel per target endpoint is created on first use and reused. Every
call's deadline is the caller's timeout. Probes and gossip go over one long-lived stream per
endpoint each (``PingStream``, ``GossipStream``; ``silo.wire.call_streams``: a third of the CPU of
a unary call), or the unary ``Ping`` / ``Gossip`` to a silo without them. A probe that fails for
any wire reason (deadline, connection refused, the peer refusing our cluster) is a miss. An
answer from a different generation at the same endpoint is a miss too: the silo we probe is gone
even if its host:port answers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from typing import Any

import grpc

from membership_tables import InvalidEntryError, MembershipTableData, SiloAddress, SiloStatus
from silo.errors import SiloError
from silo.membership.background import BackgroundTasks
from silo.membership.lease import MembershipConfirmation
from silo.membership.probing import GossipMessage, IndirectProbeResult, NotDeliveredError, ProbeOutcome
from silo.membership.snapshot import MembershipDelta
from silo.wire import codec, gossip_codec
from silo.wire.call_streams import UNARY_CALLS_FIRST, Request, Response, StreamedCalls, StreamEndedError
from silo.wire.channels import CHANNEL_OPTIONS, channel_options
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tcp_connect import connect_outcome
from silo.wire.tls import ChannelPool, TlsSettings

log = logging.getLogger(__name__)

MAX_CHANNELS = 64
"""Channels one prober keeps open at most (least recently used closed first): its ring targets,
intermediaries and recent gossip peers stay; a join's or a majority check's sweep over the whole
cluster does not leave a channel per silo behind."""

CLOSE_GRACE_SECONDS = 60.0
"""An evicted channel closes once its calls in flight are done (their deadlines are shorter)."""

INDIRECT_DEADLINE_FACTOR = 2.0
"""An indirect probe gives the intermediary ``timeout`` to reach the target, and the whole
call ``INDIRECT_DEADLINE_FACTOR * timeout`` (the intermediary's own round trip on top)."""


REFUSAL_MARKERS = ("connection refused", "econnrefused")
"""How gRPC reports a closed port in an UNAVAILABLE error's details (C core, all platforms)."""

HANDSHAKE_FAILURE_MARKER = "handshake failed"
"""How gRPC reports a TLS handshake the peer or this side rejected (UNAVAILABLE details)."""


def is_security_refusal(error: grpc.aio.AioRpcError) -> bool:
    """True if the peer answered but would not accept us (or we it): certificate, CA or role.

    Never a refusal in the probing sense: a silo refused for its own certificate must not
    count its peers as gone (it counts them as missed probes, and a silo that hears nobody
    is in no majority and casts no vote).
    """
    code = error.code()
    if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        return True
    return code == grpc.StatusCode.UNAVAILABLE and HANDSHAKE_FAILURE_MARKER in (error.details() or "").lower()


def is_refusal(error: grpc.aio.AioRpcError) -> bool:
    """True if the call failed because nothing listens at the endpoint (not loss, not a timeout).

    The server refusing another cluster's call (FAILED_PRECONDITION) is also a refusal: the
    endpoint is a silo, but not the member we probed.
    """
    code = error.code()
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return True
    details = (error.details() or "").lower()
    return code == grpc.StatusCode.UNAVAILABLE and any(marker in details for marker in REFUSAL_MARKERS)


class IntermediaryUnreachableError(SiloError, ConnectionError):
    """An indirect probe could not be delivered: the outcome says nothing about the target."""


class GrpcProber:
    """Probes and gossip from ``sender`` (this silo) to peers of ``cluster_id`` (over mutual TLS if ``tls``)."""

    def __init__(
        self,
        cluster_id: str,
        sender: SiloAddress | None,
        gossip_timeout: float = 5.0,
        *,
        tls: TlsSettings | None = None,
        unary_calls_first: int = UNARY_CALLS_FIRST,
        connect_timeout: float | None = None,
    ) -> None:
        """``unary_calls_first``: pings (and gossip messages) of each endpoint sent as unary calls
        before its ping (gossip) stream opens;
        ``connect_timeout``: seconds a connection attempt may take (``channel_options``; None: the
        callers' 100 ms of ``CHANNEL_OPTIONS``)."""
        self._cluster_id = cluster_id
        self._unary_calls_first = unary_calls_first
        self._sender = sender
        self._gossip_timeout = gossip_timeout
        self._closing: dict[asyncio.Task[None], grpc.aio.Channel] = {}
        """Evicted channels still closing (after their calls in flight)."""
        self._channels = ChannelPool(
            cluster_id,
            tls,
            CHANNEL_OPTIONS if connect_timeout is None else channel_options(connect_timeout),
            aio=True,
            max_channels=MAX_CHANNELS,
            evict=self._close_later,
        )
        self._streamed_calls: dict[tuple[str, str], StreamedCalls[Any, Any]] = {}
        """By (streaming method, endpoint), each on the pool's current channel to the endpoint."""
        self._stream_readers = BackgroundTasks()
        self._sequences = itertools.count(1)
        self._encoded_delta: tuple[MembershipDelta, pb.MembershipDelta] | None = None
        """The last delta sent and its encoding: one write goes to up to ``gossip_fanout`` silos."""

    async def ping(self, target: SiloAddress, timeout: float, known_version: int = 0) -> ProbeOutcome:
        request = pb.PingRequest(header=self._header(), sequence=next(self._sequences), known_version=known_version)
        streamed = self._streamed(target.endpoint, codec.PING_STREAM, codec.PING)
        return await self._ping_outcome(target, timeout, streamed.call(request, timeout))

    async def ping_on_new_connection(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """A unary Ping on a connection opened for it (then closed): see ``Prober.ping_on_new_connection``."""
        channel = self._channels.open_unshared(target.endpoint)
        try:
            call = codec.PING.bind(channel)(pb.PingRequest(header=self._header()), timeout=timeout)
            return await self._ping_outcome(target, timeout, call)
        finally:
            await channel.close()

    async def connect(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """A bare TCP connection to ``target``, closed at once: see ``Prober.connect`` and ``tcp_connect``."""
        try:
            return await connect_outcome(target.host, target.port, timeout)
        except OSError as exc:  # no socket to be had, or a name that does not resolve
            log.debug("connect to %s: %r", target, exc)
            return ProbeOutcome.TIMED_OUT

    async def _ping_outcome(
        self, target: SiloAddress, timeout: float, answer: Awaitable[pb.PingResponse]
    ) -> ProbeOutcome:
        """How a ping of ``target`` ended, once its ``answer`` came or failed."""
        try:
            responder = codec.address_from_proto((await answer).responder)
        except grpc.aio.AioRpcError as exc:
            level = logging.WARNING if is_security_refusal(exc) else logging.DEBUG
            log.log(level, "ping %s failed: %s %s", target, exc.code().name, exc.details())
            return ProbeOutcome.REFUSED if is_refusal(exc) else ProbeOutcome.TIMED_OUT
        except TimeoutError:
            log.debug("ping %s: no answer within %.3f s", target, timeout)
            return ProbeOutcome.TIMED_OUT
        except StreamEndedError as exc:
            log.debug("ping %s: %s", target, exc)
            return ProbeOutcome.TIMED_OUT
        except InvalidEntryError as exc:
            log.warning("ping %s: the answer names an invalid address: %s", target, exc)
            return ProbeOutcome.TIMED_OUT
        if responder != target:
            log.info("ping %s was answered by %s, another incarnation: the probed one is gone", target, responder)
            return ProbeOutcome.REFUSED
        return ProbeOutcome.ANSWERED

    async def ping_call(self, target: SiloAddress, timeout: float) -> pb.PingResponse:
        """One raw Ping (raises ``grpc.aio.AioRpcError``), for callers that need the failure itself."""
        return await self._call(target, codec.PING, pb.PingRequest(header=self._header()), timeout)

    async def probe_indirectly(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> IndirectProbeResult:
        """Ask ``intermediary`` to ping ``target``.

        Raises ``IntermediaryUnreachableError`` if the intermediary itself cannot be asked:
        that must count as "unknown", never as a healthy intermediary's failed probe.
        """
        request = pb.ProbeIndirectlyRequest(
            header=self._header(), target=codec.address_to_proto(target), timeout_seconds=timeout
        )
        try:
            response = await self._call(
                intermediary, codec.PROBE_INDIRECTLY, request, timeout * INDIRECT_DEADLINE_FACTOR
            )
        except grpc.aio.AioRpcError as exc:
            raise IntermediaryUnreachableError(
                f"cannot ask {intermediary} to probe {target}: {exc.code().name} {exc.details()}"
            ) from exc
        return IndirectProbeResult(
            succeeded=response.succeeded,
            intermediary_health_score=response.intermediary_health_score,
            response_time=response.response_time_seconds,
            failure_message=response.failure_message,
        )

    async def send(self, target: SiloAddress, message: GossipMessage) -> None:
        """Send ``message`` to ``target``; raises ``NotDeliveredError`` if no connection to it could be
        made (UNAVAILABLE), ``grpc.aio.AioRpcError`` for any other failure (it may have arrived)."""
        delta, encoded = message.delta, self._encoded_delta
        if delta is not None and (encoded is None or encoded[0] is not delta):
            encoded = self._encoded_delta = (delta, gossip_codec.delta_to_proto(delta))
        request = gossip_codec.gossip_to_proto(message, self._header(), encoded[1] if delta and encoded else None)
        request.sequence = next(self._sequences)
        gossiper = self._streamed(target.endpoint, codec.GOSSIP_STREAM, codec.GOSSIP)
        try:
            await gossiper.call(request, self._gossip_timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                raise NotDeliveredError(f"gossip to {target} not delivered: {exc.details()}") from exc
            raise

    async def fetch_membership(self, target: SiloAddress, timeout: float) -> MembershipTableData:
        """``target``'s current view (raises ``grpc.aio.AioRpcError``, or ``InvalidEntryError`` for a bad row)."""
        return codec.snapshot_from_proto(await self.get_membership(target, timeout))

    async def get_membership(self, target: SiloAddress, timeout: float) -> pb.GetMembershipResponse:
        """``target``'s current view (raises ``grpc.aio.AioRpcError`` on failure)."""
        return await self._call(target, codec.GET_MEMBERSHIP, pb.GetMembershipRequest(header=self._header()), timeout)

    async def confirm_membership(
        self, target: SiloAddress, timeout: float, known_version: int = 0
    ) -> MembershipConfirmation:
        """Ask ``target`` to read our row from the table, telling it the newest table version we
        know of (raises ``grpc.aio.AioRpcError``, or ``InvalidEntryError`` for an answer naming a
        bad address)."""
        request = pb.ConfirmMembershipRequest(header=self._header(), known_version=known_version)
        response = await self._call(target, codec.CONFIRM_MEMBERSHIP, request, timeout)
        return MembershipConfirmation(
            responder=codec.address_from_proto(response.responder),
            table_read=response.table_read,
            asker_status=SiloStatus(response.asker_status),
            version=response.version,
            newest_version_heard=response.newest_version_heard,
            unconfirmed_writes=response.unconfirmed_writes,
        )

    @property
    def open_channels(self) -> int:
        """Channels cached now (at most ``MAX_CHANNELS``)."""
        return len(self._channels)

    async def __aenter__(self) -> GrpcProber:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every ping and gossip stream and cached channel (and wait for the evicted ones still closing)."""
        for streamed in self._streamed_calls.values():
            streamed.close()
        self._streamed_calls.clear()
        await self._stream_readers.cancel_all()
        for channel in [*self._channels.drain(), *self._closing.values()]:
            await channel.close()  # no grace: calls still in flight on an evicted channel end now
        await asyncio.gather(*self._closing, return_exceptions=True)

    def _streamed(
        self, endpoint: str, stream: codec.BidiStreamMethod[Request, Response], unary: codec.Method[Request, Response]
    ) -> StreamedCalls[Request, Response]:
        """``endpoint``'s calls of ``stream`` (or ``unary``), on the pool's current channel to it."""
        channel = self._channels.get(endpoint)
        key = (stream.name, endpoint)
        streamed: StreamedCalls[Request, Response] | None = self._streamed_calls.get(key)
        if streamed is None or streamed.channel is not channel:
            if streamed is not None:
                streamed.retire()  # the pool opened a new channel (certificates rotated)
            streamed = self._streamed_calls[key] = StreamedCalls(
                endpoint, channel, stream, unary, self._stream_readers, unary_calls_first=self._unary_calls_first
            )
        return streamed

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        for key, streamed in list(self._streamed_calls.items()):
            if streamed.channel is channel:
                del self._streamed_calls[key]
                streamed.retire()
        task = asyncio.get_running_loop().create_task(channel.close(CLOSE_GRACE_SECONDS))
        self._closing[task] = channel
        task.add_done_callback(self._closing.pop)

    def _header(self) -> pb.RequestHeader:
        return codec.header(self._cluster_id, self._sender)

    async def _call(
        self,
        target: SiloAddress,
        method: codec.Method[codec.Request, codec.Response],
        request: codec.Request,
        timeout: float,
    ) -> codec.Response:
        return await method.bind(self._channels.get(target.endpoint))(request, timeout=timeout)
