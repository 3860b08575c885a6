"""Table access for the runtime: calls off the event loop, retries, and outage tracking.

Every table call of the runtime goes through ``TableAccess``: it runs the blocking call
through an injected runner (a worker thread in production, inline in deterministic tests),
retries ``TableUnavailableError`` with exponential backoff and jitter (tenacity, sleeping on
the injected clock) until a deadline, and remembers since when calls have been failing, which
the table manager needs to tell a hiccup from an outage. An ``AccessDeniedError`` (the store
refuses the silo's credentials) counts as failing too, but is never retried: only an admin
can end it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from membership_tables import AccessDeniedError, SiloAddress, TableUnavailableError
from silo.membership.clock import Clock
from silo.membership.options import SiloOptions

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class BlockingRunner(Protocol):
    """Runs a blocking table call without blocking the event loop."""

    def __call__(self, call: Callable[[], _T], /) -> Awaitable[_T]: ...


async def run_in_thread(call: Callable[[], _T]) -> _T:
    """The production runner: a worker thread."""
    return await asyncio.to_thread(call)


async def run_inline(call: Callable[[], _T]) -> _T:
    """Runs the call on the loop: for in-memory tables under a fake clock (deterministic tests)."""
    return call()


def backoff_bounds(options: SiloOptions) -> tuple[float, float]:
    """(first, longest) wait between retries of an unreachable table, in seconds."""
    return options.probe_timeout / 5, options.table_refresh_timeout / 2


class TableAccess:
    """Runs table calls with retries and tracks the table's availability."""

    def __init__(
        self,
        *,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        run_blocking: BlockingRunner,
        give_up: Callable[[], bool] = lambda: False,
    ) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._run = run_blocking
        self._give_up = give_up
        self._unavailable_since: float | None = None
        self._last_failed_at: float | None = None

    @property
    def available(self) -> bool:
        """False from the first failed call until the next successful one."""
        return self._unavailable_since is None

    def unavailable_for(self) -> float:
        """Seconds since the first of the current run of failed calls (0 if the last call succeeded)."""
        if self._unavailable_since is None:
            return 0.0
        return self._clock.monotonic() - self._unavailable_since

    def failed_within(self, seconds: float) -> bool:
        """Whether any call failed (unreachable or refused) in the last ``seconds``."""
        last = self._last_failed_at
        return last is not None and self._clock.monotonic() - last < seconds

    async def attempt(self, call: Callable[[], _T]) -> _T:
        """One try; a failure marks the table unavailable, a success available again."""
        try:
            result = await self._run(call)
        except TableUnavailableError:
            self._last_failed_at = self._clock.monotonic()
            if self._unavailable_since is None:
                self._unavailable_since = self._clock.monotonic()
                logger.warning("silo %s cannot reach the membership table; retrying", self._address)
            raise
        except AccessDeniedError as exc:
            # The store refuses this silo (credentials, GRANTs or ACLs changed): for the protocol
            # that is an outage, but one that retrying cannot end, so it is raised at once.
            self._last_failed_at = self._clock.monotonic()
            if self._unavailable_since is None:
                self._unavailable_since = self._clock.monotonic()
                logger.error("silo %s: the membership table refuses this silo: %s", self._address, exc)
            raise
        if self._unavailable_since is not None:
            self._unavailable_since = None
            logger.warning("silo %s reaches the membership table again", self._address)
        return result

    async def call(self, call: Callable[[], _T], deadline: float | None) -> _T:
        """Run ``call``; with a ``deadline`` (clock.monotonic) retry unavailability until then."""
        if deadline is None:
            return await self.attempt(call)
        first, longest = backoff_bounds(self._options)

        def stop(state: RetryCallState) -> bool:
            return self._give_up() or self._clock.monotonic() >= deadline

        retrying = AsyncRetrying(
            sleep=self._clock.sleep,
            retry=retry_if_exception_type(TableUnavailableError),
            wait=wait_exponential_jitter(multiplier=first, max=longest, jitter=first),
            stop=stop,
            reraise=True,
        )
        return await retrying(self.attempt, call)

    async def call_timed(self, call: Callable[[], _T], deadline: float | None) -> tuple[float, _T]:
        """``call`` as ``call`` runs it, with the monotonic time its successful attempt began to
        run (in its worker thread, after any wait for one): the anchor of a lease it confirms.

        The store takes its snapshot after that moment, so it precedes the read's linearization
        as the moment the call was made does (``silo.membership.lease``), and a read that waited
        for a worker thread (its process's threads busy with other reads) is not counted that
        much older: in a 2,000-silo join, reads for the lease waited behind whole-table reads."""
        clock = self._clock

        @functools.wraps(call)  # runners that look at what they run see ``call`` (``__wrapped__``)
        def timed() -> tuple[float, _T]:
            return clock.monotonic(), call()

        return await self.call(timed, deadline)

    def deadline_in(self, seconds: float) -> float:
        return self._clock.monotonic() + seconds
