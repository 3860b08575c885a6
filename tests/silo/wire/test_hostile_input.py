"""Hostile input against real silos: every RPC fuzzed with hypothesis, undecodable and oversized requests.

Three in-process silos (the real ``Silo`` behind the real gRPC server, ``tests.silo.live_silos``)
run on an event loop of their own thread for the whole module, so hypothesis examples are
plain blocking gRPC calls. Whatever a caller sends, a silo answers with a proper status (never
``UNKNOWN`` or ``INTERNAL``), changes nothing it should not, and keeps detecting failures: the
last test stops one silo's server and the others must declare it Dead.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership_tables import MembershipTable, SiloAddress, SiloStatus, open_table
from silo.runtime.process import SiloStack
from silo.wire import codec
from silo.wire.channels import MAX_MESSAGE_BYTES
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.work.handlers import CHECKSUM_HANDLER
from silo.work.hashring import HashRing
from tests.silo.live_silos import LiveCluster

pytestmark = pytest.mark.slow

T = TypeVar("T")
CLUSTER = "hostile-input"
CALL_TIMEOUT = 10.0
"""A generous bound for one call on a loaded machine; an honest answer takes milliseconds."""

IMPROPER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
"""What a silo must never answer: a crash in a handler (UNKNOWN) or gRPC's own decoding failure (INTERNAL)."""

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
HOSTS = st.one_of(
    st.sampled_from(["127.0.0.1", "", " ", "a b", "x@y", "[::1]", "\x00", "ä" * 300]),
    st.text(max_size=40).map(lambda text: f"{text}@"),  # never a valid host: fast, no DNS lookups
)
CLUSTER_IDS = st.one_of(st.just(CLUSTER), st.text(max_size=64), st.sampled_from(["", CLUSTER + "x", CLUSTER.upper()]))
TIMEOUTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, -0.0, 1e-300, 1e300]),
)


@dataclass
class Cluster:
    """The running silos and a way to run coroutines on their loop."""

    loop: asyncio.AbstractEventLoop
    live: LiveCluster
    table: MembershipTable

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def stacks(self) -> list[SiloStack]:
        return self.live.stacks

    @property
    def target(self) -> str:
        """The endpoint every fuzzed request goes to."""
        return self.stacks[0].silo.silo_address.endpoint

    def statuses(self) -> list[SiloStatus]:
        return [stack.silo.status for stack in self.stacks]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="hostile-input-silos", daemon=True)
    thread.start()
    uri = f"memory://hostile-{uuid.uuid4().hex}"
    running = Cluster(loop, LiveCluster(uri, CLUSTER), open_table(uri, CLUSTER))
    try:
        for _ in range(3):
            running.run(running.live.start())
        yield running
        running.run(running.live.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture(scope="module")
def channel(cluster: Cluster) -> Iterator[grpc.Channel]:
    """A plain channel without size limits of its own: what an attacker would use."""
    with grpc.insecure_channel(cluster.target) as opened:
        yield opened


STREAM_PATHS = {codec.PING_STREAM.path, codec.GOSSIP_STREAM.path}


def call(channel: grpc.Channel, path: str, request: bytes, *, timeout: float = CALL_TIMEOUT) -> grpc.StatusCode:
    """Send raw ``request`` bytes to ``path`` (alone on a stream for ``STREAM_PATHS``); the answer's status."""
    try:
        if path in STREAM_PATHS:
            bidi = channel.stream_stream(path, request_serializer=None, response_deserializer=None)
            next(iter(bidi(iter([request]), timeout=timeout)))
        else:
            channel.unary_unary(path, request_serializer=None, response_deserializer=None)(request, timeout=timeout)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]  # grpc.RpcError raised by a call is a grpc.Call
    return grpc.StatusCode.OK


def first_view(channel: grpc.Channel, request: pb.WatchMembershipRequest) -> grpc.StatusCode:
    """Open a watch and read its first view; a watch that has nothing newer to say runs out its deadline."""
    stream = channel.unary_stream(codec.WATCH_MEMBERSHIP.path, request_serializer=None, response_deserializer=None)
    try:
        next(iter(stream(request.SerializeToString(), timeout=0.3)))
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def address(host: str, port: int, generation: int) -> pb.SiloAddress:
    return pb.SiloAddress(host=host, port=port, generation=generation)


def addresses() -> st.SearchStrategy[pb.SiloAddress]:
    return st.builds(address, HOSTS, INT32, INT64)


def headers() -> st.SearchStrategy[pb.RequestHeader]:
    return st.builds(
        lambda cluster_id, sender: pb.RequestHeader(cluster_id=cluster_id, sender=sender),
        CLUSTER_IDS,
        st.one_of(st.none(), addresses()),
    )


def canonical(table: MembershipTable) -> tuple[object, ...]:
    """The version and the rows but for heartbeats (which move on their own): what a write would change."""
    data = table.read_all()
    return data.version, tuple((entry.replace(i_am_alive_time=entry.start_time), etag) for entry, etag in data.rows)


def expect_proper(code: grpc.StatusCode, allowed: set[grpc.StatusCode]) -> None:
    assert code not in IMPROPER, f"the silo answered {code}: a crash or an undecoded request"
    assert code in allowed, f"unexpected {code}; expected one of {sorted(c.name for c in allowed)}"


REFUSED = {grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT}


@given(headers())
def test_ping(channel: grpc.Channel, header: pb.RequestHeader) -> None:
    code = call(channel, codec.PING.path, pb.PingRequest(header=header).SerializeToString())
    expect_proper(code, {grpc.StatusCode.OK if header.cluster_id == CLUSTER else grpc.StatusCode.FAILED_PRECONDITION})


@given(headers(), st.one_of(st.none(), addresses()), TIMEOUTS)
def test_probe_indirectly(
    channel: grpc.Channel, header: pb.RequestHeader, target: pb.SiloAddress | None, timeout: float
) -> None:
    request = pb.ProbeIndirectlyRequest(header=header, target=target, timeout_seconds=timeout)
    code = call(channel, codec.PROBE_INDIRECTLY.path, request.SerializeToString())
    if header.cluster_id != CLUSTER:
        expect_proper(code, {grpc.StatusCode.FAILED_PRECONDITION})
    elif not (math.isfinite(timeout) and timeout > 0) or target is None:
        expect_proper(code, {grpc.StatusCode.INVALID_ARGUMENT})
    else:  # an invalid target is refused; a valid one (nothing listens on it) answers "not reached"
        expect_proper(code, {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT})


@given(headers(), INT64)
def test_gossip(cluster: Cluster, channel: grpc.Channel, header: pb.RequestHeader, version: int) -> None:
    before = cluster.table.read_version()
    code = call(channel, codec.GOSSIP.path, pb.GossipRequest(header=header, version=version).SerializeToString())
    expect_proper(code, {grpc.StatusCode.OK if header.cluster_id == CLUSTER else grpc.StatusCode.FAILED_PRECONDITION})
    assert cluster.table.read_version() == before, "gossip only makes a silo read, never write"


def rows() -> st.SearchStrategy[pb.MembershipRow]:
    return st.builds(
        lambda silo, status, start, alive, voter, properties, etag: pb.MembershipRow(
            address=silo,
            status=status,
            start_time_unix_micros=start,
            i_am_alive_time_unix_micros=alive,
            suspicions=[pb.SuspicionVote(by=voter, at_unix_micros=alive)],
            properties=properties,
            etag=etag,
        ),
        addresses(),
        st.integers(0, 9),
        INT64,
        INT64,
        addresses(),
        st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2),
        st.text(max_size=8),
    )


@given(
    st.sampled_from([codec.GOSSIP.path, codec.GOSSIP_STREAM.path]),
    headers(),
    INT64,
    INT64,
    INT64,
    st.text(max_size=12),
    st.lists(rows(), max_size=3),
    st.lists(addresses(), max_size=3),
)
def test_gossip_with_a_delta_and_relays(
    cluster: Cluster,
    channel: grpc.Channel,
    path: str,
    header: pb.RequestHeader,
    version: int,
    base_version: int,
    since_version: int,
    etag: str,
    delta_rows: list[pb.MembershipRow],
    relay_to: list[pb.SiloAddress],
) -> None:
    before = canonical(cluster.table)
    delta = pb.MembershipDelta(
        base_version=base_version, version_etag=etag, rows=delta_rows, since_version=since_version
    )
    request = pb.GossipRequest(header=header, version=version, delta=delta, relay_to=relay_to)
    code = call(channel, path, request.SerializeToString())
    if header.cluster_id != CLUSTER:
        expect_proper(code, {grpc.StatusCode.FAILED_PRECONDITION})
    else:
        expect_proper(code, {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT})
    assert canonical(cluster.table) == before, "gossip never makes a silo write"


def test_a_forged_delta_that_declares_silos_dead_stops_no_one(cluster: Cluster, channel: grpc.Channel) -> None:
    """A delta at exactly the silo's version, saying it and a peer are Dead: the silo checks with the table first."""
    target = cluster.stacks[0].silo
    current = target.snapshot
    forged = [codec.entry_to_proto(entry.replace(status=SiloStatus.DEAD), "forged") for entry in current.entries[:2]]
    delta = pb.MembershipDelta(base_version=current.version, version_etag="forged", rows=forged)
    request = pb.GossipRequest(header=pb.RequestHeader(cluster_id=CLUSTER), version=current.version + 1, delta=delta)
    assert call(channel, codec.GOSSIP.path, request.SerializeToString()) == grpc.StatusCode.OK
    time.sleep(1.0)  # the silo takes gossip in the background: give it time to check with the table
    assert cluster.statuses() == [SiloStatus.ACTIVE] * 3
    assert target.snapshot.status_of(target.silo_address) is SiloStatus.ACTIVE


@given(headers())
def test_get_membership(channel: grpc.Channel, header: pb.RequestHeader) -> None:
    code = call(channel, codec.GET_MEMBERSHIP.path, pb.GetMembershipRequest(header=header).SerializeToString())
    expect_proper(code, {grpc.StatusCode.OK if header.cluster_id == CLUSTER else grpc.StatusCode.FAILED_PRECONDITION})


@given(headers())
def test_confirm_membership(cluster: Cluster, channel: grpc.Channel, header: pb.RequestHeader) -> None:
    """Any asker is answered (a stranger without a table read) or refused; the table is never written."""
    before = canonical(cluster.table)
    code = call(channel, codec.CONFIRM_MEMBERSHIP.path, pb.ConfirmMembershipRequest(header=header).SerializeToString())
    if header.cluster_id != CLUSTER:
        expect_proper(code, {grpc.StatusCode.FAILED_PRECONDITION})
    else:
        expect_proper(code, {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT})
    assert canonical(cluster.table) == before


@given(headers(), st.one_of(st.none(), INT64))
def test_watch_membership(cluster: Cluster, channel: grpc.Channel, header: pb.RequestHeader, after: int | None) -> None:
    request = pb.WatchMembershipRequest(header=header, after_version=after)
    code = first_view(channel, request)
    if header.cluster_id != CLUSTER:
        expect_proper(code, {grpc.StatusCode.FAILED_PRECONDITION})
    elif after is not None and after >= cluster.table.read_version().version:
        expect_proper(code, {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.OK})  # nothing newer yet
    else:
        expect_proper(code, {grpc.StatusCode.OK})


@given(
    cluster_id=CLUSTER_IDS,
    sender=st.text(max_size=40),
    handler=st.one_of(st.just(CHECKSUM_HANDLER), st.text(max_size=40)),
    items=st.lists(st.builds(pb.WorkItem, key=st.text(max_size=20), payload=st.binary(max_size=64)), max_size=8),
    arrow_batch=st.one_of(st.just(b""), st.binary(max_size=256)),
)
def test_work_process(
    channel: grpc.Channel, cluster_id: str, sender: str, handler: str, items: list[pb.WorkItem], arrow_batch: bytes
) -> None:
    request = pb.ProcessRequest(
        cluster_id=cluster_id, sender=sender, handler=handler, items=items, arrow_batch=arrow_batch
    )
    code = call(channel, codec.PROCESS.path, request.SerializeToString())
    # ABORTED: keys the silo does not own (silo.runtime.ownership)
    expect_proper(code, {*REFUSED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ABORTED})


PATHS = [
    codec.PING.path,
    codec.PROBE_INDIRECTLY.path,
    codec.GOSSIP.path,
    codec.GET_MEMBERSHIP.path,
    codec.PROCESS.path,
    *sorted(STREAM_PATHS),
]


@given(st.sampled_from(PATHS), st.binary(max_size=512))
def test_undecodable_bytes_are_invalid_argument(channel: grpc.Channel, path: str, data: bytes) -> None:
    """Random bytes: most are no valid message (INVALID_ARGUMENT), some decode to one (then judged as one)."""
    expect_proper(call(channel, path, data), {*REFUSED, grpc.StatusCode.NOT_FOUND})


@pytest.mark.parametrize("path", [*PATHS, codec.WATCH_MEMBERSHIP.path])
def test_bytes_that_are_no_message_are_refused_with_invalid_argument(channel: grpc.Channel, path: str) -> None:
    garbage = b"\xff\xff\xff\xff"  # field 31, wire type 7: no protobuf message decodes it
    if path in STREAM_PATHS:
        bidi = channel.stream_stream(path, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as failure:
            next(iter(bidi(iter([garbage]), timeout=CALL_TIMEOUT)))
        code, details = failure.value.code(), failure.value.details()  # type: ignore[attr-defined]
    elif path == codec.WATCH_MEMBERSHIP.path:
        stream = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as failure:
            next(iter(stream(garbage, timeout=CALL_TIMEOUT)))
        code, details = failure.value.code(), failure.value.details()  # type: ignore[attr-defined]
    else:
        rpc = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as failure:
            rpc(garbage, timeout=CALL_TIMEOUT)
        code, details = failure.value.code(), failure.value.details()  # type: ignore[attr-defined]
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid" in details


def test_an_oversized_request_is_refused_and_changes_nothing(cluster: Cluster, channel: grpc.Channel) -> None:
    calls: list[int] = []
    cluster.stacks[0].work.handlers.register("count-oversized", lambda items: [calls.append(1) or b"" for _ in items])
    before = canonical(cluster.table)
    payload = b"x" * (MAX_MESSAGE_BYTES + 1)
    request = pb.ProcessRequest(
        cluster_id=CLUSTER, sender="fuzz", handler="count-oversized", items=[pb.WorkItem(key="k", payload=payload)]
    )
    assert call(channel, codec.PROCESS.path, request.SerializeToString()) == grpc.StatusCode.RESOURCE_EXHAUSTED
    gossip = pb.GossipRequest(header=pb.RequestHeader(cluster_id=CLUSTER + "x" * MAX_MESSAGE_BYTES), version=2**62)
    assert call(channel, codec.GOSSIP.path, gossip.SerializeToString()) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert calls == []
    assert canonical(cluster.table) == before
    key = key_owned_by(cluster, cluster.stacks[0].silo.silo_address)
    small = pb.ProcessRequest(
        cluster_id=CLUSTER, sender="fuzz", handler="count-oversized", items=[pb.WorkItem(key=key, payload=b"x")]
    )
    assert call(channel, codec.PROCESS.path, small.SerializeToString()) == grpc.StatusCode.OK
    assert calls == [1]


def key_owned_by(cluster: Cluster, silo: SiloAddress) -> str:
    """A key ``silo`` owns on the ring of the cluster's silos (any other gets ABORTED)."""
    ring = HashRing(stack.silo.silo_address for stack in cluster.stacks)
    return next(key for key in (f"key-{number}" for number in itertools.count()) if ring.owner(key) == silo)


def test_huge_caller_strings_are_clipped_in_logs_and_errors(
    channel: grpc.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    huge = "c" * 1_000_000
    request = pb.PingRequest(header=pb.RequestHeader(cluster_id=huge, sender=address("h" * 100_000, 1, 1)))
    rpc = channel.unary_unary(codec.PING.path, request_serializer=None, response_deserializer=None)
    with caplog.at_level(logging.WARNING, logger="silo.wire.server"), pytest.raises(grpc.RpcError) as failure:
        rpc(request.SerializeToString(), timeout=CALL_TIMEOUT)
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
    details: str = failure.value.details()  # type: ignore[attr-defined]
    assert "(1000000 characters)" in details
    assert len(details) < 1000
    (record,) = [r for r in caplog.records if "refused Ping" in r.getMessage()]
    assert len(record.getMessage()) < 1000


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.1)


def test_after_all_that_the_silos_still_detect_a_failure(cluster: Cluster) -> None:
    """Runs last in this module: the fuzzed silos are all Active and still declare a hung silo Dead."""
    assert cluster.statuses() == [SiloStatus.ACTIVE] * 3
    victim = cluster.stacks[2]
    cluster.run(victim.server.stop(None))  # it stops answering probes but keeps writing IAmAlive: hung, not gone
    address_of_victim = victim.silo.silo_address

    def declared_dead() -> bool:
        row = cluster.table.read_all().get(address_of_victim)
        return row is not None and row[0].status is SiloStatus.DEAD

    wait_for(declared_dead, 30.0, f"{address_of_victim} declared Dead by the fuzzed silos")
    cluster.stacks.remove(victim)
    cluster.run(victim.silo.stop())
    cluster.run(victim.prober.close())
    assert cluster.statuses() == [SiloStatus.ACTIVE] * 2
