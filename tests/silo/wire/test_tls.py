"""Mutual TLS on a real in-process server: credentials, authorization per RPC, rotation of the files."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from pathlib import Path

import grpc
import pytest

from membership_tables import SiloAddress
from silo.membership.probing import GossipMessage, ProbeOutcome
from silo.wire import codec
from silo.wire.channels import CHANNEL_OPTIONS
from silo.wire.peer_identity import Role
from silo.wire.prober import GrpcProber, is_security_refusal
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tls import ChannelPool, TlsConfigError, TlsSettings, WatchedTlsFiles, read_material
from tests.silo.certificates import TestCa
from tests.silo.rpc_fakes import CLUSTER, CountingServer, FakeHandler, run, serving

ME = SiloAddress("127.0.0.1", 1, 1)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    return TestCa(tmp_path_factory.mktemp("ca"))


def header() -> pb.RequestHeader:
    return codec.header(CLUSTER, ME)


async def call(
    tls: TlsSettings | None, port: int, method: codec.Method[codec.Request, codec.Response], request: codec.Request
) -> codec.Response:
    pool = ChannelPool(CLUSTER, tls, CHANNEL_OPTIONS, aio=True)
    try:
        return await method.bind(pool.get(f"127.0.0.1:{port}"))(request, timeout=10)
    finally:
        for channel in pool.drain():
            await channel.close()


def test_settings_need_three_paths_and_files_are_checked_when_read(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="TlsSettings key must be the path of a PEM file"):
        TlsSettings("cert.pem", "", "ca.pem")
    settings = TlsSettings(str(tmp_path / "cert.pem"), tmp_path / "key.pem", tmp_path / "ca.pem")
    assert settings.cert == tmp_path / "cert.pem"
    with pytest.raises(TlsConfigError, match=r"cannot read --tls-cert .*cert.pem.*silo certs init"):
        read_material(settings)
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("not a certificate")
    with pytest.raises(TlsConfigError, match=r"--tls-cert .* is not a PEM file"):
        read_material(settings)


def test_watched_files_report_a_changed_content_once(ca: TestCa) -> None:
    settings = ca.issue("watched", CLUSTER)
    files = WatchedTlsFiles(settings)
    assert not files.refresh()
    settings.cert.write_bytes(settings.cert.read_bytes())  # touched, same content
    assert not files.refresh()
    assert files.generation == 0
    ca.issue("watched", CLUSTER)  # rotated: new key and certificate at the same paths
    assert files.refresh()
    assert files.generation == 1
    assert files.material == read_material(settings)
    assert not files.refresh()


def test_a_silo_certificate_may_call_every_rpc(ca: TestCa) -> None:
    server_tls, peer = ca.issue("server", CLUSTER), ca.issue("peer", CLUSTER)

    async def scenario() -> None:
        async with serving(FakeHandler, tls=server_tls) as (server, handler):
            async with GrpcProber(CLUSTER, ME, tls=peer) as prober:
                assert (await prober.ping(handler.silo_address, 10)).name == "ANSWERED"
                await prober.send(handler.silo_address, GossipMessage(7))
                await prober.get_membership(handler.silo_address, 10)
            assert handler.gossiped == [7]
            assert server.port == handler.silo_address.port

    run(scenario())


def test_a_client_certificate_reads_the_membership_but_cannot_ping_or_gossip(
    ca: TestCa, caplog: pytest.LogCaptureFixture
) -> None:
    server_tls, client = ca.issue("server", CLUSTER), ca.issue("client", CLUSTER, Role.CLIENT)

    async def scenario() -> None:
        async with serving(FakeHandler, tls=server_tls) as (server, handler):
            await call(client, server.port, codec.GET_MEMBERSHIP, pb.GetMembershipRequest(header=header()))
            for method, request in (
                (codec.PING, pb.PingRequest(header=header())),
                (codec.GOSSIP, pb.GossipRequest(header=header(), version=9)),
                (
                    codec.PROBE_INDIRECTLY,
                    pb.ProbeIndirectlyRequest(header=header(), target=codec.address_to_proto(ME), timeout_seconds=1.0),
                ),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(client, server.port, method, request)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "needs the silo role" in (refused.value.details() or "")
            assert handler.gossiped == [], "a refused gossip changes nothing"

    run(scenario())
    assert "refused Gossip" in caplog.text
    assert "it needs the silo role" in caplog.text


def test_certificates_of_another_cluster_another_ca_expired_or_none_are_refused(ca: TestCa, tmp_path: Path) -> None:
    server_tls = ca.issue("server", CLUSTER)
    other_ca = TestCa(tmp_path / "other-ca")
    callers = {
        "other cluster": ca.issue("stranger", "another-cluster"),
        "untrusted CA": other_ca.issue("rogue", CLUSTER, trust=ca.ca),
        "expired": ca.issue("old", CLUSTER, expired=True),
    }

    async def scenario() -> None:
        async with serving(FakeHandler, tls=server_tls) as (server, handler):
            for what, tls in callers.items():
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(tls, server.port, codec.GOSSIP, pb.GossipRequest(header=header(), version=3))
                # the server rejects an unknown CA or an expired certificate in the handshake: the
                # caller sees the connection closed; a valid certificate of the wrong cluster is
                # answered PERMISSION_DENIED
                expected = grpc.StatusCode.PERMISSION_DENIED if what == "other cluster" else grpc.StatusCode.UNAVAILABLE
                assert refused.value.code() == expected, (what, refused.value)
            with pytest.raises(grpc.aio.AioRpcError) as plaintext:
                await call(None, server.port, codec.GOSSIP, pb.GossipRequest(header=header(), version=3))
            assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
            assert handler.gossiped == []

    run(scenario())


def test_probes_over_the_ping_stream_are_authorized_like_ping(ca: TestCa, caplog: pytest.LogCaptureFixture) -> None:
    server_tls = ca.issue("server", CLUSTER)
    callers = {
        "silo": ca.issue("peer", CLUSTER),
        "client": ca.issue("client", CLUSTER, Role.CLIENT),
        "other cluster": ca.issue("stranger", "another-cluster"),
    }

    async def scenario() -> tuple[dict[str, ProbeOutcome], int, ProbeOutcome]:
        outcomes: dict[str, ProbeOutcome] = {}
        async with serving(FakeHandler, tls=server_tls, server_type=CountingServer) as (server, handler):
            assert isinstance(server, CountingServer)
            for what, tls in callers.items():
                async with GrpcProber(CLUSTER, ME, tls=tls, unary_calls_first=0) as prober:
                    outcomes[what] = await prober.ping(handler.silo_address, 10)
            async with GrpcProber(CLUSTER, ME, tls=callers["silo"], unary_calls_first=0) as prober:
                await prober.ping(handler.silo_address, 10)
                await prober.ping(handler.silo_address, 10)
            streams = server.streams_opened
        async with (
            serving(FakeHandler) as (_, plaintext),
            GrpcProber(CLUSTER, ME, tls=callers["silo"], unary_calls_first=0) as prober,
        ):
            return outcomes, streams, await prober.ping(plaintext.silo_address, 10)

    with caplog.at_level(logging.WARNING):
        outcomes, streams, to_plaintext = run(scenario())
    # a security refusal is never a refusal in the probing sense: a miss, logged at WARNING by the prober
    assert outcomes == {
        "silo": ProbeOutcome.ANSWERED,
        "client": ProbeOutcome.TIMED_OUT,
        "other cluster": ProbeOutcome.TIMED_OUT,
    }
    assert to_plaintext is ProbeOutcome.TIMED_OUT
    assert streams == 4, "one stream per prober, however many pings it sends"
    refused = [
        r.getMessage()
        for r in caplog.records
        if r.name == "silo.wire.server" and "refused PingStream" in r.getMessage()
    ]
    assert len(refused) == 2
    assert "PingStream refused to a certificate of test-cluster with client: it needs the silo role" in refused[0]
    warned = [r.getMessage() for r in caplog.records if r.name == "silo.wire.prober" and r.levelno == logging.WARNING]
    assert [message.split(": ")[1].split()[0] for message in warned] == [
        "PERMISSION_DENIED",
        "PERMISSION_DENIED",
        "UNAVAILABLE",
    ]


def test_a_tls_caller_cannot_talk_to_a_plaintext_silo(ca: TestCa) -> None:
    async def scenario() -> None:
        async with serving(FakeHandler) as (server, handler):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(ca.issue("peer", CLUSTER), server.port, codec.PING, pb.PingRequest(header=header()))
            assert is_security_refusal(refused.value)
            assert handler.gossiped == []

    run(scenario())


def presented_certificate(port: int, client: TlsSettings) -> bytes:
    """The DER certificate the server at ``port`` presents in a fresh handshake."""
    context = ssl.create_default_context(cafile=str(client.ca))
    context.check_hostname = False
    context.load_cert_chain(client.cert, client.key)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_the_server_presents_a_rotated_certificate_without_restarting(ca: TestCa) -> None:
    server_tls, peer = ca.issue("rotating", CLUSTER), ca.issue("peer", CLUSTER)

    async def scenario() -> None:
        async with serving(FakeHandler, tls=server_tls) as (server, _handler):
            first = await asyncio.to_thread(presented_certificate, server.port, peer)
            assert first == ssl.PEM_cert_to_DER_cert(server_tls.cert.read_text())
            ca.issue("rotating", CLUSTER)  # new files at the same paths
            second = await asyncio.to_thread(presented_certificate, server.port, peer)
            assert second != first
            assert second == ssl.PEM_cert_to_DER_cert(server_tls.cert.read_text())

    run(scenario())


def test_a_channel_pool_opens_new_channels_after_a_rotation(ca: TestCa) -> None:
    settings = ca.issue("caller", CLUSTER)
    now = [0.0]
    pool = ChannelPool(CLUSTER, settings, CHANNEL_OPTIONS, aio=False, clock=lambda: now[0])
    first = pool.get("127.0.0.1:1")
    assert pool.get("127.0.0.1:1") is first
    ca.issue("caller", CLUSTER)
    assert pool.get("127.0.0.1:1") is first, "files are looked at once a second, not on every call"
    now[0] = 5.0
    second = pool.get("127.0.0.1:1")
    assert second is not first
    drained = pool.drain()
    assert first in drained
    assert second in drained
    for channel in drained:
        channel.close()


def test_a_bounded_channel_pool_evicts_the_least_recently_used_channel() -> None:
    evicted: list[object] = []
    pool = ChannelPool(CLUSTER, None, CHANNEL_OPTIONS, aio=False, max_channels=2, evict=evicted.append)
    first, second = pool.get("127.0.0.1:1"), pool.get("127.0.0.1:2")
    assert pool.get("127.0.0.1:1") is first  # now the most recently used
    third = pool.get("127.0.0.1:3")
    assert evicted == [second]
    assert pool.get("127.0.0.1:1") is first
    drained = pool.drain()
    assert set(map(id, drained)) == {id(first), id(third)}
    for channel in [*drained, *evicted]:
        channel.close()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="max_channels must be at least 1 and come with evict"):
        ChannelPool(CLUSTER, None, CHANNEL_OPTIONS, aio=False, max_channels=2)
