"""``with_timeout`` on the real clock, and ``next_tick`` (the fake clock is covered by every role's tests)."""

from __future__ import annotations

import asyncio

import pytest

from silo.membership.clock import SystemClock, next_tick, until_next_probe, with_timeout
from silo.membership.options import SiloOptions


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


@pytest.mark.parametrize(
    ("now", "interval", "tick"),
    [
        (1.0, 1.0, 2.0),  # on the grid: the next instant
        (0.999, 1.0, 2.0),  # a timer that fired a hair early for tick 1 does not probe again at 1
        (1.001, 1.0, 2.0),
        (1.49, 1.0, 2.0),  # late, but nearer 1: the gap to 2 shrinks
        (1.51, 1.0, 3.0),  # nearer 2: 2 counts as this one, the next is 3
        (0.37, 0.25, 0.5),  # a monitor started off the grid joins it at once
    ],
)
def test_next_tick_is_the_grid_instant_after_the_nearest_one(now: float, interval: float, tick: float) -> None:
    assert next_tick(now, interval) == pytest.approx(tick)


@pytest.mark.parametrize(
    ("now", "phase", "wait"),
    [
        (1.0, 0.0, 0.25),  # on the grid of 0.25 s: the next instant
        (1.0, 0.5, 0.375),  # half a step later: 1.125 is the nearest, 1.375 the next
        (1.125, 0.5, 0.25),  # on the shifted grid: its next instant
        (1.06, 0.5, 0.315),
    ],
)
def test_a_phase_shifts_the_probe_grid_by_that_fraction_of_the_interval(now: float, phase: float, wait: float) -> None:
    options = SiloOptions.local()  # probes every 0.25 s
    assert until_next_probe(now, options, phase) == pytest.approx(wait)
    assert until_next_probe(now, options.with_overrides({"align_probes": "false"}), phase) == pytest.approx(0.25)
