"""The Membership and Work gRPC services and the health service, over real gRPC on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from membership_tables import MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.client.view_sources import GATEWAY_CHANNEL_OPTIONS
from silo.membership.probing import GossipMessage, IndirectProbeResult
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.server import BindError, MembershipServer
from silo.work.handlers import CHECKSUM_HANDLER, checksum
from silo.work.hashring import KEY_HASH, HashRing
from silo.work.registry import HandlerRegistry
from tests.silo.rpc_fakes import CLUSTER, T0, FakeHandler, entry, run, serve_work, serving

pytestmark = pytest.mark.slow

PEER = SiloAddress("127.0.0.1", 4242, 7)


async def call(
    port: int, method: codec.Method[codec.Request, codec.Response], request: codec.Request, timeout: float = 5.0
) -> codec.Response:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await method.bind(channel)(request, timeout=timeout)


def header(cluster_id: str = CLUSTER) -> pb.RequestHeader:
    return codec.header(cluster_id, PEER)


def test_ping_answers_with_the_responder_address_and_health_score() -> None:
    async def scenario() -> pb.PingResponse:
        async with serving(lambda me: FakeHandler(me, score=3)) as (server, _):
            return await call(server.port, codec.PING, pb.PingRequest(header=header()))

    response = run(scenario())
    assert response.health_score == 3
    assert response.responder.host == "127.0.0.1"
    assert response.responder.generation == 1


async def bidi_stream(
    port: int, method: codec.BidiStreamMethod[Any, Any], requests: list[Any]
) -> tuple[list[Any], grpc.aio.AioRpcError | None]:
    """Write ``requests`` on one ``method`` stream, reading each answer; the answers, and the error that ended it."""
    answers: list[Any] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stream = method.bind(channel)()
        try:
            for request in requests:
                await stream.write(request)
                answer = await stream.read()
                assert isinstance(answer, method.response)
                answers.append(answer)
        except grpc.aio.AioRpcError as exc:
            return answers, exc
        finally:
            stream.cancel()
    return answers, None


async def ping_stream(
    port: int, requests: list[pb.PingRequest]
) -> tuple[list[pb.PingResponse], grpc.aio.AioRpcError | None]:
    return await bidi_stream(port, codec.PING_STREAM, requests)


def test_a_ping_stream_answers_every_request_like_ping_echoing_its_sequence() -> None:
    async def scenario() -> tuple[list[pb.PingResponse], grpc.aio.AioRpcError | None, pb.PingResponse]:
        async with serving(lambda me: FakeHandler(me, score=2)) as (server, _):
            answers, error = await ping_stream(
                server.port, [pb.PingRequest(header=header(), sequence=s) for s in (7, 8, 2**64 - 1)]
            )
            unary = await call(server.port, codec.PING, pb.PingRequest(header=header(), sequence=5))
            return answers, error, unary

    answers, error, unary = run(scenario())
    assert error is None
    assert [answer.sequence for answer in answers] == [7, 8, 2**64 - 1]
    assert {(a.responder.port, a.responder.generation, a.health_score) for a in answers} == {
        (unary.responder.port, 1, 2)
    }
    assert unary.sequence == 5


def test_a_gossip_stream_hands_every_message_to_the_silo_and_answers_each_echoing_its_sequence() -> None:
    async def scenario() -> tuple[list[Any], grpc.aio.AioRpcError | None, list[int]]:
        async with serving(FakeHandler) as (server, handler):
            requests = [pb.GossipRequest(header=header(), version=v, sequence=100 + v) for v in (4, 5, 3)]
            answers, error = await bidi_stream(server.port, codec.GOSSIP_STREAM, requests)
            return answers, error, handler.gossiped

    answers, error, gossiped = run(scenario())
    assert error is None
    assert [answer.sequence for answer in answers] == [104, 105, 103]
    assert gossiped == [4, 5, 3]


def test_invalid_gossip_on_a_stream_ends_it_with_invalid_argument_after_the_valid_messages() -> None:
    invalid = pb.GossipRequest(header=header(), version=7, sequence=2)
    invalid.delta.base_version = 6
    invalid.delta.rows.add().address.port = 70_000  # no such port

    async def scenario() -> tuple[list[Any], grpc.aio.AioRpcError | None, list[int]]:
        async with serving(FakeHandler) as (server, handler):
            requests = [pb.GossipRequest(header=header(), version=5, sequence=1), invalid]
            answers, error = await bidi_stream(server.port, codec.GOSSIP_STREAM, requests)
            return answers, error, handler.gossiped

    answers, error, gossiped = run(scenario())
    assert [answer.sequence for answer in answers] == [1]
    assert error is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid gossip" in (error.details() or "")
    assert gossiped == [5]


@dataclass
class SlowGossipHandler(FakeHandler):
    """Takes gossip only once ``release`` is set (``entered`` is set when a message arrives)."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        self.entered.set()
        await self.release.wait()
        await super().on_gossip(message, sender)


def test_a_stream_busy_with_a_message_when_the_server_stops_ends_quietly_once_it_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``stop()`` cancels only the streams waiting for a request: one cancelled while it took a
    message (or while gRPC wrote its answer) ended with a cancellation gRPC logged as an error."""

    async def scenario() -> tuple[list[Any], grpc.aio.AioRpcError | None, list[int]]:
        server = MembershipServer("127.0.0.1", 0)
        handler = SlowGossipHandler(SiloAddress("127.0.0.1", server.port, 1))
        await server.start(handler)
        call = asyncio.ensure_future(
            bidi_stream(server.port, codec.GOSSIP_STREAM, [pb.GossipRequest(header=header(), version=4, sequence=1)])
        )
        await handler.entered.wait()
        stopping = asyncio.ensure_future(server.stop(None))
        await asyncio.sleep(0.1)
        handler.release.set()
        await stopping
        answers, error = await call
        return answers, error, handler.gossiped

    with caplog.at_level(logging.ERROR):
        answers, error, gossiped = run(scenario())
    assert gossiped == [4], "the message in hand was taken"
    assert [answer.sequence for answer in answers] == [1]
    assert error is None
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


STREAMS = [codec.PING_STREAM, codec.GOSSIP_STREAM]


@pytest.mark.parametrize("method", STREAMS, ids=lambda method: method.name)
@pytest.mark.parametrize("answered_first", [0, 2], ids=["first-request", "later-request"])
def test_a_stream_request_for_another_cluster_ends_the_stream_and_is_logged(
    method: codec.BidiStreamMethod[Any, Any], answered_first: int, caplog: pytest.LogCaptureFixture
) -> None:
    def request(cluster_id: str, sequence: int) -> Any:
        if method is codec.GOSSIP_STREAM:
            return pb.GossipRequest(header=header(cluster_id), version=sequence, sequence=sequence)
        return pb.PingRequest(header=header(cluster_id), sequence=sequence)

    requests = [request(CLUSTER, s) for s in range(1, answered_first + 1)]
    requests += [request("other-cluster", 9), request(CLUSTER, 10)]

    async def scenario() -> tuple[list[Any], grpc.aio.AioRpcError | None]:
        async with serving(FakeHandler) as (server, _):
            return await bidi_stream(server.port, method, requests)

    with caplog.at_level(logging.WARNING, logger="silo.wire.server"):
        answers, error = run(scenario())
    assert len(answers) == answered_first
    assert error is not None
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'other-cluster'" in (error.details() or "")
    assert any(f"refused {method.name}" in r.message and str(PEER) in r.message for r in caplog.records)


REQUESTS_OF_ANOTHER_CLUSTER: list[tuple[codec.Method[Any, Any], Any]] = [
    (codec.PING, pb.PingRequest(header=header("other-cluster"))),
    (codec.PROBE_INDIRECTLY, pb.ProbeIndirectlyRequest(header=header("other-cluster"), timeout_seconds=1.0)),
    (codec.GOSSIP, pb.GossipRequest(header=header("other-cluster"), version=9)),
    (codec.GET_MEMBERSHIP, pb.GetMembershipRequest(header=header("other-cluster"))),
    (codec.PROCESS, pb.ProcessRequest(cluster_id="other-cluster", sender=str(PEER), handler=CHECKSUM_HANDLER)),
]


@pytest.mark.parametrize(
    ("method", "request_message"), REQUESTS_OF_ANOTHER_CLUSTER, ids=lambda m: getattr(m, "name", "")
)
def test_a_request_for_another_cluster_is_refused_and_logged(
    method: codec.Method[Any, Any], request_message: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[grpc.aio.AioRpcError, FakeHandler]:
        async with serving(FakeHandler) as (server, handler):
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await call(server.port, method, request_message)
            return failure.value, handler

    with caplog.at_level(logging.WARNING, logger="silo.wire.server"):
        error, handler = run(scenario())
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'test-cluster'" in error.details()
    assert "'other-cluster'" in error.details()
    assert handler.gossiped == []
    assert any("refused" in record.message and str(PEER) in record.message for record in caplog.records)


def test_probe_indirectly_pings_the_target_through_the_handler() -> None:
    asked: list[tuple[SiloAddress, float]] = []

    async def probe(target: SiloAddress, timeout: float) -> IndirectProbeResult:
        asked.append((target, timeout))
        return IndirectProbeResult(False, intermediary_health_score=2, response_time=0.25, failure_message="timeout")

    async def scenario() -> pb.ProbeIndirectlyResponse:
        async with serving(lambda me: FakeHandler(me, probe=probe)) as (server, _):
            request = pb.ProbeIndirectlyRequest(
                header=header(), target=codec.address_to_proto(PEER), timeout_seconds=1.5
            )
            return await call(server.port, codec.PROBE_INDIRECTLY, request)

    response = run(scenario())
    assert asked == [(PEER, 1.5)]
    assert (response.succeeded, response.intermediary_health_score) == (False, 2)
    assert (response.response_time_seconds, response.failure_message) == (0.25, "timeout")


@pytest.mark.parametrize(
    "request_message",
    [
        pb.ProbeIndirectlyRequest(header=header(), timeout_seconds=1.0),  # no target
        pb.ProbeIndirectlyRequest(header=header(), target=codec.address_to_proto(PEER), timeout_seconds=0),
    ],
    ids=["missing-target", "zero-timeout"],
)
def test_probe_indirectly_rejects_invalid_arguments(request_message: pb.ProbeIndirectlyRequest) -> None:
    async def scenario() -> grpc.StatusCode:
        async with serving(FakeHandler) as (server, _):
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await call(server.port, codec.PROBE_INDIRECTLY, request_message)
            return failure.value.code()

    assert run(scenario()) == grpc.StatusCode.INVALID_ARGUMENT


def test_gossip_hands_the_version_to_the_handler() -> None:
    async def scenario() -> list[int]:
        async with serving(FakeHandler) as (server, handler):
            await call(server.port, codec.GOSSIP, pb.GossipRequest(header=header(), version=42))
            return handler.gossiped

    assert run(scenario()) == [42]


def test_get_membership_returns_the_handlers_snapshot() -> None:
    row = entry(
        PEER,
        SiloStatus.ACTIVE,
        silo_name="alpha",
        proxy_port=30000,
        suspect_times=((SiloAddress("10.0.0.1", 1, 2), T0),),
        properties={"zone": "a"},
    )
    snapshot = MembershipTableData(((row, "etag-1"),), TableVersion(5, "v-etag"))

    async def scenario() -> pb.GetMembershipResponse:
        async with serving(lambda me: FakeHandler(me, snapshot=snapshot)) as (server, _):
            return await call(server.port, codec.GET_MEMBERSHIP, pb.GetMembershipRequest(header=header()))

    response = run(scenario())
    assert codec.snapshot_from_proto(response) == snapshot
    assert response.responder.host == "127.0.0.1"


async def health_of(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5.0)
        return int(response.status)


@pytest.mark.parametrize("service", ["", codec.SERVICE_NAME])
def test_health_is_serving_only_while_the_silo_says_so(service: str) -> None:
    async def scenario() -> list[int]:
        async with serving(FakeHandler) as (server, _):
            states = [await health_of(server.port, service)]
            await server.set_serving(True)
            states.append(await health_of(server.port, service))
            await server.set_serving(False)
            states.append(await health_of(server.port, service))
            return states

    serving_status = health_pb2.HealthCheckResponse
    assert run(scenario()) == [serving_status.NOT_SERVING, serving_status.SERVING, serving_status.NOT_SERVING]


def test_an_extra_gateway_port_serves_the_same_services() -> None:
    async def scenario() -> tuple[int, pb.PingResponse]:
        server = MembershipServer("127.0.0.1", 0)
        gateway = server.add_port(0)
        await server.start(FakeHandler(SiloAddress("127.0.0.1", server.port, 1)))
        try:
            return gateway, await call(gateway, codec.PING, pb.PingRequest(header=header()))
        finally:
            await server.stop(None)

    gateway, response = run(scenario())
    assert gateway != 0
    assert response.responder.generation == 1


def test_binding_a_port_in_use_fails_with_a_clear_error() -> None:
    async def scenario(port: int) -> None:
        MembershipServer("127.0.0.1", port)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(BindError, match="pick another --port"):
            run(scenario(taken.getsockname()[1]))


def table_data(version: int, *silos: SiloAddress) -> MembershipTableData:
    return MembershipTableData(tuple((entry(silo), f"e{silo.port}") for silo in silos), TableVersion(version, "v"))


async def watch(port: int, request: pb.WatchMembershipRequest) -> tuple[list[int], grpc.aio.AioRpcError]:
    """The versions streamed, and the error that ended the stream."""
    versions: list[int] = []

    async def read_stream(channel: grpc.aio.Channel) -> None:
        async for view in codec.WATCH_MEMBERSHIP.bind(channel)(request, timeout=5.0):
            versions.append(view.version)

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await read_stream(channel)
    return versions, ended.value


def test_watch_streams_every_snapshot_then_ends_with_unavailable_when_the_silo_stops() -> None:
    stream = (table_data(3, PEER), table_data(4, PEER, SiloAddress("127.0.0.1", 4243, 8)), table_data(6))

    async def scenario() -> tuple[list[int], grpc.aio.AioRpcError]:
        async with serving(lambda me: FakeHandler(me, stream=stream)) as (server, _):
            return await watch(server.port, pb.WatchMembershipRequest(header=header()))

    versions, ended = run(scenario())
    assert versions == [3, 4, 6]
    assert ended.code() == grpc.StatusCode.UNAVAILABLE
    assert "watch another gateway" in ended.details()


def test_a_watch_ends_with_unavailable_when_its_silo_fences_itself() -> None:
    """A fenced gateway's view is unconfirmed: its clients must watch another gateway."""

    async def scenario() -> tuple[grpc.StatusCode, str]:
        async with (
            serving(lambda me: FakeHandler(me, hold_open=True)) as (server, handler),
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stream = codec.WATCH_MEMBERSHIP.bind(channel)(pb.WatchMembershipRequest(header=header()), timeout=10.0)
            views = aiter(stream)
            await anext(views)
            handler.fenced = True
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await anext(views)
            return ended.value.code(), ended.value.details() or ""

    code, details = run(scenario())
    assert code is grpc.StatusCode.UNAVAILABLE
    assert "is fenced" in details
    assert "watch another gateway" in details


def test_a_quiet_watch_survives_the_clients_keepalive_pings() -> None:
    # The server must accept a ping every 5 s or more; by default it answers the third ping of a
    # quiet connection with GOAWAY "too_many_pings". The first value of a channel option wins.
    options = [("grpc.keepalive_time_ms", 6000), *GATEWAY_CHANNEL_OPTIONS]

    async def scenario() -> None:
        async with (
            serving(lambda me: FakeHandler(me, hold_open=True)) as (server, _),
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=options) as channel,
        ):
            stream = codec.WATCH_MEMBERSHIP.bind(channel)(pb.WatchMembershipRequest(header=header()))
            views = aiter(stream)
            await anext(views)
            with pytest.raises(TimeoutError):  # nothing more to say, and no GOAWAY either
                await asyncio.wait_for(anext(views), 20)

    run(scenario())


def test_watch_events_carry_the_time_the_silos_view_changed_not_the_time_the_stream_sent_them() -> None:
    joiner = SiloAddress("127.0.0.1", 4243, 8)
    observed = T0 + timedelta(seconds=5)
    stream = (table_data(3, PEER), table_data(4, PEER, joiner))

    async def scenario() -> list[pb.MembershipView]:
        async with (
            serving(lambda me: FakeHandler(me, stream=stream, observed_at=observed)) as (server, _),
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            call = codec.WATCH_MEMBERSHIP.bind(channel)(pb.WatchMembershipRequest(header=header()), timeout=5.0)
            return [await call.read(), await call.read()]

    views = run(scenario())
    [joined] = views[1].events
    assert joined.kind == pb.MEMBERSHIP_EVENT_KIND_JOINED
    assert joined.observed_at_unix_micros == codec.to_micros(observed)


def test_watch_after_a_version_skips_it_and_older_ones() -> None:
    stream = (table_data(3), table_data(4), table_data(5))

    async def scenario() -> list[int]:
        async with serving(lambda me: FakeHandler(me, stream=stream)) as (server, _):
            versions, _ = await watch(server.port, pb.WatchMembershipRequest(header=header(), after_version=4))
            return versions

    assert run(scenario()) == [5]


def test_watch_of_another_cluster_is_refused() -> None:
    async def scenario() -> tuple[list[int], grpc.aio.AioRpcError]:
        async with serving(FakeHandler) as (server, _):
            return await watch(server.port, pb.WatchMembershipRequest(header=header("other-cluster")))

    versions, refused = run(scenario())
    assert versions == []
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'other-cluster'" in refused.details()


def process_request(handler: str, *keys: str) -> pb.ProcessRequest:
    items = [pb.WorkItem(key=key, payload=key.encode() * 2) for key in keys]
    return pb.ProcessRequest(cluster_id=CLUSTER, sender="a test", handler=handler, items=items)


async def process_on(registry: HandlerRegistry, request: pb.ProcessRequest, **fake: Any) -> pb.ProcessResponse:
    server = MembershipServer("127.0.0.1", 0)
    silo = FakeHandler(SiloAddress("127.0.0.1", server.port, 1), **fake)
    serve_work(server, silo, registry)
    await server.start(silo)
    try:
        return await call(server.port, codec.PROCESS, request)
    finally:
        await server.stop(None)


def test_process_runs_a_registered_handler_in_a_worker_thread_one_result_per_item_in_order() -> None:
    threads: list[str] = []

    def shout(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
        threads.append(threading.current_thread().name)
        return [key.upper().encode() + payload for key, payload in items]

    response = run(process_on(HandlerRegistry({"shout": shout}), process_request("shout", "a", "b", "c")))
    assert list(response.results) == [b"Aaa", b"Bbb", b"Ccc"]
    assert response.silo.startswith("127.0.0.1:")
    assert len(threads) == 1
    assert threads[0].startswith("silo-work"), "handlers must not run on the event loop"


def test_the_builtin_checksum_handler_is_always_registered() -> None:
    response = run(process_on(HandlerRegistry(), process_request(CHECKSUM_HANDLER, "k1", "k2")))
    assert list(response.results) == [checksum("k1", b"k1k1"), checksum("k2", b"k2k2")]


def fails(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    raise ZeroDivisionError("the handler divided by zero")


def too_few(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    return [b"only one"]


def not_bytes(items: Sequence[tuple[str, bytes]]) -> list[str]:
    return ["text" for _ in items]


@pytest.mark.parametrize(
    ("handler", "fake", "code", "message"),
    [
        ("nosuch", {}, grpc.StatusCode.NOT_FOUND, "no handler 'nosuch'"),
        ("fails", {}, grpc.StatusCode.INTERNAL, "ZeroDivisionError: the handler divided by zero"),
        ("too_few", {}, grpc.StatusCode.INVALID_ARGUMENT, "returned 1 results for 2 items"),
        ("not_bytes", {}, grpc.StatusCode.INVALID_ARGUMENT, "every result must be bytes"),
        (CHECKSUM_HANDLER, {"status": SiloStatus.JOINING}, grpc.StatusCode.UNAVAILABLE, "is JOINING, not ACTIVE"),
        (CHECKSUM_HANDLER, {"status": SiloStatus.DEAD}, grpc.StatusCode.UNAVAILABLE, "send the batch to another"),
    ],
    ids=["unknown-handler", "handler-raises", "wrong-count", "not-bytes", "joining", "dead"],
)
def test_process_errors_carry_the_agreed_status_codes(
    handler: str, fake: dict[str, Any], code: grpc.StatusCode, message: str
) -> None:
    registry = HandlerRegistry({"fails": fails, "too_few": too_few, "not_bytes": not_bytes})  # type: ignore[dict-item]

    async def scenario() -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await process_on(registry, process_request(handler, "a", "b"), **fake)
        return failure.value

    error = run(scenario())
    assert error.code() == code
    assert message in error.details()


def test_process_answers_under_the_silos_fencing_token() -> None:
    response = run(process_on(HandlerRegistry(), process_request(CHECKSUM_HANDLER, "k1")))
    assert response.fencing_token == 7


def test_process_refuses_keys_another_silo_owns_and_a_view_newer_than_the_silos_with_aborted() -> None:
    other = SiloAddress("127.0.0.1", 4999, 3)
    ring = HashRing([other, SiloAddress("127.0.0.1", 1, 1)])
    keys = [f"key-{number}" for number in range(50)]

    async def scenario(request: pb.ProcessRequest, **fake: Any) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await process_on(HandlerRegistry(), request, **fake)
        return failure.value

    foreign = [key for key in keys if ring.owner(key) == other]  # the server's port differs; most are foreign
    stated = process_request(CHECKSUM_HANDLER, *keys)
    stated.key_hash = KEY_HASH
    refused = run(scenario(stated, ring_peers=(other,)))
    assert foreign
    assert refused.code() == grpc.StatusCode.ABORTED
    assert "are not owned by silo" in refused.details()
    assert "blake2b" not in refused.details()
    unstated = run(scenario(process_request(CHECKSUM_HANDLER, *keys), ring_peers=(other,)))
    assert unstated.code() == grpc.StatusCode.ABORTED
    assert "does not say how its caller placed them" in unstated.details()

    newer = process_request(CHECKSUM_HANDLER, "k1")
    newer.view_version = 9
    behind = run(scenario(newer))
    assert behind.code() == grpc.StatusCode.ABORTED
    assert "has not caught up with view version 9" in behind.details()


def test_process_refuses_a_caller_that_places_keys_with_another_hash_and_runs_nothing() -> None:
    ran: list[int] = []

    def handler(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
        ran.append(len(items))
        return [b"done" for _ in items]

    request = process_request("effect", "k1", "k2")
    request.key_hash = "blake2b-64"
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        run(process_on(HandlerRegistry({"effect": handler}), request))
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'blake2b-64'" in failure.value.details()
    assert f"{KEY_HASH!r}" in failure.value.details()
    assert ran == []


def test_results_of_a_handler_that_outlived_the_lease_are_withheld_with_unavailable() -> None:
    ran: list[int] = []

    def handler(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
        ran.append(len(items))
        return [b"done" for _ in items]

    registry = HandlerRegistry({"effect": handler})
    reason = "silo lost its membership lease while the handler ran"
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        run(process_on(registry, process_request("effect", "k1", "k2"), withheld=reason))
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE, "the router sends the batch to another silo"
    assert failure.value.details() == reason
    assert ran == [2], "the handler ran; only its results are withheld"


def test_get_membership_follows_the_handlers_view_from_one_pull_to_the_next() -> None:
    """The answer is built once per view (peers that fell behind pull the same view at once), and
    never outlives it."""
    first = MembershipTableData(((entry(PEER, SiloStatus.ACTIVE), "e1"),), TableVersion(5, "v5"))
    second = MembershipTableData(((entry(PEER, SiloStatus.DEAD), "e2"),), TableVersion(6, "v6"))

    async def scenario() -> list[MembershipTableData]:
        async with serving(lambda me: FakeHandler(me, snapshot=first)) as (server, handler):
            pulls = []
            for view in (first, first, second):
                handler.snapshot = view
                answer = await call(server.port, codec.GET_MEMBERSHIP, pb.GetMembershipRequest(header=header()))
                pulls.append(codec.snapshot_from_proto(answer))
            return pulls

    assert run(scenario()) == [first, first, second]
