"""The dashboard server over real HTTP on an in-memory table: page, state, event stream, read-only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from membership_tables import MembershipEntry, MembershipTable, SiloAddress, SiloStatus, open_table
from silo.dashboard import ClusterMonitor, DashboardServer
from silo.membership.options import SiloOptions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def table() -> Iterator[MembershipTable]:
    with open_table("memory://dashboard-server", "c") as opened:
        opened.initialize()
        yield opened
        opened.delete_cluster_entries()


@pytest.fixture
def server(table: MembershipTable) -> Iterator[DashboardServer]:
    monitor = ClusterMonitor(table, SiloOptions.local(), interval=0.05)
    served = DashboardServer(monitor)
    monitor.start()
    served.start()
    try:
        yield served
    finally:
        served.close()
        monitor.stop()


def get(server: DashboardServer, path: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


def insert(table: MembershipTable, port: int, status: SiloStatus = SiloStatus.ACTIVE) -> SiloAddress:
    silo = SiloAddress("127.0.0.1", port, 1)
    assert table.insert_row(
        MembershipEntry(silo, status, start_time=T0, i_am_alive_time=T0), table.read_all().version.next()
    )
    return silo


def test_the_page_and_its_assets_are_served_from_the_package(server: DashboardServer) -> None:
    status, content_type, body = get(server, "/")
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    assert b'<script src="/static/dashboard.js">' in body
    for asset, kind in (("/static/dashboard.js", "text/javascript"), ("/static/dashboard.css", "text/css")):
        status, content_type, body = get(server, asset)
        assert status == 200
        assert content_type.startswith(kind)
        assert body
    assert b"http://" not in get(server, "/")[2].replace(b"http://www.w3.org", b""), "no asset from the internet"


def test_state_is_json_of_the_table(server: DashboardServer, table: MembershipTable) -> None:
    silo = insert(table, 5001)
    server.monitor.poll_once()
    _, content_type, body = get(server, "/api/state")
    state = json.loads(body)
    assert content_type == "application/json"
    assert (state["cluster"], state["version"]) == ("c", 1)
    assert [(row["address"], row["status"]) for row in state["silos"]] == [(str(silo), "ACTIVE")]


def test_the_event_stream_pushes_each_new_state(server: DashboardServer, table: MembershipTable) -> None:
    with urllib.request.urlopen(server.url + "api/stream", timeout=10) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"

        def next_state() -> dict[str, object]:
            while True:
                line = stream.readline().decode()
                if line.startswith("data: "):
                    state: dict[str, object] = json.loads(line[len("data: ") :])
                    return state

        first = next_state()
        silo = insert(table, 5002, SiloStatus.JOINING)
        row = table.read_all().get(silo)
        assert row is not None
        assert table.update_row(row[0].replace(status=SiloStatus.ACTIVE), row[1], table.read_all().version.next())
        while True:
            state = next_state()
            assert int(str(state["seq"])) > int(str(first["seq"]))
            if state["version"] == 2:
                break
    timeline = state["timeline"]
    assert isinstance(timeline, list)
    assert [(event["kind"], event["silo"]) for event in timeline] == [("joined", str(silo))]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_nothing_can_be_written(server: DashboardServer, method: str) -> None:
    request = urllib.request.Request(server.url + "api/state", data=b"{}", method=method)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    assert refused.value.headers["Allow"] == "GET"
