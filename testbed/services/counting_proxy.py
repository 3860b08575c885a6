"""A TCP forwarder that counts the round trips its clients make to a real server, and can slow them.

Why: what a store call costs on a lossy or distant link is its number of round trips (each one
waits for an answer, and each lost packet of one costs a retransmission timeout), and only the
wire says how many a driver really makes: psycopg sends BEGIN on its own, pooled connections
are pinged, kazoo pipelines requests, HTTP clients open connections. A ``CountingProxy`` sits
between a table handle and its server, like ``FreezingProxy`` (which it is), and counts per
connection the *client flights*: bytes from the client after the server last spoke (or on a
new connection). A client that waits for each answer before it asks again makes one flight per
round trip; requests sent together without waiting (pipelined) are one flight, as they cost one.
The count is exact, not a timing: a client's request is counted before it is forwarded, so
by the time its answer arrives it has been counted.

Usage::

    with CountingProxy("127.0.0.1", server.port) as proxy:
        table = open_table(uri_through(proxy), ...)
        with proxy.counting() as tally:
            table.read_all()
        tally.round_trips, tally.connections

ZooKeeper clients ping the server in the background when idle; ``zookeeper_requests`` makes the
proxy leave flights that hold nothing but pings out of the count.

**A slow store.** ``slow_down(delay)`` holds every client flight ``delay()`` seconds before
it is forwarded (``uniform_delay(1, 5)``: 1 to 5 s, drawn per flight), so each round trip of
every call takes that much longer, as on a throttled or overloaded server; ``full_speed()``
ends it (flights already held are forwarded when their hold ends). It can be switched at any
moment, and the counts go on meanwhile: what a slow store costs in requests is read from
them. ``freeze()`` (``FreezingProxy``) still stops everything.

    with CountingProxy("127.0.0.1", server.port) as proxy:
        proxy.slow_down(uniform_delay(1.0, 5.0))
        ...
        proxy.full_speed()
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from testbed.services.freezing_proxy import FreezingProxy

ZOOKEEPER_PING_XID = -2
"""The request id (``xid``) of ZooKeeper's ping (``ZooDefs.OpCode.ping`` requests carry xid -2)."""


Delay = Callable[[], float]
"""Seconds to hold the next client flight (``CountingProxy.slow_down``)."""


def uniform_delay(low: float, high: float, seed: int | None = None) -> Delay:
    """A delay drawn uniformly from [``low``, ``high``] seconds for each flight (a clear error for a bad range)."""
    if not 0 <= low <= high:
        raise ValueError(f"a delay range needs 0 <= low <= high, got [{low}, {high}]")
    draw = random.Random(seed).uniform
    lock = threading.Lock()  # each connection's pump draws from its own thread

    def delay() -> float:
        with lock:
            return draw(low, high)

    return delay


class RequestFilter:
    """Tells how many requests a connection's client bytes hold (this base cannot: one per flight)."""

    framed = False
    """Whether ``requests`` reads the protocol's framing (else each flight counts as one request)."""

    def requests(self, data: bytes) -> int:
        """How many requests that count start in ``data`` (the client's next bytes)."""
        return 1 if data else 0


class ZooKeeperRequests(RequestFilter):
    """ZooKeeper's client stream, framed: every request but a ping counts.

    kazoo sends pipelined requests (a read's ``get`` of every row) one per turn of its connection
    loop, and reads answers between them, so how many flights they make depends on timing; the
    requests do not.

    Each frame is a 4-byte big-endian length and that many bytes; the first of a connection is
    the ConnectRequest (no request header), every later one starts with its ``xid``.
    """

    def __init__(self) -> None:
        self._pending = bytearray()
        self._skip = 0
        self._connected = False

    framed = True

    def requests(self, data: bytes) -> int:
        self._pending += data
        counted = 0
        while True:
            if self._skip:
                taken = min(self._skip, len(self._pending))
                del self._pending[:taken]
                self._skip -= taken
                if self._skip:
                    return counted
            if len(self._pending) < 8:
                return counted
            length = int.from_bytes(self._pending[:4], "big")
            xid = int.from_bytes(self._pending[4:8], "big", signed=True)
            counted += not self._connected or xid != ZOOKEEPER_PING_XID
            self._connected = True
            self._skip = 4 + length


class _Link:
    """One proxied connection: whether the server answered since the client last asked."""

    __slots__ = ("answered", "requests")

    def __init__(self, requests: RequestFilter) -> None:
        self.answered = True
        self.requests = requests


@dataclass
class Tally:
    """What the clients of a ``CountingProxy`` did within one ``counting()`` block."""

    round_trips: int = 0
    """Client flights: requests sent after the server last answered (see the module docstring)."""
    connections: int = 0
    """TCP connections opened (each one a round trip of its own, the handshake, not in ``round_trips``)."""
    requests: int = 0
    """Requests sent: as ``round_trips`` unless the protocol's framing is read (``RequestFilter.framed``)."""
    bytes_sent: int = 0
    """Bytes the clients sent to the server."""
    bytes_received: int = 0
    """Bytes the server sent to the clients."""
    delayed: int = 0
    """Client flights held by ``slow_down`` (each one ``delay()`` seconds)."""


class CountingProxy(FreezingProxy):
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port`` and counts its clients' round trips."""

    def __init__(
        self, target_host: str, target_port: int, requests: Callable[[], RequestFilter] = RequestFilter
    ) -> None:
        self._requests = requests
        self._count_lock = threading.Lock()
        self._round_trips = 0
        self._connections = 0
        self._request_count = 0
        self._bytes = [0, 0]
        """[sent by clients, sent by the server]."""
        self._delayed = 0
        self._delay: Delay | None = None
        super().__init__(target_host, target_port)

    def slow_down(self, delay: Delay) -> None:
        """Hold every client flight from now on ``delay()`` seconds before forwarding it."""
        self._delay = delay

    def full_speed(self) -> None:
        """Forward without holding again (flights already held wait out their hold)."""
        self._delay = None

    @property
    def slowed(self) -> bool:
        return self._delay is not None

    def totals(self) -> Tally:
        """Everything counted since the proxy started."""
        with self._count_lock:
            return Tally(self._round_trips, self._connections, self._request_count, *self._bytes, delayed=self._delayed)

    @contextlib.contextmanager
    def counting(self) -> Iterator[Tally]:
        """A tally filled in when the block ends: the round trips and connections made within it."""
        tally = Tally()
        start = self.totals()
        yield tally
        end = self.totals()
        tally.round_trips = end.round_trips - start.round_trips
        tally.connections = end.connections - start.connections
        tally.requests = end.requests - start.requests
        tally.bytes_sent = end.bytes_sent - start.bytes_sent
        tally.bytes_received = end.bytes_received - start.bytes_received
        tally.delayed = end.delayed - start.delayed

    def _opened(self) -> object:
        with self._count_lock:
            self._connections += 1
        return _Link(self._requests())

    def _passing(self, link: object, upstream: bool, data: bytes) -> float:
        assert isinstance(link, _Link)
        delay = self._delay
        with self._count_lock:
            self._bytes[not upstream] += len(data)
            if not upstream:
                link.answered = True
                return 0.0
            requests = link.requests.requests(data)
            if link.requests.framed:
                self._request_count += requests
            if not (requests and link.answered):
                return 0.0  # more of a flight already counted (and held)
            link.answered = False
            self._round_trips += 1
            self._request_count += not link.requests.framed
            if delay is None:
                return 0.0
            self._delayed += 1
        return delay()


def through(uri: str, target_port: int, proxy: CountingProxy, host: str = "127.0.0.1") -> str:
    """``uri`` with its server ``host:target_port`` replaced by the proxy's address; a clear error if it has none."""
    server, proxied = f"{host}:{target_port}", f"127.0.0.1:{proxy.port}"
    if server not in uri:
        raise ValueError(f"{uri!r} does not name the server {server}; cannot route it through the proxy")
    return uri.replace(server, proxied)
