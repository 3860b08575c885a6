from __future__ import annotations

import asyncio

import pytest

from membership_tables import MembershipTableData
from silo.membership.clock import FakeClock
from silo.membership.local_health import MAX_SCORE
from silo.membership.options import SiloOptions
from silo.membership.probing import ProbeOutcome, bounded_indirect_timeout, probe_for_peer
from tests.silo.harness import T0, FunctionProber, Reachability, address, async_test, row, view

ME, TARGET = address(1), address(2)
OPTIONS = SiloOptions.local()


@pytest.mark.parametrize(
    ("requested", "detection_time", "bounded"),
    [
        (1.0, 15.0, 1.0),  # an honest caller: as asked
        (15.0 * (MAX_SCORE + 1), 15.0, 15.0 * (MAX_SCORE + 1)),  # the most degraded honest caller: as asked
        (15.0 * (MAX_SCORE + 1) + 1, 15.0, 15.0 * (MAX_SCORE + 1)),
        (1e300, 1.5, 1.5 * (MAX_SCORE + 1)),
        (float("inf"), 1.5, 1.5 * (MAX_SCORE + 1)),
    ],
)
def test_an_indirect_probe_timeout_is_capped(requested: float, detection_time: float, bounded: float) -> None:
    assert bounded_indirect_timeout(requested, detection_time) == bounded


def intermediary_scene(
    usual: Reachability, new_connection: Reachability
) -> tuple[FunctionProber, FakeClock, MembershipTableData]:
    prober = FunctionProber(reachable=usual, reachable_on_new_connection=new_connection)
    return prober, FakeClock(T0), view(row(ME), row(TARGET)).data


@pytest.mark.parametrize(
    ("usual", "new_connection", "answered"),
    [
        (True, False, True),
        (False, True, True),  # our connection to the target still backs off after a heal: a new one answers
        (False, False, False),
        (ProbeOutcome.REFUSED, False, False),
    ],
)
@async_test
async def test_an_intermediary_pings_on_its_usual_connection_and_a_new_one_at_once(
    usual: bool | ProbeOutcome, new_connection: bool, answered: bool
) -> None:
    prober, clock, snapshot = intermediary_scene(lambda target: usual, lambda target: new_connection)
    probe = asyncio.ensure_future(probe_for_peer(prober, clock, OPTIONS, snapshot, TARGET, 0.5, health_score=0))
    await clock.advance(0.5)
    result = await probe
    assert result.succeeded is answered
    assert prober.pings[0] == TARGET
    assert prober.new_connection_pings[0] == TARGET
    assert answered or result.failure_message


@async_test
async def test_an_intermediary_watches_for_the_whole_window_and_asks_again_after_fast_failures() -> None:
    """Pings that fail at once (a channel backing off after a cut or a pause) are sent again every
    probe interval until the window ends, and a late answer within it still reaches the asker."""
    clock = FakeClock(T0)
    started = clock.monotonic()
    prober, _, snapshot = intermediary_scene(lambda target: clock.monotonic() - started >= 0.6, lambda target: False)
    probe = asyncio.ensure_future(probe_for_peer(prober, clock, OPTIONS, snapshot, TARGET, 1.0, health_score=0))
    for _ in range(20):
        await clock.advance(0.05)
    result = await probe
    assert result.succeeded
    assert result.response_time == pytest.approx(0.75)  # sent at 0, 0.25, 0.5 and 0.75 s: the last answered
    assert len(prober.pings) == len(prober.new_connection_pings) == 4


@async_test
async def test_a_refusal_ends_an_intermediary_s_watch_at_once() -> None:
    """A closed port is a crash's evidence: the asker hears of it at once, not at the window's end."""
    prober, clock, snapshot = intermediary_scene(lambda target: ProbeOutcome.REFUSED, lambda target: False)
    result = await probe_for_peer(prober, clock, OPTIONS, snapshot, TARGET, 1.0, health_score=0)
    assert not result.succeeded
    assert result.response_time == 0.0
    assert "refused" in result.failure_message


@async_test
async def test_the_first_answer_settles_an_indirect_probe_and_the_other_ping_is_cancelled() -> None:
    clock = FakeClock(T0)
    prober, _, snapshot = intermediary_scene(lambda target: asyncio.get_running_loop().create_future(), lambda t: True)
    started = clock.monotonic()
    result = await probe_for_peer(prober, clock, OPTIONS, snapshot, TARGET, 0.5, health_score=0)
    assert result.succeeded
    assert clock.monotonic() == started
