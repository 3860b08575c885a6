"""``MembershipClient`` / ``AsyncMembershipClient``: argument checks, then real gRPC against in-process silos.

Multi-process scenarios (a killed gateway, a killed leader) are in ``test_client_processes.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from membership_tables import MembershipTableData, SiloAddress, TableVersion
from membership_tables.memory import InMemoryMembershipTable
from silo import client as client_module
from silo.client import (
    AsyncMembershipClient,
    ClientClosedError,
    ClientConfigError,
    MembershipClient,
    MembershipUnavailableError,
    TlsSettings,
    ViewUpdate,
    WrongClusterError,
)
from silo.client.view_sources import parse_endpoint
from silo.runtime.process import SiloStack
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.server import MembershipServer
from silo.work import client as work_client_module
from testbed.services.process import free_port
from tests.silo.live_silos import CLUSTER, LiveCluster, collect, gateway
from tests.silo.rpc_fakes import FakeHandler, entry, run, serving


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = f"client-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    InMemoryMembershipTable.reset(name)


# --- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [("127.0.0.1:30000", "127.0.0.1:30000"), (" gw.example:080 ", "gw.example:80"), ("[::1]:7", "[::1]:7")],
)
def test_gateway_endpoints_are_normalized(text: str, endpoint: str) -> None:
    assert parse_endpoint(text) == endpoint


@pytest.mark.parametrize("text", ["", "host", "host:", ":30000", "host:0", "host:70000", "host:http", "::1:7", "a b:1"])
def test_a_bad_gateway_endpoint_is_refused_with_the_expected_shape(text: str) -> None:
    with pytest.raises(ClientConfigError, match=r"expected HOST:PORT"):
        AsyncMembershipClient(CLUSTER, [text])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "no source: give gateways"),
        ({"gateways": "127.0.0.1:1", "table": "memory://x"}, "gateways or a table, not both"),
        ({"table": "nosuch://x"}, "cannot use table 'nosuch://x'"),
        ({"gateways": ["127.0.0.1:1"], "timeout": 0}, "timeout must be a positive number"),
        ({"table": "memory://x", "poll_interval": -1.0}, "poll_interval must be a positive number"),
        ({"table": "memory://x", "retry_timeout": float("inf")}, "retry_timeout must be a positive number"),
        ({"gateways": ["127.0.0.1:1"], "tls": ("c.pem", "k.pem", "ca.pem")}, "tls must be a TlsSettings"),
        ({"table": "memory://x", "tls": TlsSettings("c", "k", "a")}, "tls applies to gateways"),
        ({"gateways": ["127.0.0.1:1"], "tls": TlsSettings("/nonexistent/c", "k", "a")}, "cannot read --tls-cert"),
    ],
)
def test_constructor_errors_say_what_to_give(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClientConfigError, match=message):
        MembershipClient(CLUSTER, **kwargs)  # type: ignore[arg-type]


def test_a_bad_cluster_id_is_a_config_error() -> None:
    with pytest.raises(ClientConfigError, match="invalid cluster id"):
        AsyncMembershipClient("no spaces", ["127.0.0.1:1"])


def test_a_comma_separated_string_lists_several_gateways() -> None:
    AsyncMembershipClient(CLUSTER, "127.0.0.1:1, 127.0.0.1:2")  # no error: both parse


def test_no_reachable_gateway_is_a_clear_error_for_view_and_watch() -> None:
    gateways = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]

    async def scenario() -> tuple[str, str]:
        async with AsyncMembershipClient(CLUSTER, gateways, retry_timeout=0.5) as client:
            with pytest.raises(MembershipUnavailableError) as read:
                await client.view()
            with pytest.raises(MembershipUnavailableError) as watched:
                await collect(client.watch(), lambda seen: True)
            return str(read.value), str(watched.value)

    read, watched = run(scenario())
    assert all(endpoint in read for endpoint in gateways)
    assert "giving up" in watched


class MalformedViewServer(MembershipServer):
    """A gateway whose views carry a heartbeat time past year 9999 (a bug, or another program's port)."""

    async def _get_membership(self, request: pb.GetMembershipRequest, context: Any) -> pb.GetMembershipResponse:
        answer = pb.GetMembershipResponse()
        answer.CopyFrom(await super()._get_membership(request, context))
        answer.rows[0].i_am_alive_time_unix_micros = 2**62
        return answer

    async def _watch_membership(
        self, request: pb.WatchMembershipRequest, context: Any
    ) -> AsyncIterator[pb.MembershipView]:
        async for view in super()._watch_membership(request, context):
            view.rows[0].i_am_alive_time_unix_micros = 2**62
            yield view


def test_a_gateway_sending_a_malformed_view_is_skipped_for_the_next() -> None:
    def handler(address: SiloAddress) -> FakeHandler:
        data = MembershipTableData(((entry(address), "e"),), TableVersion(3, "v3"))
        return FakeHandler(address, cluster_id=CLUSTER, snapshot=data, hold_open=True)

    async def scenario() -> None:
        async with (
            serving(handler, server_type=MalformedViewServer) as (bad, _),
            serving(handler) as (good, good_handler),
        ):
            only_bad = [f"127.0.0.1:{bad.port}"]
            async with AsyncMembershipClient(CLUSTER, only_bad, retry_timeout=0.5) as client:
                with pytest.raises(MembershipUnavailableError, match=r"sent an invalid view .*out of range"):
                    await client.view()
            both = [*only_bad, f"127.0.0.1:{good.port}"]
            async with AsyncMembershipClient(CLUSTER, both) as client:
                assert [silo.address for silo in (await client.view()).silos] == [good_handler.silo_address]
            async with AsyncMembershipClient(CLUSTER, both) as client:  # a fresh client watches the bad one first
                (update,) = await collect(client.watch(), lambda seen: True)
                assert [silo.address for silo in update.view.silos] == [good_handler.silo_address]

    run(scenario())


def test_a_closed_client_refuses_calls() -> None:
    client = MembershipClient(CLUSTER, table="memory://closed-client")
    client.close()
    client.close()  # idempotent
    with pytest.raises(ClientClosedError):
        client.view()
    assert list(client.watch()) == []


# --- against in-process silos ---------------------------------------------------------


def addresses(*stacks: SiloStack) -> tuple[SiloAddress, ...]:
    return tuple(stack.silo.silo_address for stack in stacks)


def assert_in_version_order(updates: list[ViewUpdate]) -> None:
    versions = [update.view.version for update in updates]
    assert versions == sorted(set(versions)), f"versions out of order or repeated: {versions}"


def died(update: ViewUpdate) -> tuple[SiloAddress, ...]:
    return tuple(silo.address for silo in update.diff.died)


def joined(update: ViewUpdate) -> tuple[SiloAddress, ...]:
    return tuple(silo.address for silo in update.diff.joined)


@pytest.mark.slow
def test_watch_yields_views_and_diffs_in_version_order_and_the_leader_changes_once_when_it_leaves(
    memory_uri: str,
) -> None:
    async def scenario() -> None:
        cluster = LiveCluster(memory_uri)
        try:
            a = await cluster.start()
            # Seeded with a's gateway only: after a leaves, the client follows the gateways the view advertises.
            async with AsyncMembershipClient(CLUSTER, [gateway(a)]) as client:
                updates = client.watch()
                seen = await collect(updates, lambda seen: True)
                assert (seen[0].view.addresses, joined(seen[0]), seen[0].view.leader) == (
                    addresses(a),
                    addresses(a),
                    a.silo.silo_address,
                )

                b = await cluster.start(properties={"zone": "us"})
                c = await cluster.start()
                seen += await collect(updates, lambda new: set(addresses(b, c)) <= set(new[-1].view.addresses))
                await b.silo.set_properties({"zone": "eu"})
                seen += await collect(updates, lambda new: any(new[-1].diff.properties_changed))
                await cluster.stop(c)
                seen += await collect(updates, lambda new: c.silo.silo_address in died(new[-1]))
                await cluster.stop(a)
                seen += await collect(updates, lambda new: a.silo.silo_address in died(new[-1]))
                await updates.aclose()
        finally:
            await cluster.close()

        assert_in_version_order(seen)
        assert [address for update in seen for address in joined(update)] == list(addresses(a, b, c))
        assert [address for update in seen for address in died(update)] == list(addresses(c, a))
        changed = [silo for update in seen for silo in update.diff.properties_changed]
        assert [(silo.address, dict(silo.properties)) for silo in changed] == [(b.silo.silo_address, {"zone": "eu"})]
        assert dict(seen[-1].view.silos[0].properties) == {"zone": "eu"}
        leaders = [update.view.leader for update in seen]
        changes = [leader for before, leader in itertools.pairwise(leaders) if leader != before]
        assert leaders[0] == a.silo.silo_address
        assert changes == [b.silo.silo_address], "the leader changes only when it leaves, to the next oldest"

    run(scenario())


@pytest.mark.slow
def test_view_shows_the_active_silos_oldest_first_with_their_properties(memory_uri: str) -> None:
    async def scenario() -> None:
        cluster = LiveCluster(memory_uri)
        try:
            a = await cluster.start(properties={"role": "first"})
            b = await cluster.start(properties={"role": "second"})
            async with AsyncMembershipClient(CLUSTER, [gateway(b), gateway(a)]) as client:
                view = await client.view()
        finally:
            await cluster.close()
        assert view.cluster_id == CLUSTER
        assert view.addresses == addresses(a, b)
        assert view.leader == a.silo.silo_address
        assert [dict(silo.properties) for silo in view.silos] == [{"role": "first"}, {"role": "second"}]
        assert [silo.gateway for silo in view.silos] == [gateway(a), gateway(b)]

    run(scenario())


@pytest.mark.slow
def test_a_gateway_of_another_cluster_is_refused_at_once_not_retried(memory_uri: str) -> None:
    async def scenario() -> None:
        cluster = LiveCluster(memory_uri)
        try:
            a = await cluster.start()
            async with AsyncMembershipClient("other-cluster", [gateway(a)], retry_timeout=3600) as client:
                with pytest.raises(WrongClusterError, match="'other-cluster'"):
                    await client.view()
                with pytest.raises(WrongClusterError, match="point the client at a gateway of its own cluster"):
                    await collect(client.watch(), lambda seen: True)
        finally:
            await cluster.close()

    run(scenario())


@pytest.mark.slow
def test_the_blocking_client_views_watches_and_close_ends_its_watch(memory_uri: str) -> None:
    async def scenario() -> None:
        cluster = LiveCluster(memory_uri)
        try:
            a = await cluster.start()
            client = MembershipClient(CLUSTER, [gateway(a)])
            try:
                view = await asyncio.to_thread(client.view)
                watch = client.watch()
                first = await asyncio.to_thread(next, watch, None)
                b = await cluster.start()
                second = await asyncio.to_thread(next, watch, None)
                while second is not None and b.silo.silo_address not in second.view:  # b's Joining version first
                    second = await asyncio.to_thread(next, watch, None)
                pending = asyncio.ensure_future(asyncio.to_thread(next, watch, None))
            finally:
                await asyncio.to_thread(client.close)
            assert await pending is None, "close() ends a watch blocked in another thread"
        finally:
            await cluster.close()
        assert view.addresses == addresses(a)
        assert first is not None
        assert second is not None
        assert (first.view.addresses, joined(second)) == (addresses(a), addresses(b))

    run(scenario())


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_table_mode_polls_the_table_without_any_gateway(tmp_path: Path, flavour: str) -> None:
    uri = f"sqlite:///{tmp_path / 'membership.db'}"

    async def scenario() -> list[ViewUpdate]:
        cluster = LiveCluster(uri)
        try:
            await cluster.start()
            if flavour == "async":
                async with AsyncMembershipClient(CLUSTER, table=uri, poll_interval=0.1) as client:
                    updates = client.watch()
                    seen = await collect(updates, lambda seen: True)
                    b = await cluster.start()
                    seen += await collect(updates, lambda new: len(new[-1].view) == 2)
                    await b.silo.set_properties({"zone": "eu"})
                    seen += await collect(updates, lambda new: any(new[-1].diff.properties_changed))
                    await updates.aclose()
                    return seen
            sync_client = MembershipClient(CLUSTER, table=uri, poll_interval=0.1)
            try:
                watch = sync_client.watch()
                seen = [await asyncio.to_thread(next, watch)]
                b = await cluster.start()
                while len(seen[-1].view) < 2:  # polling sees b once it is Active (maybe not its Joining version)
                    seen.append(await asyncio.wait_for(asyncio.to_thread(next, watch), 60))
                await b.silo.set_properties({"zone": "eu"})
                while not seen[-1].diff.properties_changed:
                    seen.append(await asyncio.wait_for(asyncio.to_thread(next, watch), 60))
                return seen
            finally:
                await asyncio.to_thread(sync_client.close)
        finally:
            await cluster.close()

    seen = run(scenario())
    assert_in_version_order(seen)
    assert len(seen[0].view) == 1
    assert len(seen[-1].view) == 2
    assert dict(seen[-1].diff.properties_changed[0].properties) == {"zone": "eu"}


def test_the_public_names_are_exactly_the_intended_ones() -> None:
    assert set(client_module.__all__) == {
        "AsyncMembershipClient",
        "ClientClosedError",
        "ClientConfigError",
        "ClusterView",
        "MembershipClient",
        "MembershipClientError",
        "MembershipUnavailableError",
        "SiloInfo",
        "TlsSettings",
        "ViewDiff",
        "ViewUpdate",
        "WrongClusterError",
    }
    assert set(work_client_module.__all__) == {
        "SyncWorkClient",
        "WorkClient",
        "WorkError",
        "WorkNotOwnedError",
        "WorkUnavailableError",
    }
    for module in (client_module, work_client_module):
        assert all(hasattr(module, name) for name in module.__all__)
