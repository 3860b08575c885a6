from __future__ import annotations

import asyncio

import pytest

from membership_tables import MembershipTableData
from silo.membership.clock import FakeClock
from silo.membership.local_health import MAX_SCORE
from silo.membership.probing import ProbeOutcome, bounded_indirect_timeout, probe_for_peer
from tests.silo.harness import T0, FunctionProber, Reachability, address, async_test, row, view

ME, TARGET = address(1), address(2)


@pytest.mark.parametrize(
    ("requested", "probe_timeout", "bounded"),
    [
        (1.0, 5.0, 1.0),  # an honest caller: as asked
        (5.0 * (MAX_SCORE + 1), 5.0, 5.0 * (MAX_SCORE + 1)),  # the most degraded honest caller: as asked
        (5.0 * (MAX_SCORE + 1) + 1, 5.0, 5.0 * (MAX_SCORE + 1)),
        (1e300, 0.5, 0.5 * (MAX_SCORE + 1)),
        (float("inf"), 0.5, 0.5 * (MAX_SCORE + 1)),
    ],
)
def test_an_indirect_probe_timeout_is_capped(requested: float, probe_timeout: float, bounded: float) -> None:
    assert bounded_indirect_timeout(requested, probe_timeout) == bounded


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
    result = await probe_for_peer(prober, clock, 0.5, snapshot, TARGET, 0.5, health_score=0)
    assert result.succeeded is answered
    assert prober.pings == [TARGET]
    assert prober.new_connection_pings == [TARGET]
    assert answered or result.failure_message


@async_test
async def test_the_first_answer_settles_an_indirect_probe_and_the_other_ping_is_cancelled() -> None:
    clock = FakeClock(T0)
    prober, _, snapshot = intermediary_scene(lambda target: asyncio.get_running_loop().create_future(), lambda t: True)
    started = clock.monotonic()
    result = await probe_for_peer(prober, clock, 0.5, snapshot, TARGET, 0.5, health_score=0)
    assert result.succeeded
    assert clock.monotonic() == started
