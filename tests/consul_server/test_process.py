"""The test server as a separate process (``python -m testbed.consul_server``), shared by processes."""

from __future__ import annotations

import subprocess
import sys

import consul
import pytest

from membership_tables import open_table
from membership_tables.testing import make_entry
from testbed.services.consul import REPOSITORY, ConsulServerProcess
from testbed.services.process import port_is_open

pytestmark = pytest.mark.slow


def test_the_process_serves_kv_and_stops(consul_server_process: ConsulServerProcess) -> None:
    endpoint = consul_server_process.endpoint
    client = consul.Consul(host=endpoint.host, port=endpoint.port)
    assert client.kv.put("k", b"v", cas=0)
    assert client.kv.get("k")[1]["Value"] == b"v"
    consul_server_process.stop()
    assert not port_is_open(endpoint.port)


def test_a_row_written_by_another_process_is_read_here(consul_server_process: ConsulServerProcess) -> None:
    uri = consul_server_process.endpoint.uri("shared")
    writer = (
        "from membership_tables import open_table\n"
        "from membership_tables.testing import make_entry\n"
        f"table = open_table({uri!r}, 'c1')\n"
        "table.initialize()\n"
        "assert table.insert_row(make_entry(), table.read_all().version.next())\n"
    )
    subprocess.run([sys.executable, "-c", writer], check=True, cwd=REPOSITORY, timeout=60)
    with open_table(uri, "c1") as table:
        data = table.read_all()
    assert data.entries == (make_entry(),)
    assert data.version.version == 1
