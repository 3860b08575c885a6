"""Consul for tests: the compatible test server (in process or as a process), or a real agent.

* ``consul_test_server``: one in-process ``ConsulTestServer`` for the session. Do not stop it;
  tests that take the store down use ``private_consul_server``.
* ``private_consul_server``: a server of the test's own, free to ``stop()`` and ``start()``
  (the data survives).
* ``consul_endpoint``: where conformance tests run: the test server, and also the real agent
  at ``CONSUL_HTTP_ADDR`` when that is set (``CONSUL_HTTP_TOKEN`` is honoured by the backend).
* ``consul_server_process``: ``python -m testbed.consul_server`` as a child process, for tests
  where several processes share one Consul.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from testbed.consul_server import ConsulTestServer
from testbed.services.process import ServerProcess, free_port, port_is_open, wait_until

REAL_AGENT_ENV = "CONSUL_HTTP_ADDR"
REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ConsulEndpoint:
    """An agent's HTTP address, and how to build table URIs on it."""

    name: str
    host: str
    port: int
    scheme: str = "http"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def uri(self, prefix: str) -> str:
        query = "?scheme=https" if self.scheme == "https" else ""
        return f"consul://{self.address}/{prefix}{query}"


def real_agent_endpoint(address: str) -> ConsulEndpoint:
    """``CONSUL_HTTP_ADDR`` (``host:port`` or ``http(s)://host:port``) as an endpoint."""
    parts = urlsplit(address if "//" in address else f"//{address}")
    if not parts.hostname:
        raise ValueError(f"{REAL_AGENT_ENV}={address!r} names no host; use e.g. 127.0.0.1:8500")
    return ConsulEndpoint("real-agent", parts.hostname, parts.port or 8500, parts.scheme or "http")


def consul_endpoint_names() -> list[str]:
    return ["test-server"] + (["real-agent"] if os.environ.get(REAL_AGENT_ENV) else [])


@pytest.fixture(scope="session")
def consul_test_server() -> Iterator[ConsulTestServer]:
    with ConsulTestServer() as server:
        yield server


@pytest.fixture
def private_consul_server() -> Iterator[ConsulTestServer]:
    with ConsulTestServer() as server:
        yield server


@pytest.fixture(scope="session", params=consul_endpoint_names())
def consul_endpoint(request: pytest.FixtureRequest) -> ConsulEndpoint:
    if request.param == "real-agent":
        return real_agent_endpoint(os.environ[REAL_AGENT_ENV])
    server: ConsulTestServer = request.getfixturevalue("consul_test_server")
    return ConsulEndpoint("test-server", server.host, server.port)


class ConsulServerProcess:
    """The test server as a child process; ``stop()`` ends it (and its data)."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        self.endpoint = ConsulEndpoint("process", "127.0.0.1", port or free_port())
        self.log = log
        self._process: ServerProcess | None = None

    def start(self) -> None:
        host, port = self.endpoint.host, self.endpoint.port
        argv = [sys.executable, "-m", "testbed.consul_server", "--host", host, "--port", str(port)]
        self._process = ServerProcess(argv, self.log, env={"PYTHONPATH": str(REPOSITORY)})
        wait_until(lambda: port_is_open(port, host), 30, f"consul test server on {host}:{port}", self.log)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


@pytest.fixture
def consul_server_process(tmp_path: Path) -> Iterator[ConsulServerProcess]:
    server = ConsulServerProcess(tmp_path / "consul-test-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
