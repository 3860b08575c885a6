"""``GrpcProber`` against real servers on 127.0.0.1: answers, misses and how errors map."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.membership.lease import MembershipConfirmation
from silo.membership.probing import (
    GossipMessage,
    GossipSender,
    IndirectProbeResult,
    NotDeliveredError,
    ProbeOutcome,
    Prober,
)
from silo.membership.snapshot import MembershipDelta
from silo.wire import codec
from silo.wire.prober import MAX_CHANNELS, GrpcProber, IntermediaryUnreachableError
from tests.silo.harness import T0
from tests.silo.rpc_fakes import CLUSTER, CountingServer, FakeHandler, run, serving

pytestmark = pytest.mark.slow

ME = SiloAddress("127.0.0.1", 1, 99)


@contextlib.contextmanager
def silent_listener() -> Iterator[SiloAddress]:
    """A port that accepts TCP connections and never answers: a frozen (SIGSTOPped) silo."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield SiloAddress("127.0.0.1", sock.getsockname()[1], 1)


def closed_port() -> SiloAddress:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return SiloAddress("127.0.0.1", sock.getsockname()[1], 1)


def test_grpc_prober_implements_the_probing_seams() -> None:
    prober: Prober = GrpcProber(CLUSTER, ME)
    sender: GossipSender = GrpcProber(CLUSTER, ME)
    assert prober is not None
    assert sender is not None


def test_ping_of_a_live_silo_is_answered() -> None:
    async def scenario() -> ProbeOutcome:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME) as prober:
            return await prober.ping(handler.silo_address, 2.0)

    assert run(scenario()) is ProbeOutcome.ANSWERED


def test_a_ping_tells_the_target_the_version_it_carries_unary_or_on_the_stream_and_a_probe_tells_nothing() -> None:
    async def scenario() -> list[int]:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME, unary_calls_first=1) as prober:
            for known_version in (7, 0, 9, 0):  # the first unary, the others on the ping stream
                assert await prober.ping(handler.silo_address, 2.0, known_version) is ProbeOutcome.ANSWERED
            return handler.heard

    assert run(scenario()) == [7, 9]


def test_ping_of_another_generation_at_the_same_endpoint_is_a_refusal() -> None:
    async def scenario() -> ProbeOutcome:
        async with serving(FakeHandler) as (_, handler):
            older = SiloAddress(handler.silo_address.host, handler.silo_address.port, 0)
            async with GrpcProber(CLUSTER, ME) as prober:
                return await prober.ping(older, 2.0)

    assert run(scenario()) is ProbeOutcome.REFUSED


def test_ping_of_a_silo_of_another_cluster_is_a_refusal() -> None:
    async def scenario() -> ProbeOutcome:
        async with (
            serving(lambda me: FakeHandler(me, cluster_id="other")) as (_, handler),
            GrpcProber(CLUSTER, ME) as prober,
        ):
            return await prober.ping(handler.silo_address, 2.0)

    assert run(scenario()) is ProbeOutcome.REFUSED


def test_ping_of_a_closed_port_is_a_refusal_not_a_timeout() -> None:
    async def scenario() -> ProbeOutcome:
        async with GrpcProber(CLUSTER, ME) as prober:
            return await prober.ping(closed_port(), 2.0)

    assert run(scenario()) is ProbeOutcome.REFUSED


def test_ping_that_gets_no_answer_within_the_timeout_is_silence() -> None:
    async def scenario(target: SiloAddress) -> ProbeOutcome:
        async with GrpcProber(CLUSTER, ME) as prober:
            return await prober.ping(target, 0.3)

    with silent_listener() as frozen:
        assert run(scenario(frozen)) is ProbeOutcome.TIMED_OUT


class PeerRecordingServer(CountingServer):
    """Records the client endpoint (``ipv4:host:port``) of every unary Ping: one per TCP connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ping_peers: list[str] = []

    async def _ping(self, request: Any, context: Any) -> Any:
        self.ping_peers.append(context.peer())
        return await super()._ping(request, context)


def test_a_ping_on_a_new_connection_is_answered_while_the_usual_connection_is_mute() -> None:
    async def scenario() -> tuple[ProbeOutcome, list[ProbeOutcome], list[str], int]:
        async with (
            serving(FakeHandler, server_type=PeerRecordingServer) as (server, handler),
            GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober,
        ):
            assert isinstance(server, PeerRecordingServer)
            server.answering.clear()  # the ping stream (the usual connection) stops answering
            usual = await prober.ping(handler.silo_address, 0.3)
            fresh = [await prober.ping_on_new_connection(handler.silo_address, 2.0) for _ in range(2)]
            return usual, fresh, server.ping_peers, prober.open_channels

    usual, fresh, peers, pooled = run(scenario())
    assert usual is ProbeOutcome.TIMED_OUT
    assert fresh == [ProbeOutcome.ANSWERED] * 2
    assert len(set(peers)) == 2, f"each ping on a new connection comes from a connection of its own: {peers}"
    assert pooled == 1, "the new connections are not kept in the pool"


@pytest.mark.parametrize(("target", "outcome"), [("closed", ProbeOutcome.REFUSED), ("frozen", ProbeOutcome.TIMED_OUT)])
def test_a_ping_on_a_new_connection_tells_a_closed_port_from_silence(target: str, outcome: ProbeOutcome) -> None:
    async def scenario(address: SiloAddress) -> ProbeOutcome:
        async with GrpcProber(CLUSTER, ME) as prober:
            return await prober.ping_on_new_connection(address, 0.3)

    if target == "closed":
        assert run(scenario(closed_port())) is outcome
    else:
        with silent_listener() as frozen:
            assert run(scenario(frozen)) is outcome


def test_probe_indirectly_reports_the_intermediarys_result() -> None:
    async def probe(target: SiloAddress, timeout: float) -> IndirectProbeResult:
        return IndirectProbeResult(True, intermediary_health_score=1, response_time=0.01)

    async def scenario() -> IndirectProbeResult:
        async with serving(lambda me: FakeHandler(me, probe=probe)) as (_, handler), GrpcProber(CLUSTER, ME) as prober:
            return await prober.probe_indirectly(handler.silo_address, SiloAddress("127.0.0.1", 9, 9), 1.0)

    assert run(scenario()) == IndirectProbeResult(True, intermediary_health_score=1, response_time=0.01)


def test_an_unreachable_intermediary_raises_instead_of_reporting_a_failed_probe() -> None:
    async def scenario() -> None:
        async with GrpcProber(CLUSTER, ME) as prober:
            await prober.probe_indirectly(closed_port(), SiloAddress("127.0.0.1", 9, 9), 0.5)

    with pytest.raises(IntermediaryUnreachableError, match="cannot ask"):
        run(scenario())


def test_gossip_with_a_delta_and_relays_is_delivered_and_a_failure_raises() -> None:
    delta = MembershipDelta(
        11, TableVersion(12, "v12"), ((MembershipEntry(ME, SiloStatus.DEAD, start_time=T0, i_am_alive_time=T0), "e"),)
    )
    sent = GossipMessage(12, delta, relay_to=(SiloAddress("127.0.0.1", 7, 1),))

    async def scenario() -> list[GossipMessage]:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME, gossip_timeout=1.0) as prober:
            await prober.send(handler.silo_address, sent)
            with pytest.raises(NotDeliveredError):
                await prober.send(closed_port(), GossipMessage(13))
            return handler.messages

    assert run(scenario()) == [sent]


def test_one_write_sent_to_several_silos_and_the_next_write_each_arrive_as_sent() -> None:
    """The prober encodes a write's delta once for all its receivers, and a new write anew."""

    def write(version: int, status: SiloStatus) -> MembershipDelta:
        entry = MembershipEntry(ME, status, start_time=T0, i_am_alive_time=T0)
        return MembershipDelta(version - 1, TableVersion(version, f"v{version}"), ((entry, f"e{version}"),))

    first, second = write(12, SiloStatus.SHUTTING_DOWN), write(13, SiloStatus.DEAD)
    sent = [
        GossipMessage(12, first, relay_to=(SiloAddress("127.0.0.1", 7, 1),)),
        GossipMessage(12, first),
        GossipMessage(13, second, relay_to=(SiloAddress("127.0.0.1", 8, 1),)),
    ]

    async def scenario() -> list[GossipMessage]:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME, gossip_timeout=1.0) as prober:
            for message in sent:
                await prober.send(handler.silo_address, message)
            return handler.messages

    assert run(scenario()) == sent


class SlowGossipHandler(FakeHandler):
    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        await super().on_gossip(message, sender)
        await asyncio.sleep(2.0)


def test_gossip_that_times_out_is_not_reported_as_undelivered() -> None:
    """The receiver got it and answered late: its relays must not be dealt out again."""

    async def scenario() -> tuple[BaseException, list[int]]:
        async with serving(SlowGossipHandler) as (_, handler), GrpcProber(CLUSTER, ME, gossip_timeout=0.3) as prober:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await prober.send(handler.silo_address, GossipMessage(13))
            return failure.value, handler.gossiped

    failure, received = run(scenario())
    assert not isinstance(failure, NotDeliveredError)
    assert isinstance(failure, grpc.aio.AioRpcError)
    assert failure.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert received == [13]


def test_fetch_membership_returns_a_peers_view_as_table_data() -> None:
    view = MembershipTableData(
        ((MembershipEntry(ME, SiloStatus.ACTIVE, start_time=T0, i_am_alive_time=T0), "etag-7"),), TableVersion(7, "v7")
    )

    async def scenario() -> MembershipTableData:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME) as prober:
            handler.snapshot = view
            return await prober.fetch_membership(handler.silo_address, 2.0)

    assert run(scenario()) == view


def test_confirm_membership_carries_the_peers_answer_both_ways() -> None:
    async def scenario() -> tuple[MembershipConfirmation, SiloAddress, list[int]]:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, ME) as prober:
            handler.snapshot = MembershipTableData((), TableVersion(7, "v7"))
            answer = await prober.confirm_membership(handler.silo_address, 2.0, 9)
            await prober.confirm_membership(handler.silo_address, 2.0)
            return answer, handler.silo_address, handler.known_versions

    answer, responder, known = run(scenario())
    assert answer == MembershipConfirmation(responder, False, SiloStatus.NONE, 7, 7, False)
    assert known == [9, 0], "the asker's newest known version reaches the peer (0: not said)"


def test_confirm_membership_needs_the_asker_in_the_header() -> None:
    async def scenario() -> grpc.StatusCode:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, None) as prober:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await prober.confirm_membership(handler.silo_address, 2.0)
            return failure.value.code()

    assert run(scenario()) is grpc.StatusCode.INVALID_ARGUMENT


def test_get_membership_reads_a_peers_view() -> None:
    async def scenario() -> int:
        async with serving(FakeHandler) as (_, handler), GrpcProber(CLUSTER, None) as prober:
            response = await prober.get_membership(handler.silo_address, 2.0)
            return codec.address_from_proto(response.responder).port

    assert run(scenario()) > 0


async def streams_closed(server: CountingServer, within: float) -> bool:
    deadline = time.monotonic() + within
    while server.streams_open and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return server.streams_open == 0


def test_a_prober_keeps_at_most_max_channels_and_reopens_an_evicted_one_with_its_ping_stream() -> None:
    async def scenario() -> tuple[ProbeOutcome, int, bool, ProbeOutcome, int, int]:
        async with (
            serving(FakeHandler, server_type=CountingServer) as (server, handler),
            GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober,
        ):
            assert isinstance(server, CountingServer)
            first = await prober.ping(handler.silo_address, 2.0)
            closed = [SiloAddress("127.0.0.1", port, 1) for port in range(1, MAX_CHANNELS + 6)]  # privileged: refused
            await asyncio.gather(*(prober.ping(target, 2.0) for target in closed))
            kept = prober.open_channels
            stream_closed = await streams_closed(server, 2.0)  # with its evicted channel
            again = await prober.ping(handler.silo_address, 2.0)  # its channel was evicted: opened anew
            return first, kept, stream_closed, again, prober.open_channels, server.streams_opened

    first, kept, stream_closed, again, after, opened = run(scenario())
    assert (first, again) == (ProbeOutcome.ANSWERED, ProbeOutcome.ANSWERED)
    assert kept == MAX_CHANNELS
    assert stream_closed
    assert after == MAX_CHANNELS
    assert opened == 2


@contextlib.asynccontextmanager
async def slow_handshake_proxy(target: SiloAddress, delay: float) -> AsyncIterator[int]:
    """A TCP proxy to ``target`` that holds each new connection ``delay`` seconds before relaying:
    a silo whose process is too busy to finish an HTTP/2 handshake at once."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(delay)
        server_reader, server_writer = await asyncio.open_connection(target.host, target.port)
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield proxy.sockets[0].getsockname()[1]
    finally:
        proxy.close()


def test_a_silo_that_is_slow_to_finish_the_handshake_is_still_reached() -> None:
    """gRPC takes ``grpc.min_reconnect_backoff_ms`` as the connect timeout: at the callers' 100 ms
    a busy silo (here 300 ms to start its handshake) is never reached; silos give a connection the
    probe timeout (``channel_options``)."""

    async def scenario(connect_timeout: float | None) -> str:
        async with (
            serving(FakeHandler) as (_, handler),
            slow_handshake_proxy(handler.silo_address, 0.3) as port,
            GrpcProber(CLUSTER, ME, connect_timeout=connect_timeout) as prober,
        ):
            try:
                await prober.ping_call(SiloAddress("127.0.0.1", port, handler.silo_address.generation), 2.0)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "answered"

    assert run(scenario(2.0)) == "answered"
    assert run(scenario(None)) == "UNAVAILABLE"
