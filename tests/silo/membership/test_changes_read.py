"""Catching a view up with the rows written since it (``silo.membership.table_view.catch_up``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from membership_tables import MembershipTable, SiloAddress, SiloStatus
from silo.membership.clock import FakeClock
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import BlockingRunner, run_inline
from silo.membership.table_manager import MembershipTableManager
from silo.membership.table_view import RECENT_VIEW_SHARE, catch_up
from tests.membership_tables.malformed_rows import store_in_memory
from tests.silo.harness import T0, FlakyTable, address, async_test, memory_table, row, seed

ME, PEER, OTHER, FOURTH = address(1), address(2), address(3), address(4)
OPTIONS = SiloOptions.local()
T = TypeVar("T")


class WorkerQueue:
    """Runs each call after ``wait`` seconds of the fake clock: a call waiting for a worker thread."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.wait = 0.0

    async def __call__(self, call: Callable[[], T]) -> T:
        if self.wait:
            await self.clock.sleep(self.wait)
        return call()


def beside(
    *peers: SiloAddress,
    inner: MembershipTable | None = None,
    clock: FakeClock | None = None,
    runner: BlockingRunner = run_inline,
) -> tuple[FlakyTable, FakeClock, MembershipTableManager]:
    """Our silo's table manager beside ``peers`` in a fresh table; no view yet."""
    flaky, clock = FlakyTable(inner or memory_table()), clock or FakeClock(T0)
    seed(flaky.inner, *(row(peer) for peer in peers))
    tables = MembershipTableManager(
        table=flaky, address=ME, options=OPTIONS, clock=clock, random=random.Random(7), run_blocking=runner
    )
    return flaky, clock, tables


async def joined(
    inner: MembershipTable | None = None, clock: FakeClock | None = None, runner: BlockingRunner = run_inline
) -> tuple[FlakyTable, FakeClock, MembershipTableManager]:
    """Our silo, Active beside PEER and OTHER, its lease confirmed by its join's reads."""
    flaky, clock, tables = beside(PEER, OTHER, inner=inner, clock=clock, runner=runner)
    await tables.insert_self(row(ME, SiloStatus.JOINING), tables.deadline_in(10))
    assert await tables.update_own_status(SiloStatus.ACTIVE, tables.deadline_in(10))
    await tables.refresh()
    flaky.calls.clear()
    return flaky, clock, tables


def rewrite(table: MembershipTable, silo: SiloAddress, **fields: Any) -> None:
    """Write ``silo``'s row with ``fields`` changed, at the next version, as another silo would."""
    data = table.read_all()
    found = data.get(silo)
    assert found is not None
    assert table.update_row(found[0].replace(**fields), found[1], data.version.next())


def others_write(table: MembershipTable) -> None:
    """PEER is voted on, OTHER's etag moves, FOURTH joins: three versions our view has not seen."""
    rewrite(table, PEER, suspect_times=((OTHER, T0),))
    rewrite(table, OTHER, silo_name="renamed")
    assert table.insert_row(row(FOURTH, SiloStatus.JOINING), table.read_all().version.next())


@async_test
async def test_a_view_behind_reads_only_the_rows_written_since_and_becomes_the_table() -> None:
    flaky, clock, tables = await joined()
    others_write(flaky.inner)
    flaky.inner.update_i_am_alive(PEER, clock.now() + timedelta(seconds=5))  # no version: not a change
    snapshot = await catch_up(tables.view)
    assert flaky.calls == ["read_changes"]
    table = flaky.inner.read_all()
    assert snapshot.version == table.version.version
    assert snapshot.table_version == table.version
    assert [(entry.replace(i_am_alive_time=T0), etag) for entry, etag in snapshot.data.rows] == [
        (entry.replace(i_am_alive_time=T0), etag) for entry, etag in table.rows
    ]  # every row and etag as the table has them, but for the heartbeat no read of changes shows


@async_test
async def test_a_view_at_the_table_version_reads_no_row_and_renews_the_lease() -> None:
    flaky, clock, tables = await joined()
    before = tables.view.lease.anchor
    await clock.advance(OPTIONS.lease_renew_interval)
    started = clock.monotonic()
    await catch_up(tables.view)
    assert flaky.calls == ["read_changes"]
    assert tables.view.lease.anchor == started != before


@async_test
async def test_a_catch_up_renews_the_lease_from_its_start_once_the_view_holds_the_version_read() -> None:
    flaky, clock, tables = await joined()
    others_write(flaky.inner)
    await clock.advance(OPTIONS.lease_renew_interval)
    started = clock.monotonic()
    await catch_up(tables.view)
    assert tables.view.lease.anchor == started
    assert tables.snapshot.status_of(FOURTH) is SiloStatus.JOINING


@pytest.mark.parametrize("full", [False, True], ids=["read of changes", "full read"])
@async_test
async def test_a_read_that_waited_for_a_worker_thread_renews_the_lease_from_when_it_ran(full: bool) -> None:
    """Not from when it was made: the store read the table after the call ran, and the wait
    (a host's worker threads busy with other reads) would otherwise count against the lease."""
    clock = FakeClock(T0)
    queue = WorkerQueue(clock)
    flaky, clock, tables = await joined(clock=clock, runner=queue)
    others_write(flaky.inner)
    queue.wait = OPTIONS.lease_timeout / 2
    made = clock.monotonic()
    read = asyncio.ensure_future(tables.view.refresh() if full else catch_up(tables.view))
    await clock.advance(queue.wait)
    await read
    assert tables.view.lease.anchor == made + queue.wait
    assert tables.snapshot.status_of(FOURTH) is SiloStatus.JOINING


@async_test
async def test_a_lease_read_that_waited_for_a_worker_thread_renews_the_lease_from_when_it_ran() -> None:
    clock = FakeClock(T0)
    queue = WorkerQueue(clock)
    _flaky, clock, tables = await joined(clock=clock, runner=queue)
    await clock.advance(OPTIONS.lease_renew_interval)
    queue.wait = OPTIONS.lease_renew_interval / 4  # within the half interval a renewal waits
    made = clock.monotonic()
    renewal = asyncio.ensure_future(tables.renew_lease())
    await clock.advance(queue.wait)
    await renewal
    assert tables.view.lease.anchor == made + queue.wait


@async_test
async def test_a_catch_up_that_finds_this_silo_dead_terminates_it_after_a_full_read() -> None:
    flaky, _clock, tables = await joined()
    rewrite(flaky.inner, ME, status=SiloStatus.DEAD, suspect_times=((PEER, T0),))
    await catch_up(tables.view)
    assert flaky.calls == ["read_changes", "read_all"]
    assert tables.terminated.is_set()
    assert "the table says this silo is Dead" in tables.termination_reason


@async_test
async def test_a_view_whose_newest_read_is_old_reads_in_full_and_sees_rows_deleted_since() -> None:
    """A Dead row written after our view and deleted by the cleanup is in no read of changes."""
    flaky, clock, tables = await joined()
    rewrite(flaky.inner, PEER, status=SiloStatus.DEAD)
    await clock.advance(OPTIONS.defunct_silo_expiration * RECENT_VIEW_SHARE)
    assert flaky.inner.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1
    await catch_up(tables.view)
    assert flaky.calls == ["read_all"]
    assert tables.snapshot.entry(PEER) is None


@async_test
async def test_a_joiner_dated_by_its_first_read_catches_up_by_the_changes_before_any_lease() -> None:
    flaky, _clock, tables = beside(PEER)
    await tables.refresh()  # a view, but we are no member: no lease
    seed(flaky.inner, row(OTHER))
    flaky.calls.clear()
    await catch_up(tables.view)
    assert flaky.calls == ["read_changes"]
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE
    assert tables.view.lease.anchor is None


@async_test
async def test_a_view_only_learned_from_a_peer_reads_in_full() -> None:
    """Nothing dates a view no table read of ours brought: a row written since may be deleted."""
    flaky, _clock, tables = beside(PEER)
    learned = flaky.inner.read_all()
    await tables.view.accept_learned(MembershipSnapshot(learned), learned.entries, None)
    seed(flaky.inner, row(OTHER))
    await catch_up(tables.view)
    assert flaky.calls == ["read_all"]
    assert tables.snapshot.status_of(OTHER) is SiloStatus.ACTIVE


@async_test
async def test_a_malformed_row_among_the_changes_is_read_in_full_and_reported() -> None:
    flaky, _clock, tables = await joined()
    others_write(flaky.inner)
    store_in_memory(flaky.inner, FOURTH)
    await catch_up(tables.view)
    assert flaky.calls == ["read_changes", "read_all"]
    assert tables.snapshot.entry(FOURTH) is None
    assert tables.snapshot.status_of(PEER) is SiloStatus.ACTIVE
    assert tables.snapshot.version == 7


@async_test
async def test_a_store_that_cannot_read_changes_is_read_in_full() -> None:
    inner = memory_table()
    inner.reads_changes = False
    flaky, _clock, tables = await joined(inner)
    others_write(flaky.inner)
    await catch_up(tables.view)
    assert flaky.calls == ["read_all"]
    assert tables.snapshot.status_of(FOURTH) is SiloStatus.JOINING
