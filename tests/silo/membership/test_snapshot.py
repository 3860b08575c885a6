from __future__ import annotations

import asyncio
import random
from datetime import timedelta

from membership_tables import MembershipTableData, SiloStatus, TableVersion
from silo.membership.options import SiloOptions
from silo.membership.ring import RingIndex
from silo.membership.snapshot import MembershipDelta, SnapshotPublisher
from tests.silo.harness import T0, address, async_test, row, view

A, B, C = address(1), address(2), address(3)


def test_derived_views() -> None:
    now = T0 + timedelta(seconds=100)
    fresh = row(A).replace(i_am_alive_time=now)
    stale = row(B)  # heartbeat 100s old > 90s
    dead = row(C, SiloStatus.DEAD)
    newer_a = row(address(1, generation=2), SiloStatus.JOINING)
    snapshot = view(fresh, stale, dead, newer_a, version=7)
    options = SiloOptions()
    assert snapshot.version == 7
    assert snapshot.entry(A) == fresh
    assert snapshot.status_of(C) is SiloStatus.DEAD
    assert snapshot.status_of(address(9)) is SiloStatus.NONE
    assert snapshot.active_silos == (A, B)
    assert snapshot.newer_generations_of(A) == (address(1, generation=2),)
    assert [snapshot.is_member(silo) for silo in (A, B, C, address(9))] == [True, True, False, False]
    assert snapshot.older_generations_of(address(1, generation=2)) == (fresh,)
    assert snapshot.fresh_votes_against(A, now, options) == 0


def test_newer_generations_are_every_later_generation_of_the_endpoint_and_nothing_else() -> None:
    generations = [address(5, generation=g) for g in (3, 7, 9)]
    neighbours = [address(4, generation=8), address(6, generation=1), address(5, generation=5, host="127.0.0.2")]
    snapshot = view(*(row(silo) for silo in [*neighbours, *generations]))
    assert snapshot.newer_generations_of(generations[0]) == tuple(generations[1:])
    assert snapshot.newer_generations_of(generations[1]) == (generations[2],)
    assert snapshot.newer_generations_of(generations[2]) == ()
    assert snapshot.newer_generations_of(address(5, generation=1)) == tuple(generations), "not in the view itself"
    assert snapshot.newer_generations_of(address(5, generation=8)) == (generations[2],)
    assert snapshot.newer_generations_of(address(9)) == ()


@async_test
async def test_publisher_never_goes_back_in_version() -> None:
    publisher = SnapshotPublisher()
    assert await publisher.publish(view(row(A), version=2))
    assert not await publisher.publish(view(row(A), row(B), version=1))
    assert publisher.current is not None
    assert publisher.current.version == 2
    same_version = view(row(A).replace(i_am_alive_time=T0 + timedelta(seconds=5)), version=2)
    assert not await publisher.publish(same_version)
    assert publisher.current is not None
    assert publisher.current.entry(A) == same_version.entry(A)


@async_test
async def test_the_publisher_stamps_when_the_view_changed_and_a_same_version_reread_keeps_it() -> None:
    clock = iter([T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)])
    publisher = SnapshotPublisher(lambda: next(clock))
    await publisher.publish(view(row(A), version=2))
    assert publisher.current is not None
    assert publisher.current.observed_at == T0 + timedelta(seconds=1)
    await publisher.publish(view(row(A).replace(i_am_alive_time=T0 + timedelta(seconds=9)), version=2))
    assert publisher.current.observed_at == T0 + timedelta(seconds=1)  # a heartbeat re-read: not a change
    await publisher.publish(view(row(A), row(B), version=3))
    assert publisher.current.observed_at == T0 + timedelta(seconds=2)


@async_test
async def test_a_reread_at_the_same_version_never_moves_a_heartbeat_back() -> None:
    publisher = SnapshotPublisher()
    later, earlier = T0 + timedelta(seconds=5), T0 + timedelta(seconds=2)
    await publisher.publish(view(row(A).replace(i_am_alive_time=later), row(B), version=4))
    # a read that started earlier but completed later: same version, older heartbeat of A, newer of B
    await publisher.publish(
        view(row(A).replace(i_am_alive_time=earlier), row(B).replace(i_am_alive_time=later), version=4)
    )
    current = publisher.current
    assert current is not None
    assert [current.entry(silo).i_am_alive_time for silo in (A, B)] == [later, later]  # type: ignore[union-attr]


@async_test
async def test_subscribers_see_versions_in_order_and_end_on_close() -> None:
    publisher = SnapshotPublisher()
    seen: list[int] = []

    async def consume() -> None:
        async for current in publisher.subscribe():
            seen.append(current.version)

    consumer = asyncio.create_task(consume())
    for version in (1, 2, 2, 0, 3):
        await publisher.publish(view(version=version))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await publisher.close()
    await consumer
    assert seen == [1, 2, 3]


@async_test
async def test_refresh_subscribers_also_see_same_version_rereads() -> None:
    publisher = SnapshotPublisher()
    seen: list[int] = []

    async def consume() -> None:
        async for current in publisher.subscribe(include_refreshes=True):
            seen.append(current.version)

    consumer = asyncio.create_task(consume())
    for version in (1, 1, 2):
        await publisher.publish(view(version=version))
        for _ in range(3):
            await asyncio.sleep(0)
    await publisher.close()
    await consumer
    assert seen == [1, 1, 2]


def test_a_snapshot_a_delta_built_finds_every_row_as_a_fresh_read_of_its_rows_would() -> None:
    """Its row index is a copy of the base's with the delta's rows put in (``index_from``)."""
    rng = random.Random(5)
    silos = [address(port) for port in range(10, 90)]
    snapshot = view(*(row(silo) for silo in silos[:60]), version=1)
    for silo in silos:
        snapshot.entry(silo)  # the base's index is built
    for version in range(1, 40):
        written = rng.sample(silos, 3)
        rows = tuple(
            (row(silo, rng.choice(list(SiloStatus)), when=T0 + timedelta(seconds=rng.randrange(-5, 5))), f"e{version}")
            for silo in written
        )
        applied = snapshot.apply(MembershipDelta(version, TableVersion(version + 1, f"v{version + 1}"), rows))
        assert applied is not None
        fresh = MembershipTableData(applied.data.rows, applied.data.version)
        assert [applied.data.get(silo) for silo in silos] == [fresh.get(silo) for silo in silos]
        assert [entry.silo_address for entry in applied.entries] == sorted(
            entry.silo_address for entry in fresh.entries
        )
        snapshot = applied


def test_a_snapshot_a_delta_built_lists_its_active_silos_and_rings_as_a_fresh_read_would() -> None:
    """``active_silos`` and ``ring_index`` follow the parent's by the delta's changes (when the
    parent had them): the same silos, in the same order, on every ring, as from scratch."""
    rng = random.Random(11)
    silos = [address(port) for port in range(10, 130)]
    snapshot = view(*(row(silo) for silo in silos[:80]), version=1)
    inherited = 0
    for version in range(1, 120):
        if rng.random() < 0.8:  # else this parent lists nothing: its child starts afresh
            for ring in range(3):
                list(snapshot.ring_index.following(silos[0], ring))
        written = rng.sample(silos, rng.randint(1, 6))
        statuses = [SiloStatus.ACTIVE, SiloStatus.ACTIVE, SiloStatus.JOINING, SiloStatus.DEAD, SiloStatus.SHUTTING_DOWN]
        rows = tuple((row(silo, rng.choice(statuses)), f"e{version}") for silo in written)
        applied = snapshot.apply(MembershipDelta(version, TableVersion(version + 1, f"v{version + 1}"), rows))
        assert applied is not None
        inherited += applied.inherited is not None and applied.inherited.rings is not None
        fresh = view(*applied.entries, version=version + 1)
        assert applied.active_silos == fresh.active_silos
        for ring in range(3):
            assert applied.ring_index.slots(ring) == RingIndex(fresh.active_silos).slots(ring)
        assert len(applied.ring_index) == len(fresh.active_silos)
        snapshot = applied
    assert inherited > 60, "most views followed their parent's rings"
