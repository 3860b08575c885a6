"""Health for orchestrators: ``/livez`` and ``/readyz`` over plain HTTP on a port of their own.

The kubelet (and most load balancers) cannot speak the silo's mutual TLS, so these two
answers are served apart from the gRPC ports, on ``--health-port``; they reveal nothing but
the silo's state, and serve no secret.

- ``/livez``: 200 ``ok`` while the process and its event loop are alive. The server runs on the
  silo's event loop, and the answer is checked against a heartbeat the loop itself beats every
  ``BEAT_SECONDS``: a wedged loop answers nothing at all (the probe times out), and a loop that
  has been stalled for over ``STALL_SECONDS`` (it answers late, after the stall) is reported 503.
- ``/readyz``: 200 ``ready`` only while the silo is Active in its own view, its membership lease
  is valid (not fenced), the table is reachable and it is not draining
  (``Silo.readiness``); 503 with the reason otherwise.

Anything else is 404; a method other than GET or HEAD is 405. Only the request line is read
(at most ``MAX_REQUEST_BYTES``, within ``READ_TIMEOUT``), so a slow or hostile client costs a
connection for a few seconds at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger(__name__)

BEAT_SECONDS = 1.0
"""How often the event loop stamps the liveness heartbeat."""

STALL_SECONDS = 10.0
"""A heartbeat older than this means the loop stalled: ``/livez`` answers 503."""

READ_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 8192

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request", 503: "Service Unavailable"}


class HealthAnswer(NamedTuple):
    status: int
    body: str


class LoopHeartbeat:
    """A timestamp the event loop refreshes every ``BEAT_SECONDS`` (``monotonic`` is injected)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._last = monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._beat())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def age(self) -> float:
        """Seconds since the loop last beat."""
        return self._monotonic() - self._last

    def beat(self) -> None:
        self._last = self._monotonic()

    async def _beat(self) -> None:
        while True:
            self.beat()
            await asyncio.sleep(BEAT_SECONDS)


def answer(path: str, heartbeat: LoopHeartbeat, readiness: Callable[[], str | None]) -> HealthAnswer:
    """The answer to a GET of ``path``."""
    if path == "/livez":
        age = heartbeat.age()
        if age > STALL_SECONDS:
            return HealthAnswer(503, f"the event loop stalled: its last heartbeat was {age:.1f}s ago\n")
        return HealthAnswer(200, "ok\n")
    if path == "/readyz":
        reason = readiness()
        return HealthAnswer(200, "ready\n") if reason is None else HealthAnswer(503, f"not ready: {reason}\n")
    return HealthAnswer(404, "not found: the health port serves /livez and /readyz\n")


class HealthServer:
    """The ``/livez`` and ``/readyz`` endpoints on ``host:port`` (``open`` binds; ``port`` 0 = any)."""

    def __init__(self, server: asyncio.Server, heartbeat: LoopHeartbeat, host: str) -> None:
        self._server = server
        self._heartbeat = heartbeat
        self.port: int = server.sockets[0].getsockname()[1]
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        self.readiness: Callable[[], str | None] = lambda: "the silo is starting"
        """Why the silo is not ready (None: ready); ``/readyz`` asks it on every request."""

    @classmethod
    async def open(cls, host: str, port: int) -> HealthServer:
        """Bind and serve; raises ``OSError`` if the port cannot be bound."""
        heartbeat = LoopHeartbeat()
        holder: list[HealthServer] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _serve_one(reader, writer, heartbeat, lambda: holder[0].readiness())

        server = await asyncio.start_server(serve, host, port, limit=MAX_REQUEST_BYTES)
        heartbeat.start()
        holder.append(cls(server, heartbeat, host))
        return holder[0]

    async def close(self) -> None:
        self._server.close()
        await self._heartbeat.stop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self._server.wait_closed()


async def _serve_one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    heartbeat: LoopHeartbeat,
    readiness: Callable[[], str | None],
) -> None:
    try:
        async with asyncio.timeout(READ_TIMEOUT):
            line = await reader.readuntil(b"\n")
            while (await reader.readuntil(b"\n")).strip():  # the headers, unused
                pass
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    method, _, rest = line.decode("latin-1").strip().partition(" ")
    path = rest.partition(" ")[0].partition("?")[0]
    if len(line) > MAX_REQUEST_BYTES or not path:
        reply = HealthAnswer(400, "bad request\n")
    elif method not in ("GET", "HEAD"):
        reply = HealthAnswer(405, "only GET and HEAD\n")
    else:
        reply = answer(path, heartbeat, readiness)
    body = reply.body.encode()
    head = (
        f"HTTP/1.1 {reply.status} {_REASONS[reply.status]}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + (b"" if method == "HEAD" else body))
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()
