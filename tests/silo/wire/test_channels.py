"""The message size limit servers and callers share (``silo.wire.channels.MAX_MESSAGE_BYTES``)."""

from __future__ import annotations

import asyncio

import pytest

from membership_tables import SiloAddress
from silo.wire.channels import MAX_MESSAGE_BYTES
from silo.wire.server import MembershipServer
from silo.work.client import SyncWorkClient, WorkUnavailableError
from silo.work.handlers import ECHO_HANDLER
from tests.silo.rpc_fakes import CLUSTER, FakeHandler, run, serve_work


def echo_through_a_silo(items: list[tuple[str, bytes]]) -> list[bytes]:
    async def scenario() -> list[bytes]:
        server = MembershipServer("127.0.0.1", 0)
        me = SiloAddress("127.0.0.1", server.port, 1)
        silo = FakeHandler(me)
        serve_work(server, silo)
        await server.start(silo)
        try:
            with SyncWorkClient(CLUSTER) as client:
                return await asyncio.to_thread(client.process, me, ECHO_HANDLER, items, 30.0)
        finally:
            await server.stop(None)

    return run(scenario())


def test_a_batch_of_10000_rows_of_600_bytes_fits_both_ways() -> None:
    items = [(f"key-{index}", bytes(600)) for index in range(10_000)]  # about 6 MB: over gRPC's 4 MiB default
    assert echo_through_a_silo(items) == [payload for _, payload in items]


def test_a_message_over_the_limit_is_refused_and_the_caller_may_fail_over() -> None:
    with pytest.raises(WorkUnavailableError, match="RESOURCE_EXHAUSTED"):
        echo_through_a_silo([("big", bytes(MAX_MESSAGE_BYTES))])
