"""The membership client against real ``silo run`` processes: a killed gateway and a killed leader.

Bounds are correctness bounds (``death_bound`` plus slack), never speed goals.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from membership_tables import SiloAddress, SiloStatus
from silo.client import ClusterView, MembershipClient, ViewUpdate
from testbed.cluster_harness import Cluster, SiloProcess, death_bound, sqlite_cluster
from testbed.services.process import free_port, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with sqlite_cluster(tmp_path, "clients") as made:
        yield made


def start_gateways(cluster: Cluster, count: int) -> dict[SiloAddress, tuple[SiloProcess, str]]:
    """``count`` Active silos, each with a gateway port and a ``--property``; by address: (process, gateway)."""
    silos: dict[SiloAddress, tuple[SiloProcess, str]] = {}
    for index in range(count):
        port = free_port()
        (silo,) = cluster.start(1, "--gateway-port", str(port), "--property", f"index={index}")
        assert silo.address is not None
        silos[silo.address] = (silo, f"127.0.0.1:{port}")
    cluster.wait_statuses([silo for silo, _ in silos.values()], SiloStatus.ACTIVE, 60)
    return silos


def view_of(reader: MembershipClient, count: int, timeout: float = 30.0) -> ClusterView:
    """The gateway's view once it holds ``count`` silos. The table shows them Active first: a
    gateway whose gossip or periodic read has not brought the last Active write yet still serves
    the view before it."""
    wait_until(lambda: len(reader.view()) >= count, timeout, f"the gateway's view to hold {count} silos")
    return reader.view()


def until_dead(
    updates: Iterator[ViewUpdate], close: Callable[[], None], victim: SiloAddress, timeout: float
) -> list[ViewUpdate]:
    """``updates`` until ``victim`` has died; a timer calls ``close`` (ending the watch) if that never comes."""
    guard = threading.Timer(timeout, close)
    guard.start()
    seen: list[ViewUpdate] = []
    try:
        for update in updates:
            seen.append(update)
            if any(silo.address == victim for silo in update.diff.died):
                return seen
    finally:
        guard.cancel()
    raise AssertionError(f"the watch ended before {victim} died; versions {[u.view.version for u in seen]}")


@pytest.mark.parametrize("failure", ["kill", "freeze"])
def test_losing_the_watched_gateway_and_leader_moves_the_watch_and_the_leadership_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    """``kill``: SIGKILL closes the connection. ``freeze``: SIGSTOP leaves it open but silent; keepalive notices."""
    silos = start_gateways(cluster, 3)
    with MembershipClient(cluster.cluster_id, [gateway for _, gateway in silos.values()]) as reader:
        initial = view_of(reader, 3)
    assert len(initial) == 3
    assert {silo.address: dict(silo.properties) for silo in initial.silos} == {
        address: {"index": str(index)} for index, address in enumerate(silos)
    }
    leader, successor = initial.silos[0].address, initial.silos[1].address
    assert initial.leader == leader
    # Watch the leader's own gateway first, so killing the leader also kills the watched gateway.
    order = [silos[leader][1], *(gateway for address, (_, gateway) in silos.items() if address != leader)]

    with caplog.at_level(logging.INFO, logger="silo.client"), MembershipClient(cluster.cluster_id, order) as client:
        updates = client.watch()
        first = next(updates)
        assert first.view.leader == leader
        process = silos[leader][0]
        process.kill() if failure == "kill" else process.freeze()
        seen = [first, *until_dead(updates, client.close, leader, death_bound(cluster.options) + 30)]

    assert any(f"gateway {order[0]}: watch ended" in record.message for record in caplog.records), "no failover"
    versions = [update.view.version for update in seen]
    assert versions == sorted(set(versions)), f"an older or repeated version after a failover: {versions}"
    assert [silo.address for update in seen for silo in update.diff.died] == [leader]
    leaders = [update.view.leader for update in seen]
    assert [after for before, after in itertools.pairwise(leaders) if after != before] == [successor]
    assert seen[-1].view.addresses == tuple(address for address in initial.addresses if address != leader)
