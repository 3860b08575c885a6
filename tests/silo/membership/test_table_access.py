from __future__ import annotations

import asyncio

import pytest

from membership_tables import AccessDeniedError, TableUnavailableError
from silo.membership.clock import FakeClock
from silo.membership.options import SiloOptions
from silo.membership.table_access import TableAccess, backoff_bounds, run_in_thread, run_inline
from tests.silo.harness import T0, address, async_test

OPTIONS = SiloOptions.local()


def access(clock: FakeClock, give_up: bool = False) -> TableAccess:
    return TableAccess(
        address=address(1), options=OPTIONS, clock=clock, run_blocking=run_inline, give_up=lambda: give_up
    )


class Store:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def read(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise TableUnavailableError("down")
        return "rows"


@pytest.mark.parametrize(("options", "bounds"), [(SiloOptions(), (1.0, 30.0)), (OPTIONS, (0.1, 1.0))])
def test_backoff_bounds(options: SiloOptions, bounds: tuple[float, float]) -> None:
    assert backoff_bounds(options) == pytest.approx(bounds)


@async_test
async def test_one_attempt_tracks_availability_and_how_long_it_has_been_down() -> None:
    clock = FakeClock(T0)
    tables, store = access(clock), Store(failures=2)
    assert tables.available
    assert tables.unavailable_for() == 0
    with pytest.raises(TableUnavailableError):
        await tables.attempt(store.read)
    assert not tables.available
    await clock.advance(3)
    with pytest.raises(TableUnavailableError):
        await tables.attempt(store.read)
    assert tables.unavailable_for() == 3  # since the first failure of the run
    assert await tables.attempt(store.read) == "rows"
    assert tables.available
    assert tables.unavailable_for() == 0


@async_test
async def test_call_retries_until_the_deadline_then_raises() -> None:
    clock = FakeClock(T0)
    tables, store = access(clock), Store(failures=1000)
    calling = asyncio.create_task(tables.call(store.read, tables.deadline_in(5)))
    await clock.advance(6)
    with pytest.raises(TableUnavailableError):
        await calling
    assert 3 < store.calls < 50


@async_test
async def test_call_without_deadline_or_when_giving_up_tries_once() -> None:
    clock = FakeClock(T0)
    store = Store(failures=1000)
    with pytest.raises(TableUnavailableError):
        await access(clock).call(store.read, None)
    with pytest.raises(TableUnavailableError):
        await access(clock, give_up=True).call(store.read, 100.0)
    assert store.calls == 2


@async_test
async def test_a_refused_silo_counts_as_an_outage_but_is_not_retried() -> None:
    clock = FakeClock(T0)
    tables, calls = access(clock), []

    def refused() -> str:
        calls.append(1)
        raise AccessDeniedError("permission denied for table silo_membership")

    with pytest.raises(AccessDeniedError):
        await tables.call(refused, tables.deadline_in(5))
    assert len(calls) == 1
    assert not tables.available
    await clock.advance(2)
    assert tables.unavailable_for() == 2
    assert await tables.attempt(lambda: "rows") == "rows"
    assert tables.available


@async_test
async def test_the_thread_runner_returns_the_result() -> None:
    assert await run_in_thread(lambda: 42) == 42
