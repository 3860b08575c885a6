"""A client-side deadline on every PostgreSQL round trip, which psycopg does not keep by itself.

psycopg waits for the server's answer without a limit. libpq's TCP keepalives and
``tcp_user_timeout`` (set by ``engine``) end a connection whose packets are lost, but not one
whose packets are acknowledged and never answered: a stuck proxy or load balancer on the way,
a frozen server process. A ``Watchdog`` ends those too. Each round trip of a connection made
by ``guarded_psycopg_connect`` takes a guard; a guard still held at its deadline has its
socket shut down, so the waiting driver fails at once with a lost connection (which the pool
then drops) and the call raises ``TableUnavailableError`` instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class Guard:
    """One round trip under watch: its deadline, and whether the watchdog ended it."""

    __slots__ = ("deadline", "fileno", "fired")

    def __init__(self, deadline: float, fileno: Callable[[], int]) -> None:
        self.deadline = deadline
        self.fileno: Callable[[], int] | None = fileno
        """The connection's ``fileno``; ``None`` once released."""
        self.fired = False


class Watchdog:
    """Shuts down the socket of a connection still waiting for an answer after ``seconds``.

    Guards all last ``seconds``, so they expire in the order they were taken: one thread per
    watchdog sleeps until the oldest one's deadline, or ``seconds`` while none is held (so
    taking a guard never has to wake it), and ends after such an idle round; the next guard
    starts it again. A round trip costs a lock taken twice and a small object.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._guards: deque[Guard] = deque()
        self._thread: threading.Thread | None = None

    def guard(self, fileno: Callable[[], int]) -> Guard:
        """Watch the connection whose socket ``fileno`` returns until ``release``."""
        guard = Guard(time.monotonic() + self.seconds, fileno)
        with self._lock:
            guards = self._guards
            while guards and guards[0].fileno is None:  # released: forget them here, not only when the thread wakes
                guards.popleft()
            guards.append(guard)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="sql-round-trip-watchdog", daemon=True)
                self._thread.start()
        return guard

    def release(self, guard: Guard) -> None:
        """The round trip ended (answered or failed): its socket is left alone from now on."""
        with self._lock:
            guard.fileno = None

    def _watch(self) -> None:
        idle = False
        while True:
            with self._lock:
                guards, now = self._guards, time.monotonic()
                while guards and (guards[0].fileno is None or guards[0].deadline <= now):
                    _shut_down(guards.popleft())
                if guards:
                    idle, pause = False, guards[0].deadline - now
                elif idle:
                    self._thread = None
                    return
                else:
                    idle, pause = True, self.seconds
            time.sleep(pause)


def _shut_down(guard: Guard) -> None:
    """End the round trip of a guard still held (under the watchdog's lock, so never a released one)."""
    fileno = guard.fileno
    if fileno is None:
        return
    try:
        fd = fileno()  # asked now: a driver that lost the connection has closed its socket already
    except Exception:
        return
    guard.fired = True
    # The blocked driver holds the descriptor: shut the socket down through a duplicate, never close it.
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


def guarded_psycopg_connect(watchdog: Watchdog) -> Callable[..., Any]:
    """``psycopg.connect`` for connections whose every round trip ``watchdog`` guards.

    psycopg runs each exchange with the server (a statement, BEGIN, COMMIT, a ping) through
    ``Connection.wait``, so that is where the guard is taken; the connection's documented
    ``fileno()`` is all the watchdog touches.
    """
    import psycopg

    class GuardedConnection(psycopg.Connection[Any]):
        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            guard = watchdog.guard(self.fileno)
            try:
                return super().wait(gen, *args, **kwargs)
            except psycopg.Error as exc:
                if guard.fired:
                    raise psycopg.OperationalError(
                        f"no answer from the server within {watchdog.seconds:g}s; the connection was closed"
                    ) from exc
                raise
            finally:
                watchdog.release(guard)

    return GuardedConnection.connect
