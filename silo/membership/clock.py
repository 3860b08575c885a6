"""Time as an injected dependency.

Every role takes a ``Clock``; production uses ``SystemClock`` and unit tests use
``FakeClock``, which only moves when the test calls ``advance()``. Periodic loops are
written as ``while await ticker.tick():`` so a test releases ticks by advancing time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from silo.membership.options import SiloOptions

_T = TypeVar("_T")
logger = logging.getLogger(__name__)


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC (what goes into the table)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic scale (for measuring intervals)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the caller for ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when ``advance()`` is called; sleepers wake in time order."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self._start = start
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + max(0.0, seconds), next(self._sequence), future))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper due on the way, in order.

        After each wake-up the event loop runs until it is idle, so the woken tasks
        finish their reaction before time moves further.
        """
        await settle()  # tasks created just before advance() get to register their sleeps
        target = self._elapsed + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            due, _, future = heapq.heappop(self._sleepers)
            self._elapsed = max(self._elapsed, due)
            if not future.done():
                future.set_result(None)
            await settle()
        self._elapsed = target
        await settle()

    async def pause(self, seconds: float) -> None:
        """Our process stops for ``seconds`` (SIGSTOP, a long GC pause): time jumps and nothing
        runs meanwhile; on resuming, every sleeper that came due wakes at once, in order."""
        await settle()
        self._elapsed += seconds
        while self._sleepers and self._sleepers[0][0] <= self._elapsed:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
        await settle()

    def jump(self, seconds: float) -> None:
        """Move time forward and wake nobody: the instant a paused process resumes, before any of
        its timers fires (a request may be the first thing it handles)."""
        self._elapsed += seconds

    @property
    def pending_sleepers(self) -> int:
        return sum(1 for _, _, future in self._sleepers if not future.done())


def next_tick(now: float, interval: float) -> float:
    """The instant of the probe grid (the multiples of ``interval``) after the one nearest ``now``.

    Nearest, not the last one passed: a timer that fires a hair early (or late) for its tick
    must not count that tick again (or skip the next). The gap to it is 0.5 to 1.5 intervals.
    """
    return (math.floor(now / interval + 0.5) + 1) * interval


class PauseWatch:
    """Notices that our own process was not running, from the gaps between our callbacks.

    A loop that wakes every ``interval`` leaves gaps of about one interval; a gap of more than
    two means we were paused (a GC pause, SIGSTOP, a starved CPU), and all of it beyond one
    interval was time in which we could observe nothing. Up to two is scheduling jitter.
    """

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._last_awake = clock.monotonic()
        self.paused_seconds = 0.0
        """Blind time found so far."""

    def awake(self) -> None:
        """We run now; what came before does not count as a gap."""
        self._last_awake = self._clock.monotonic()

    def blind(self) -> float:
        """The blind part of the gap since the previous call (or ``awake``), 0 for ordinary jitter."""
        now = self._clock.monotonic()
        gap, self._last_awake = now - self._last_awake, now
        blind = gap - self._interval if gap > 2 * self._interval else 0.0
        self.paused_seconds += blind
        return blind


def until_next_probe(now: float, options: SiloOptions, phase: float = 0.0) -> float:
    """Seconds from ``now`` to a monitor's next probe: one interval, or to the next instant of the
    grid (``align_probes``) shifted by ``phase`` (a fraction of the interval: ``RingTargets.phase``)."""
    interval = options.effective_probe_interval
    if not options.align_probes:
        return interval
    offset = phase * interval
    return next_tick(now - offset, interval) + offset - now


async def with_timeout(clock: Clock, awaitable: Awaitable[_T], timeout: float) -> _T:
    """Await ``awaitable`` for at most ``timeout`` seconds of ``clock`` time, else raise ``TimeoutError``.

    Unlike ``asyncio.wait_for`` this honours a ``FakeClock``, so tests can script a hung peer.
    On the real clock it is ``asyncio.timeout`` (no extra tasks: a silo of a big cluster calls
    this for every probe it sends and answers).
    """
    if type(clock) is SystemClock:
        try:
            async with asyncio.timeout(timeout):
                return await awaitable
        except TimeoutError:
            raise TimeoutError(f"no answer within {timeout}s") from None
    work = asyncio.ensure_future(awaitable)
    deadline = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait({work, deadline}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        deadline.cancel()
        timed_out = not work.done()
        if timed_out:
            work.cancel()
    if timed_out:
        raise TimeoutError(f"no answer within {timeout}s")
    return work.result()


async def settle(rounds: int = 50) -> None:
    """Let ready tasks run until the loop has nothing left to do right now."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Ticker:
    """Fires every ``period`` seconds of ``clock`` time; ``tick()`` returns False once stopped.

    ``first_delay`` lets the first tick be randomized (spreading table load when many
    silos start together).
    """

    def __init__(self, clock: Clock, period: float, first_delay: float | None = None) -> None:
        self._clock = clock
        self._period = period
        self._next_delay = period if first_delay is None else first_delay
        self._stopped = asyncio.Event()

    async def tick(self) -> bool:
        if self._stopped.is_set():
            return False
        sleep = asyncio.ensure_future(self._clock.sleep(self._next_delay))
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({sleep, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleep, stop):
                task.cancel()
        self._next_delay = self._period
        return not self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()


class Periodic:
    """A background task that runs ``body`` on every tick of a ``Ticker`` until stopped.

    With ``immediately`` the body also runs once at start. An exception in the body is
    logged and the loop goes on: one bad round must not end a silo's failure detection.
    """

    def __init__(
        self,
        clock: Clock,
        period: float,
        body: Callable[[], Awaitable[None]],
        *,
        first_delay: float | None = None,
        immediately: bool = False,
    ) -> None:
        self._ticker = Ticker(clock, period, first_delay)
        self._body = body
        self._immediately = immediately
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        if self._immediately:
            await self._round()
        while await self._ticker.tick():
            await self._round()

    async def _round(self) -> None:
        try:
            await self._body()
        except Exception:
            logger.exception("periodic task %s failed; it runs again on the next tick", self._body)

    async def stop(self) -> None:
        self._ticker.stop()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
