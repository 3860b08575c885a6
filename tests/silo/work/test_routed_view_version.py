"""``Router.route`` against a real in-process silo: every call carries the router's view version.

The silo serves a batch only once its own view is at least as new as the router's (it catches
up first), so a router that learned of a change before the silo did never gets an answer from
the silo's older view.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator, Sequence

import pytest

from membership_tables import SiloAddress, SiloStatus, open_table
from membership_tables.memory import InMemoryMembershipTable
from silo.client.topology import ClusterView
from silo.work.client import SyncWorkClient
from silo.work.handlers import CHECKSUM_HANDLER, checksum_handler
from silo.work.routing import NoLiveSiloError, Record, Router
from tests.silo.live_silos import CLUSTER, LiveCluster
from tests.silo.rpc_fakes import entry, run

RECORDS = [Record(index, f"key-{index}", f"value-{index}".encode()) for index in range(40)]


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = f"routed-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    InMemoryMembershipTable.reset(name)


def route(view: ClusterView, uri: str, **options: float) -> list[bytes]:
    """Route ``RECORDS`` with ``view`` (re-read: the table's view) through a real ``SyncWorkClient``."""
    table = open_table(uri, CLUSTER)
    with SyncWorkClient(CLUSTER, sender="routed view test") as client:

        def send(
            silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int
        ) -> list[bytes]:
            return client.process(silo, handler, items, timeout=5.0, view_version=view_version)

        def reread() -> ClusterView:
            newest = ClusterView.from_table_data(CLUSTER, table.read_all())
            return newest if newest.version >= view.version else view

        router: Router[int] = Router(view, CHECKSUM_HANDLER, send, reread, **options)  # type: ignore[arg-type]
        return [routed.result for routed in sorted(router.route(RECORDS, 16), key=lambda routed: routed.key)]


def test_a_silo_behind_the_routers_view_catches_up_before_it_serves(memory_uri: str) -> None:
    async def scenario() -> None:
        cluster = LiveCluster(memory_uri)
        try:
            stack = await cluster.start()
            table = open_table(memory_uri, CLUSTER)
            # A change the silo has not read (no gossip announces a direct write): a Dead row.
            gone = entry(SiloAddress("127.0.0.1", 9, 1), SiloStatus.DEAD)
            assert await asyncio.to_thread(table.insert_row_at_next_version, gone) is not None
            newer = ClusterView.from_table_data(CLUSTER, table.read_all())
            expected = checksum_handler([(record.key, record.payload) for record in RECORDS])
            assert await asyncio.to_thread(route, newer, memory_uri) == expected
            assert stack.silo.snapshot.version >= newer.version, "served from a view at least as new as the router's"

            # A view newer than anything the table holds: the silo cannot catch up, so it serves
            # nothing. Only a call that carries the router's version can be refused this way.
            ahead = dataclasses.replace(newer, version=newer.version + 100)
            with pytest.raises(NoLiveSiloError, match=f"has not caught up with view version {ahead.version}"):
                await asyncio.to_thread(route, ahead, memory_uri, failover_timeout=1.5)
        finally:
            await cluster.close()

    run(scenario())
