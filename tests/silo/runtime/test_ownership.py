"""The ownership guard: a key is served by one silo at a time, and only after its previous owner stopped."""

from __future__ import annotations

import asyncio
import random

import pytest

from membership_tables import MembershipEntry, SiloAddress, SiloStatus, TableVersion
from silo.membership.snapshot import MembershipDelta
from silo.runtime.ownership import OwnershipGuard
from silo.work.hashring import HashRing
from silo.work.ownership import NotOwnedError
from tests.silo.harness import LOCAL, T0, HandClock, address, async_test, row, view

A, B, C, D = (address(port) for port in (1, 2, 3, 4))
WAIT = LOCAL.takeover_wait
KEYS = [f"key-{number}" for number in range(2000)]


def keys_of(silo: SiloAddress, *silos: SiloAddress) -> list[str]:
    """The keys ``silo`` owns on the ring of ``silos``."""
    ring = HashRing(silos)
    return [key for key in KEYS if ring.owner(key) == silo]


def dead(silo: SiloAddress, *, voted: bool = True) -> MembershipEntry:
    votes = ((A, T0), (C, T0)) if voted else ()
    return row(silo, SiloStatus.DEAD).replace(suspect_times=votes)


def guard_of(silo: SiloAddress, clock: HandClock, gone: dict[SiloAddress, bool] | None = None) -> OwnershipGuard:
    async def provably_gone(target: SiloAddress) -> bool:
        return (gone or {}).get(target, False)

    return OwnershipGuard(silo, takeover_wait=WAIT, monotonic=clock, provably_gone=provably_gone if gone else None)


def started(guard: OwnershipGuard, clock: HandClock, *silos: SiloAddress, version: int = 1) -> None:
    """``guard``'s silo found Active with ``silos`` at ``version``, its own join wait over."""
    guard.observe(view(*(row(silo) for silo in silos), version=version))
    clock.now += WAIT


def test_a_silo_serves_its_own_keys_and_refuses_the_others_with_the_reason() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B, C)
    check = guard.check()
    assert check.refusal(keys_of(B, A, B, C)) is None
    refusal = check.refusal(keys_of(A, A, B, C)[:3] + keys_of(B, A, B, C)[:2])
    assert refusal is not None
    assert "3 of 5 keys are not owned" in refusal


def test_a_dead_silos_keys_are_held_for_the_takeover_wait_then_served_under_a_larger_token() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B, C)
    token_before = guard.check().token
    moved = [key for key in keys_of(A, A, B, C) if HashRing([B, C]).owner(key) == B]
    assert moved, "some of A's keys move to B"
    guard.observe(view(dead(A), row(B), row(C), version=2))
    held = guard.check()
    refusal = held.refusal(moved)
    assert refusal is not None
    assert "declared Dead" in refusal
    assert held.refusal(keys_of(B, A, B, C)) is None, "B's own keys are served meanwhile"
    clock.now += WAIT - 0.01
    assert guard.check().refusal(moved) is not None
    clock.now += 0.02
    released = guard.check()
    assert released.refusal(moved) is None
    assert released.token > token_before


def test_a_silo_that_joined_and_was_declared_dead_between_two_views_is_a_ghost_all_the_same() -> None:
    """A joined, served on its lease and was declared Dead while B's view lagged: B never saw it
    Active, and A may still be serving (cut off, paused). Found by the SPIN model (``-DJOINS``)."""
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, B, C)
    moved = [key for key in keys_of(A, A, B, C) if HashRing([B, C]).owner(key) == B]
    assert moved, "some of A's keys are B's without A"
    guard.observe(view(dead(A), row(B), row(C), version=4))
    assert guard.pending_ghosts() == {A}
    assert guard.check().refusal(moved) is not None, "held for the takeover wait"
    clock.now += WAIT + 0.01
    assert guard.check().refusal(moved) is None


def test_dead_rows_of_the_first_view_hold_nothing() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    guard.observe(view(dead(A), row(B), version=3))
    assert guard.pending_ghosts() == frozenset()


def test_a_silo_that_left_by_itself_hands_its_keys_over_at_once() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B)
    guard.observe(view(dead(A, voted=False), row(B), version=2))
    assert guard.check().refusal(keys_of(A, A, B)) is None


def test_a_draining_silo_keeps_its_keys_until_it_writes_itself_dead() -> None:
    """ShuttingDown: routers move the keys at once, but the new owner refuses them while the
    calls in flight finish; the Dead write (no votes: it left) hands them over."""
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B)
    guard.observe(view(row(A, SiloStatus.SHUTTING_DOWN), row(B), version=2))
    refusal = guard.check().refusal(keys_of(A, A, B))
    assert refusal is not None
    assert "draining" in refusal
    clock.now += 10 * WAIT  # however long the drain takes
    assert guard.check().refusal(keys_of(A, A, B)) is not None
    guard.observe(view(dead(A, voted=False), row(B), version=3))
    assert guard.check().refusal(keys_of(A, A, B)) is None


def test_a_draining_silo_declared_dead_by_votes_is_a_ghost_for_the_takeover_wait() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B, C)
    guard.observe(view(row(A, SiloStatus.SHUTTING_DOWN), row(B), row(C), version=2))
    guard.observe(view(dead(A), row(B), row(C), version=3))
    assert guard.pending_ghosts() == {A}
    clock.now += WAIT + 0.01
    assert guard.check().refusal(keys_of(B, B, C)) is None


def test_a_draining_silo_keeps_serving_the_keys_it_owned() -> None:
    clock = HandClock()
    guard = guard_of(A, clock)
    started(guard, clock, A, B)
    guard.observe(view(row(A, SiloStatus.SHUTTING_DOWN), row(B), version=2))
    assert guard.check().refusal(keys_of(A, A, B)) is None


@async_test
async def test_a_draining_silo_that_exited_without_its_dead_write_is_taken_over_at_once() -> None:
    clock = HandClock()
    guard = guard_of(B, clock, gone={A: True})
    started(guard, clock, A, B)
    guard.observe(view(row(A, SiloStatus.SHUTTING_DOWN), row(B), version=2))
    await asyncio.sleep(0)  # the probe of A's endpoint
    await asyncio.sleep(0)
    assert guard.check().refusal(keys_of(A, A, B)) is None
    await guard.close()


@async_test
async def test_a_dead_silo_whose_endpoint_refuses_connections_is_taken_over_at_once() -> None:
    clock = HandClock()
    guard = guard_of(B, clock, gone={A: True})
    started(guard, clock, A, B, C)
    guard.observe(view(dead(A), row(B), row(C), version=2))
    await asyncio.sleep(0)  # the probe of A's endpoint
    await asyncio.sleep(0)
    assert guard.check().refusal(keys_of(B, B, C)) is None
    await guard.close()


@async_test
async def test_a_dead_silo_that_still_answers_keeps_its_keys_held() -> None:
    clock = HandClock()
    guard = guard_of(B, clock, gone={A: False, D: True})
    started(guard, clock, A, B)
    guard.observe(view(dead(A), row(B), version=2))
    await asyncio.sleep(0)
    assert guard.pending_ghosts() == {A}
    await guard.close()


def test_a_joining_silo_serves_nothing_until_the_keys_it_takes_have_certainly_been_given_up() -> None:
    clock = HandClock()
    guard = guard_of(C, clock)
    guard.observe(view(row(A), row(B), row(C), version=5))
    refusal = guard.check().refusal(keys_of(C, A, B, C))
    assert refusal is not None
    assert "takes over its keys" in refusal
    clock.now += WAIT
    assert guard.check().refusal(keys_of(C, A, B, C)) is None


def test_the_first_silo_of_a_cluster_serves_at_once() -> None:
    guard = guard_of(A, HandClock())
    guard.observe(view(row(A), version=1))
    assert guard.check().refusal(KEYS) is None


def test_a_silo_not_active_in_its_view_owns_nothing() -> None:
    guard = guard_of(D, HandClock())
    guard.observe(view(row(A), row(D, SiloStatus.JOINING), version=3))
    refusal = guard.check().refusal(KEYS[:1])
    assert refusal is not None
    assert "owns no keys" in refusal


def test_admit_raises_with_the_refusal() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B)
    with pytest.raises(NotOwnedError, match="not owned"):
        guard.check().admit(keys_of(A, A, B)[:1])


def test_an_old_view_changes_nothing() -> None:
    clock = HandClock()
    guard = guard_of(B, clock)
    started(guard, clock, A, B, version=4)
    guard.observe(view(row(B), version=3))
    assert guard.check().version == 4


def test_views_built_by_deltas_are_followed_by_their_written_rows_as_a_pass_over_each_would() -> None:
    """A guard that takes in views built by deltas (one origin) ends each step where a guard given
    the same views as new reads (a pass over each) does; it makes no set of every Active silo."""
    rng = random.Random(11)
    clock = HandClock()
    silos = [address(port) for port in range(10, 40)]
    following, passing = guard_of(B, clock), guard_of(B, clock)
    snapshot = view(row(B), *(row(silo, SiloStatus.ACTIVE if silo.port < 30 else SiloStatus.JOINING) for silo in silos))
    for guard in (following, passing):
        guard.observe(snapshot)
    after = {
        SiloStatus.JOINING: (SiloStatus.ACTIVE, SiloStatus.DEAD),
        SiloStatus.ACTIVE: (SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD),
        SiloStatus.SHUTTING_DOWN: (SiloStatus.DEAD,),
    }
    for step in range(300):
        clock.now += rng.uniform(0, WAIT / 3)
        written = []
        for silo in rng.sample(silos, rng.randint(1, 3)):
            entry = snapshot.entry(silo)
            assert entry is not None
            if entry.status in after:
                status = rng.choice(after[entry.status])
                voted = status is SiloStatus.DEAD and rng.random() < 0.7
                written.append((entry.replace(status=status, suspect_times=((A, T0),) if voted else ()), f"e{step}"))
        if not written:
            continue
        delta = MembershipDelta(snapshot.version, TableVersion(snapshot.version + 1, f"v{step}"), tuple(written))
        built = snapshot.apply(delta)
        assert built is not None
        snapshot = built
        following.observe(snapshot)
        assert "active_silos" not in snapshot.__dict__, "followed by the written rows, not a pass"
        passing.observe(view(*snapshot.entries, version=snapshot.version))
        assert following.claim() == passing.claim(), f"step {step}"
        assert following.pending_ghosts() == passing.pending_ghosts()
