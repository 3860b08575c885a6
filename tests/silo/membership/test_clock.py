"""``with_timeout`` on the real clock (the fake clock's behaviour is covered by every role's tests)."""

from __future__ import annotations

import asyncio

import pytest

from silo.membership.clock import SystemClock, with_timeout


def test_with_timeout_on_the_real_clock_returns_the_result_or_raises_and_cancels() -> None:
    cancelled = asyncio.Event()

    async def hang() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def scenario() -> None:
        assert await with_timeout(SystemClock(), asyncio.sleep(0, result="answer"), 1.0) == "answer"
        with pytest.raises(TimeoutError, match=r"no answer within 0\.05s"):
            await with_timeout(SystemClock(), hang(), 0.05)
        assert cancelled.is_set()
        with pytest.raises(ValueError, match="own error"):
            await with_timeout(SystemClock(), _fail(), 1.0)

    asyncio.run(scenario())


async def _fail() -> None:
    raise ValueError("own error")
