"""Every call on a network store ends within its deadline when the network drops packets, and the
handle works again once the network is back.

A ``FreezingProxy`` between the handle and a real server stops forwarding bytes and keeps the
connections open: TCP notices nothing (the proxy's kernel acknowledges everything), so only a
deadline the client keeps itself ends the call. Each store is opened with deadlines of about
``DEADLINE`` seconds; a frozen call must raise ``TableUnavailableError`` within ``BOUND``, a
correctness bound for a loaded machine, not a speed goal.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from membership_tables import TableUnavailableError, open_table
from membership_tables.sql.engine import SqlOptions, create_engine, parse_url
from membership_tables.sql.watchdog import Watchdog
from membership_tables.testing import make_entry
from testbed.services.dynamodb import REGION, MotoServer
from testbed.services.freezing_proxy import FreezingProxy
from testbed.services.process import wait_until
from testbed.services.sql_server import ThrowawayServer

DEADLINE = 2.0
BOUND = 3 * DEADLINE
RECOVERY = 30.0
"""Seconds a handle may take to work again after the network is back (ZooKeeper reconnects with backoff)."""


@dataclass(frozen=True)
class Store:
    """A real server, and how to open a table on it through a proxy on ``port`` with short deadlines.

    ``setup_options`` open the handle that creates the table and its row straight on the server,
    with ordinary deadlines: a loaded machine may answer slower than the short ones allow.
    """

    host: str
    port: int
    uri: Callable[[int], str]
    options: dict[str, Any] = field(default_factory=dict)
    setup_options: dict[str, Any] = field(default_factory=dict)


def sql_store(server: ThrowawayServer) -> Store:
    url = sa.make_url(server.create_database(f"d_{uuid.uuid4().hex[:12]}"))
    # answers within statement_timeout + network_timeout = DEADLINE; connections within 2 s (libpq's least)
    options = {"statement_timeout": DEADLINE / 2, "network_timeout": DEADLINE / 2, "connect_timeout": DEADLINE / 2}
    return Store("127.0.0.1", server.port, lambda port: url.set(port=port).render_as_string(False), options)


def zookeeper_store(request: pytest.FixtureRequest) -> Store:
    server = request.getfixturevalue("zookeeper_server")
    chroot = f"deadline-{uuid.uuid4().hex[:12]}"
    query = f"timeout={DEADLINE:g}&connect_timeout={DEADLINE:g}"
    return Store("127.0.0.1", server.port, lambda port: f"zookeeper://127.0.0.1:{port}/{chroot}?{query}")


def consul_store(request: pytest.FixtureRequest) -> Store:
    server = request.getfixturevalue("consul_test_server")
    prefix = f"deadline-{uuid.uuid4().hex[:12]}"
    return Store(server.host, server.port, lambda port: f"consul://127.0.0.1:{port}/{prefix}?timeout={DEADLINE:g}")


def dynamodb_store(request: pytest.FixtureRequest) -> Store:
    server: MotoServer = request.getfixturevalue("moto_server")
    table = f"deadline-{uuid.uuid4().hex[:12]}"
    # a call ends within retry_time + connect_timeout + read_timeout = DEADLINE
    options = {
        **server.options,
        "retry_time": DEADLINE / 2,
        "connect_timeout": DEADLINE / 4,
        "read_timeout": DEADLINE / 4,
    }
    return Store(
        "127.0.0.1",
        server.port,
        lambda port: f"dynamodb://{table}?region={REGION}&endpoint_url=http://127.0.0.1:{port}",
        options,
        server.options,
    )


STORES: dict[str, Callable[[pytest.FixtureRequest], Store]] = {
    "postgresql": lambda request: sql_store(request.getfixturevalue("postgres_server")),
    "mariadb": lambda request: sql_store(request.getfixturevalue("mariadb_server")),
    "zookeeper": zookeeper_store,
    "consul": consul_store,
    "dynamodb": dynamodb_store,
}


@pytest.mark.slow
@pytest.mark.parametrize("store_name", STORES)
def test_a_call_on_a_silent_network_fails_within_its_deadline_and_the_handle_recovers(
    request: pytest.FixtureRequest, store_name: str
) -> None:
    store = STORES[store_name](request)
    entry = make_entry()
    with open_table(store.uri(store.port), "c1", **store.setup_options) as setup:
        setup.initialize()
        assert setup.insert_row(entry, setup.read_all().version.next())
    with (
        FreezingProxy(store.host, store.port) as proxy,
        open_table(store.uri(proxy.port), "c1", **store.options) as table,
    ):

        def works() -> bool:
            try:
                return table.read_all().get(entry.silo_address) is not None
            except TableUnavailableError:
                return False

        wait_until(works, RECOVERY, f"the {store_name} handle's first read")
        proxy.freeze()
        heartbeat = entry.i_am_alive_time + timedelta(seconds=1)
        for call in (table.read_all, lambda: table.update_i_am_alive(entry.silo_address, heartbeat)):
            started = time.monotonic()
            with pytest.raises(TableUnavailableError):
                call()
            assert time.monotonic() - started < BOUND
        proxy.thaw()
        wait_until(works, RECOVERY, f"the {store_name} handle to work again")


@pytest.mark.slow
def test_postgresql_connections_end_after_network_timeout_unless_the_uri_says_otherwise(
    postgres_server: ThrowawayServer,
) -> None:
    """libpq's keepalives and TCP user timeout, as the connection reports them."""
    url = postgres_server.create_database(f"d_{uuid.uuid4().hex[:12]}")
    expected = {"keepalives": "1", "keepalives_idle": "2", "keepalives_interval": "2", "tcp_user_timeout": "6000"}
    for uri, overridden in ((url, {}), (f"{url}?tcp_user_timeout=1500", {"tcp_user_timeout": "1500"})):
        engine = create_engine(parse_url(uri), SqlOptions(network_timeout=6))
        try:
            connection = engine.raw_connection()
            parameters = connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
            connection.close()
        finally:
            engine.dispose()
        assert {name: parameters.get(name) for name in expected} == {**expected, **overridden}


@pytest.fixture
def socket_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    with left, right:
        yield left, right


def test_the_watchdog_shuts_down_the_socket_of_a_round_trip_still_held_at_its_deadline(
    socket_pair: tuple[socket.socket, socket.socket],
) -> None:
    waiting, _ = socket_pair
    watchdog = Watchdog(0.2)
    guard = watchdog.guard(waiting.fileno)
    waiting.settimeout(10)
    assert waiting.recv(1) == b""  # the watchdog shut the socket down: the blocked read ends
    assert guard.fired
    watchdog.release(guard)


def test_the_watchdog_leaves_a_released_round_trip_alone(socket_pair: tuple[socket.socket, socket.socket]) -> None:
    waiting, server = socket_pair
    watchdog = Watchdog(0.1)
    watchdog.release(watchdog.guard(waiting.fileno))
    time.sleep(0.3)
    server.sendall(b"x")
    assert waiting.recv(1) == b"x"
