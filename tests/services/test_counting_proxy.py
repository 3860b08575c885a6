"""The counting proxy counts client flights (a round trip each), leaves ZooKeeper pings out, and slows flights down."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from testbed.services.counting_proxy import CountingProxy, ZooKeeperRequests, through, uniform_delay


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A server that answers each line it receives with the same line."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(connection,), daemon=True).start()

    def echo(connection: socket.socket) -> None:
        pending = b""
        with connection:
            while data := connection.recv(4096):
                pending += data
                line, newline, pending = pending.rpartition(b"\n")
                if newline:
                    connection.sendall(line + newline)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def ask(client: socket.socket, data: bytes) -> None:
    """Send the line ``data`` and wait for all of its echo: one round trip."""
    client.sendall(data)
    received = b""
    while len(received) < len(data):
        received += client.recv(4096)


def test_each_request_that_waits_for_its_answer_is_one_round_trip(echo_port: int) -> None:
    with CountingProxy("127.0.0.1", echo_port) as proxy:
        with proxy.counting() as tally, socket.create_connection(("127.0.0.1", proxy.port)) as client:
            for _ in range(3):
                ask(client, b"ping\n")
        assert (tally.round_trips, tally.connections, tally.requests) == (3, 1, 3)


def test_requests_sent_together_before_an_answer_are_one_round_trip(echo_port: int) -> None:
    with CountingProxy("127.0.0.1", echo_port) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as client:
        ask(client, b"warm\n")
        with proxy.counting() as tally:
            client.sendall(b"one")
            client.sendall(b"two\n")
            received = b""
            while len(received) < 7:
                received += client.recv(4096)
            ask(client, b"three\n")
        assert (tally.round_trips, tally.connections, tally.requests) == (2, 0, 2)


def zookeeper_frame(xid: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">ii", xid, 1) + body
    return struct.pack(">i", len(payload)) + payload


def test_zookeeper_pings_are_not_requests() -> None:
    requests = ZooKeeperRequests()
    connect = struct.pack(">i", 12) + bytes(12)  # the ConnectRequest: no xid, counted
    assert requests.requests(connect) == 1
    assert requests.requests(zookeeper_frame(-2)) == 0
    frame = zookeeper_frame(7, b"/path")
    assert requests.requests(frame[:6]) == 0  # the xid is not in yet
    assert requests.requests(frame[6:] + zookeeper_frame(-2)) == 1
    assert requests.requests(zookeeper_frame(-2) + zookeeper_frame(8) + zookeeper_frame(9)) == 2


def test_a_uri_without_the_server_cannot_be_routed(echo_port: int) -> None:
    with CountingProxy("127.0.0.1", echo_port) as proxy:
        assert through(f"consul://127.0.0.1:{echo_port}/x", echo_port, proxy) == f"consul://127.0.0.1:{proxy.port}/x"
        with pytest.raises(ValueError, match="does not name the server"):
            through("consul://10.0.0.1:1/x", echo_port, proxy)


def test_a_slowed_proxy_holds_each_round_trip_and_counts_it(echo_port: int) -> None:
    """Each flight is held its delay (a lower bound: a loaded machine only adds), later bytes of
    the same flight are not held again, and ``full_speed`` stops the holding."""
    hold = 0.2
    with CountingProxy("127.0.0.1", echo_port) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as client:
        ask(client, b"warm\n")
        proxy.slow_down(lambda: hold)
        assert proxy.slowed
        with proxy.counting() as tally:
            started = time.monotonic()
            for _ in range(2):
                ask(client, b"ping\n")
            slowed = time.monotonic() - started
            client.sendall(b"one")  # a flight in two pieces: held once
            client.sendall(b"two\n")
            received = b""
            while len(received) < 7:
                received += client.recv(4096)
        assert slowed >= 2 * hold
        assert (tally.round_trips, tally.delayed) == (3, 3)
        assert (tally.bytes_sent, tally.bytes_received) == (17, 17)
        proxy.full_speed()
        with proxy.counting() as after:
            ask(client, b"ping\n")
        assert (after.round_trips, after.delayed) == (1, 0)


def test_a_uniform_delay_stays_in_its_range_and_rejects_a_bad_one() -> None:
    delay = uniform_delay(1.0, 5.0, seed=7)
    draws = [delay() for _ in range(200)]
    assert all(1.0 <= draw <= 5.0 for draw in draws)
    assert max(draws) - min(draws) > 3.0
    with pytest.raises(ValueError, match="low <= high"):
        uniform_delay(5.0, 1.0)
