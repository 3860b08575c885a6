"""Probes and gossip over one ``PingStream`` / ``GossipStream`` per peer, against real gRPC servers on 127.0.0.1.

``CountingServer`` is a real ``MembershipServer`` that counts its streams and can hold its ping
answers (a hung silo); ``OlderSilo`` is a gRPC server of a silo from before the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from membership_tables import SiloAddress, TableVersion
from silo.membership.background import BackgroundTasks
from silo.membership.probing import GossipMessage, ProbeOutcome
from silo.membership.snapshot import MembershipDelta
from silo.wire import call_streams, codec
from silo.wire.call_streams import UNARY_CALLS_FIRST, StreamedCalls
from silo.wire.prober import GrpcProber
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from tests.silo.rpc_fakes import CLUSTER, CountingServer, FakeHandler, entry, run, serving

pytestmark = pytest.mark.slow

ME = SiloAddress("127.0.0.1", 1, 99)


@contextlib.asynccontextmanager
async def counting(port: int = 0) -> AsyncIterator[tuple[CountingServer, SiloAddress]]:
    async with serving(FakeHandler, port=port, server_type=CountingServer) as (server, handler):
        assert isinstance(server, CountingServer)
        yield server, handler.silo_address


def test_pings_go_over_one_stream_that_stays_open() -> None:
    async def scenario() -> tuple[list[ProbeOutcome], int, int]:
        async with counting() as (server, target), GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            outcomes = [await prober.ping(target, 2.0) for _ in range(5)]
            return outcomes, server.streams_opened, server.streams_open

    outcomes, opened, still_open = run(scenario())
    assert outcomes == [ProbeOutcome.ANSWERED] * 5
    assert (opened, still_open) == (1, 1)


def test_an_endpoint_gets_its_stream_only_once_it_is_pinged_again_and_again() -> None:
    """One-off pings (a joining silo validating its connectivity, an indirect probe) stay unary:
    a stream opened for each would cost more than it saves."""

    async def scenario() -> list[int]:
        async with counting() as (server, target), GrpcProber(CLUSTER, ME) as prober:
            opened = []
            for _ in range(UNARY_CALLS_FIRST + 2):
                assert await prober.ping(target, 2.0) is ProbeOutcome.ANSWERED
                opened.append(server.streams_opened)
            return opened

    assert run(scenario()) == [0] * UNARY_CALLS_FIRST + [1, 1]


def test_an_answer_from_another_incarnation_on_the_stream_is_a_refusal() -> None:
    async def scenario() -> tuple[ProbeOutcome, ProbeOutcome, int]:
        async with counting() as (server, target), GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            older = SiloAddress(target.host, target.port, target.generation - 1)
            gone, alive = await asyncio.gather(prober.ping(older, 2.0), prober.ping(target, 2.0))
            return gone, alive, server.streams_opened

    assert run(scenario()) == (ProbeOutcome.REFUSED, ProbeOutcome.ANSWERED, 1)


def test_a_hung_silo_times_out_within_the_timeout_and_the_stream_answers_again_once_it_recovers() -> None:
    async def scenario() -> tuple[ProbeOutcome, float, ProbeOutcome, int]:
        async with counting() as (server, target), GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            assert await prober.ping(target, 2.0) is ProbeOutcome.ANSWERED
            server.answering.clear()
            started = time.monotonic()
            hung = await prober.ping(target, 0.3)
            elapsed = time.monotonic() - started
            server.answering.set()  # the held answer goes out late and is dropped
            return hung, elapsed, await prober.ping(target, 2.0), server.streams_opened

    hung, elapsed, recovered, opened = run(scenario())
    assert hung is ProbeOutcome.TIMED_OUT
    assert 0.3 <= elapsed < 1.0
    assert recovered is ProbeOutcome.ANSWERED
    assert opened == 1


def test_a_late_answer_is_dropped_and_overlapping_pings_each_get_their_own() -> None:
    async def scenario() -> list[int]:
        async with counting() as (server, target):
            channel = grpc.aio.insecure_channel(target.endpoint)
            readers = BackgroundTasks()
            pinger = StreamedCalls(
                target.endpoint, channel, codec.PING_STREAM, codec.PING, readers, unary_calls_first=0
            )
            try:
                server.answering.clear()
                with pytest.raises(TimeoutError):
                    await pinger.call(pb.PingRequest(header=codec.header(CLUSTER, ME), sequence=1), 0.2)
                overlapping = [
                    asyncio.create_task(pinger.call(pb.PingRequest(header=codec.header(CLUSTER, ME), sequence=s), 5.0))
                    for s in (2, 3, 4)
                ]
                await asyncio.sleep(0.1)
                server.answering.set()  # the answer to 1 comes first: nobody waits for it any more
                return [answer.sequence for answer in await asyncio.gather(*overlapping)]
            finally:
                pinger.close()
                await readers.cancel_all()
                await channel.close()

    assert run(scenario()) == [2, 3, 4]


async def answered_within(prober: GrpcProber, target: SiloAddress, seconds: float) -> ProbeOutcome:
    """Ping until answered: the channel reconnects after a backoff (at most 1 s), refused until then."""
    deadline = time.monotonic() + seconds
    while (outcome := await prober.ping(target, 1.0)) is not ProbeOutcome.ANSWERED and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return outcome


def test_a_stopped_silo_fails_the_waiting_ping_at_once_and_a_restarted_one_gets_a_new_stream() -> None:
    async def scenario() -> tuple[ProbeOutcome, float, ProbeOutcome, ProbeOutcome, int]:
        async with GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            async with counting() as (server, target):
                assert await prober.ping(target, 2.0) is ProbeOutcome.ANSWERED
                server.answering.clear()
                waiting = asyncio.create_task(prober.ping(target, 5.0))
                await asyncio.sleep(0.1)
                started = time.monotonic()
                await server.stop(None)
                broken = await waiting
                elapsed = time.monotonic() - started
                gone = await prober.ping(target, 2.0)
            async with counting(port=target.port) as (restarted, same):
                assert same == target
                back = await answered_within(prober, target, 5.0)
                return broken, elapsed, gone, back, restarted.streams_opened

    broken, elapsed, gone, back, opened = run(scenario())
    assert broken is ProbeOutcome.TIMED_OUT
    assert elapsed < 2.0, "the broken stream ends the waiting ping, not its timeout"
    assert gone is ProbeOutcome.REFUSED
    assert (back, opened) == (ProbeOutcome.ANSWERED, 1)


class OlderSilo(grpc.GenericRpcHandler):
    """The Membership service of a silo from before the streams: unary Ping and Gossip; records what it is asked."""

    def __init__(self, address: SiloAddress) -> None:
        self.address = address
        self.asked: list[str] = []

    def service(self, handler_call_details: Any) -> Any:
        method: str = handler_call_details.method
        self.asked.append(method.rpartition("/")[2])
        unary = {codec.PING.path: (codec.PING, self._ping), codec.GOSSIP.path: (codec.GOSSIP, self._gossip)}
        if method not in unary:
            return None
        rpc, behaviour = unary[method]
        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=rpc.request.FromString,
            response_serializer=rpc.response.SerializeToString,
        )

    async def _ping(self, request: pb.PingRequest, context: Any) -> pb.PingResponse:
        return pb.PingResponse(responder=codec.address_to_proto(self.address), sequence=request.sequence)

    async def _gossip(self, request: pb.GossipRequest, context: Any) -> pb.GossipResponse:
        return pb.GossipResponse()


@contextlib.asynccontextmanager
async def older_silo() -> AsyncIterator[OlderSilo]:
    server = grpc.aio.server()
    silo = OlderSilo(SiloAddress("127.0.0.1", server.add_insecure_port("127.0.0.1:0"), 1))
    server.add_generic_rpc_handlers((silo,))
    await server.start()
    try:
        yield silo
    finally:
        await server.stop(None)


def test_a_silo_without_ping_stream_is_pinged_with_unary_calls_and_the_stream_is_tried_again_later(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(call_streams, "STREAM_RETRY_SECONDS", 1.0)

    async def scenario() -> tuple[list[ProbeOutcome], list[str], list[str]]:
        async with older_silo() as silo, GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            outcomes = [await prober.ping(silo.address, 2.0) for _ in range(3)]
            asked_first = list(silo.asked)
            await asyncio.sleep(1.1)
            outcomes.append(await prober.ping(silo.address, 2.0))
            return outcomes, asked_first, silo.asked[len(asked_first) :]

    with caplog.at_level(logging.INFO, logger="silo.wire.call_streams"):
        outcomes, asked_first, asked_later = run(scenario())
    assert outcomes == [ProbeOutcome.ANSWERED] * 4
    assert asked_first == ["PingStream", "Ping", "Ping", "Ping"], "the first ping falls back at once"
    assert asked_later == ["PingStream", "Ping"]
    assert sum("does not serve PingStream" in record.getMessage() for record in caplog.records) == 2


def test_close_ends_the_waiting_pings_and_leaves_no_task(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> tuple[ProbeOutcome, set[asyncio.Task[Any]]]:
        async with counting() as (server, target):
            prober = GrpcProber(CLUSTER, ME, unary_calls_first=0)
            assert await prober.ping(target, 2.0) is ProbeOutcome.ANSWERED
            server.answering.clear()
            waiting = asyncio.create_task(prober.ping(target, 5.0))
            await asyncio.sleep(0.1)
            await prober.close()
            outcome = await waiting
        await asyncio.sleep(0.1)  # let gRPC's own callbacks settle
        return outcome, asyncio.all_tasks() - {asyncio.current_task()}

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        outcome, left = run(scenario())
    assert outcome is ProbeOutcome.TIMED_OUT
    assert left == set()
    assert not [record for record in caplog.records if record.name == "asyncio" and record.levelno >= logging.ERROR]


def gossip(version: int) -> GossipMessage:
    """A write at ``version`` of one row (a silo with that generation joining)."""
    joined = ((entry(SiloAddress("127.0.0.1", 2, version)), f"e{version}"),)
    return GossipMessage(version, MembershipDelta(version - 1, TableVersion(version, f"v{version}"), joined))


def test_gossip_goes_over_one_stream_once_a_peer_is_gossiped_to_again_and_again() -> None:
    async def scenario() -> tuple[list[int], list[int], int]:
        async with serving(FakeHandler, server_type=CountingServer) as (server, handler):
            assert isinstance(server, CountingServer)
            async with GrpcProber(CLUSTER, ME) as prober:
                opened = []
                for version in range(1, UNARY_CALLS_FIRST + 4):
                    await prober.send(handler.silo_address, gossip(version))
                    opened.append(server.gossip_streams_opened)
                return opened, handler.gossiped, server.gossip_streams_open

    opened, gossiped, still_open = run(scenario())
    assert opened == [0] * UNARY_CALLS_FIRST + [1, 1, 1]
    assert gossiped == list(range(1, UNARY_CALLS_FIRST + 4)), "each message taken once, in order"
    assert still_open == 1


def test_a_stream_unused_for_a_while_is_closed_and_the_next_call_opens_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(call_streams, "IDLE_CLOSE_SECONDS", 0.3)

    async def scenario() -> tuple[int, int, int, int]:
        async with serving(FakeHandler, server_type=CountingServer) as (server, handler):
            assert isinstance(server, CountingServer)
            async with GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
                for version in (1, 2):
                    await prober.send(handler.silo_address, gossip(version))
                open_while_used = server.gossip_streams_open
                await asyncio.sleep(0.6)
                open_when_idle = server.gossip_streams_open
                await prober.send(handler.silo_address, gossip(3))
                return open_while_used, open_when_idle, server.gossip_streams_open, server.gossip_streams_opened

    assert run(scenario()) == (1, 0, 1, 2)


def test_a_silo_without_gossip_stream_gets_unary_gossip() -> None:
    async def scenario() -> list[str]:
        async with older_silo() as silo, GrpcProber(CLUSTER, ME, unary_calls_first=0) as prober:
            for version in (1, 2, 3):
                await prober.send(silo.address, gossip(version))
            return silo.asked

    assert run(scenario()) == ["GossipStream", "Gossip", "Gossip", "Gossip"]
