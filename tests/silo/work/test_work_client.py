"""``WorkClient`` and ``SyncWorkClient`` against a real gRPC server: results, and which errors fail over."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from membership_tables import SiloAddress, SiloStatus
from silo.wire.server import MembershipServer
from silo.wire.tls import TlsConfigError, TlsSettings
from silo.work.client import SyncWorkClient, WorkClient, WorkError, WorkUnavailableError
from silo.work.handlers import CHECKSUM_HANDLER, checksum
from silo.work.registry import HandlerRegistry
from testbed.services.process import free_port
from tests.silo import work_handlers
from tests.silo.rpc_fakes import CLUSTER, FakeHandler, run, serve_work

pytestmark = pytest.mark.slow

ITEMS = [("k1", b"one"), ("k2", b"two")]
FLAVOURS = ["async", "sync"]


async def process(flavour: str, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """One call through the chosen client (the blocking one runs in a thread: the server shares this loop)."""
    if flavour == "async":
        async with WorkClient(CLUSTER, sender="test") as client:
            return await client.process(silo, handler, items, timeout=5.0)
    with SyncWorkClient(CLUSTER, sender="test") as sync_client:
        return await asyncio.to_thread(sync_client.process, silo, handler, items, 5.0)


async def against_server(flavour: str, handler: str, address: SiloAddress | None = None, **fake: Any) -> list[bytes]:
    """Serve a fake silo with the test handlers and call ``handler`` on it (at ``address`` if given)."""
    registry = HandlerRegistry({"reverse": work_handlers.reverse, "crash": work_handlers.crash})
    server = MembershipServer("127.0.0.1", 0)
    silo = FakeHandler(SiloAddress("127.0.0.1", server.port, 1), **fake)
    serve_work(server, silo, registry)
    await server.start(silo)
    me = silo.silo_address
    try:
        return await process(flavour, address or me, handler, ITEMS)
    finally:
        await server.stop(None)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_batch_returns_one_result_per_item_in_order(flavour: str) -> None:
    assert run(against_server(flavour, "reverse")) == [b"eno", b"owt"]
    assert run(against_server(flavour, CHECKSUM_HANDLER)) == [checksum(key, payload) for key, payload in ITEMS]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("handler", "fake", "code"),
    [
        ("nosuch", {}, "NOT_FOUND"),
        ("crash", {}, "INTERNAL"),
        ("reverse", {"cluster_id": "another-cluster"}, "FAILED_PRECONDITION"),
    ],
)
def test_handler_and_cluster_errors_are_work_errors_not_fail_overs(
    flavour: str, handler: str, fake: dict[str, Any], code: str
) -> None:
    with pytest.raises(WorkError) as failure:
        run(against_server(flavour, handler, **fake))
    assert failure.value.code == code
    assert failure.value.handler == handler
    assert not isinstance(failure.value, WorkUnavailableError)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_silo_that_is_not_active_is_a_fail_over(flavour: str) -> None:
    with pytest.raises(WorkUnavailableError, match="SHUTTING_DOWN, not ACTIVE"):
        run(against_server(flavour, "reverse", status=SiloStatus.SHUTTING_DOWN))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_another_incarnation_at_the_endpoint_is_a_fail_over(flavour: str) -> None:
    async def scenario() -> list[bytes]:
        server = MembershipServer("127.0.0.1", 0)
        silo = FakeHandler(SiloAddress("127.0.0.1", server.port, 2))
        serve_work(server, silo)
        await server.start(silo)
        try:
            return await process(flavour, SiloAddress("127.0.0.1", server.port, 1), CHECKSUM_HANDLER, ITEMS)
        finally:
            await server.stop(None)

    with pytest.raises(WorkUnavailableError, match="the silo restarted"):
        run(scenario())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_unreachable_silo_is_a_fail_over(flavour: str) -> None:
    nobody = SiloAddress("127.0.0.1", free_port(), 1)
    with pytest.raises(WorkUnavailableError, match="UNAVAILABLE") as failure:
        run(process(flavour, nobody, CHECKSUM_HANDLER, ITEMS))
    assert failure.value.silo == nobody


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_the_timeout_must_be_positive(timeout: float) -> None:
    with SyncWorkClient(CLUSTER) as client, pytest.raises(ValueError, match="timeout must be a positive"):
        client.process(SiloAddress("127.0.0.1", 1, 1), CHECKSUM_HANDLER, ITEMS, timeout)


def test_the_cluster_id_is_validated() -> None:
    with pytest.raises(ValueError, match="invalid cluster id"):
        WorkClient("no spaces allowed")


BATCH = pa.RecordBatch.from_arrays([pa.array(["k1", "k22"]), pa.array([1, 2])], names=["key", "value"])


async def columnar_against_server(handler: str, calls: int = 1, **fake: Any) -> list[list[bytes]]:
    """Serve a fake silo and send ``calls`` columnar batches to ``handler`` at once, all in flight together."""
    registry = HandlerRegistry(
        {"crash": work_handlers.crash, "lengths": work_handlers.key_lengths, "short": work_handlers.short}
    )
    server = MembershipServer("127.0.0.1", 0)
    silo = FakeHandler(SiloAddress("127.0.0.1", server.port, 1), **fake)
    serve_work(server, silo, registry)
    await server.start(silo)
    me = silo.silo_address

    def send() -> list[list[bytes]]:
        with SyncWorkClient(CLUSTER, sender="test") as client:
            pending = [client.submit_columnar(me, handler, BATCH, 5.0) for _ in range(calls)]
            return [call.result().to_pylist() for call in pending]

    try:
        return await asyncio.to_thread(send)
    finally:
        await server.stop(None)


def test_columnar_batches_reach_either_handler_signature_several_in_flight() -> None:
    expected = [checksum("k1", b"[1]"), checksum("k22", b"[2]")]
    assert run(columnar_against_server(CHECKSUM_HANDLER, calls=5)) == [expected] * 5
    assert run(columnar_against_server("lengths")) == [[b"\0\0\0\2", b"\0\0\0\3"]]


@pytest.mark.parametrize(
    ("handler", "fake", "error", "match"),
    [
        ("nosuch", {}, WorkError, "NOT_FOUND"),
        ("crash", {}, WorkError, "INTERNAL"),
        ("short", {}, WorkError, "returned 1 results for 2 items"),
        ("lengths", {"status": SiloStatus.SHUTTING_DOWN}, WorkUnavailableError, "not ACTIVE"),
    ],
)
def test_columnar_errors_are_the_same_as_for_items(
    handler: str, fake: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        run(columnar_against_server(handler, **fake))


@pytest.mark.parametrize("client_class", [WorkClient, SyncWorkClient])
def test_tls_must_be_tls_settings_with_readable_files(client_class: type[WorkClient | SyncWorkClient]) -> None:
    with pytest.raises(ValueError, match=r"tls must be a TlsSettings\(cert, key, ca\)"):
        client_class(CLUSTER, tls=("cert.pem", "key.pem", "ca.pem"))  # type: ignore[arg-type]
    with pytest.raises(TlsConfigError, match=r"cannot read --tls-cert /nonexistent/cert\.pem"):
        client_class(CLUSTER, tls=TlsSettings("/nonexistent/cert.pem", "key.pem", "ca.pem"))
