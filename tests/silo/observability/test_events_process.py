"""Membership events from real ``silo run`` processes: JSON log lines and the watch stream.

Three silos with gateways log in JSON; a client watches one gateway. One silo is killed
(SIGKILL) and declared Dead, another leaves (SIGTERM). Bounds come from the options plus
slack: they check that the events arrive, never how fast.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from membership_tables import SiloStatus
from silo.client import MembershipClient, ViewUpdate
from silo.events import EventKind, MembershipEvent
from testbed.cluster_harness import Cluster, SiloProcess, death_bound, sqlite_cluster
from testbed.services.process import free_port, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with sqlite_cluster(tmp_path, "events") as made:
        yield made


def json_events(silo: SiloProcess) -> list[dict[str, Any]]:
    """The ``event`` fields of the silo's JSON log lines (every line must be JSON)."""
    lines = [json.loads(line) for line in silo.log_text().splitlines() if line.strip()]
    return [line["event"] for line in lines if "event" in line]


def test_events_reach_the_json_log_and_the_watch_stream(cluster: Cluster) -> None:
    ports = [free_port() for _ in range(3)]
    silos = [cluster.start(1, "--log-format", "json", "--gateway-port", str(port))[0] for port in ports]
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, 60)
    victim, watched, leaver = silos
    assert victim.address is not None
    assert leaver.address is not None
    seen: list[ViewUpdate] = []

    with MembershipClient(cluster.cluster_id, gateways=[f"127.0.0.1:{ports[1]}"]) as client:
        guard = threading.Timer(death_bound(cluster.options) + 30, client.close)
        guard.start()
        try:
            updates = client.watch()
            seen.append(next(updates))
            victim.kill()
            for update in updates:
                seen.append(update)
                if victim.address in {event.silo for event in update.events if event.kind is EventKind.DECLARED_DEAD}:
                    break
            leaver.send(signal.SIGTERM)
            for update in updates:
                seen.append(update)
                if any(event.kind is EventKind.LEFT and event.silo == leaver.address for event in update.events):
                    break
        finally:
            guard.cancel()

    streamed: list[MembershipEvent] = [event for update in seen for event in update.events]
    death = next(event for event in streamed if event.kind is EventKind.DECLARED_DEAD)
    assert death.silo == victim.address
    assert death.by, "declared dead by its voters"
    assert set(death.by) <= {watched.address, leaver.address}
    assert death.version == next(update.view.version for update in seen if death in update.events)
    assert death.at <= death.observed_at
    assert any(event.kind is EventKind.LEFT and event.silo == leaver.address for event in streamed)

    def logged_leave() -> bool:
        return any(event["kind"] == "left" and event["silo"] == str(leaver.address) for event in json_events(watched))

    wait_until(logged_leave, 10, "the leave in the JSON log", watched.log)
    logged = json_events(watched)
    assert {"kind": "joined", "silo": str(watched.address)}.items() <= logged[0].items()
    dead = [event for event in logged if event["kind"] == "declared_dead"]
    assert [event["silo"] for event in dead] == [str(victim.address)]
    assert dead[0]["by"]
    assert dead[0]["version"] >= 4
    assert dead[0]["at"]
    assert dead[0]["observed_at"]
