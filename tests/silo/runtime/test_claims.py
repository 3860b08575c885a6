"""The serving-claims checker: it finds two silos that could serve one key at the same moment, and only that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from membership_tables import SiloStatus
from silo.membership.clock import FakeClock
from silo.membership.lease import MembershipLease
from silo.membership.snapshot import MembershipSnapshot
from silo.runtime.claims import ClaimsFile, ServingClaim, check_claims, load_claims
from silo.runtime.serving import ServingGuard
from tests.silo.harness import LOCAL, T0, FunctionProber, address, row, view

A, B, C = (str(address(port)) for port in (1, 2, 3))
RING = (A, B, C)


def claim(silo: str, at: float, until: float, ring: tuple[str, ...] = RING, **fields: object) -> ServingClaim:
    return ServingClaim(silo=silo, at=at, ring=ring, valid_until=until, **fields)  # type: ignore[arg-type]


def test_silos_serving_their_own_keys_of_one_ring_never_overlap() -> None:
    claims = [claim(silo, 0.0, 10.0) for silo in RING]
    assert check_claims(claims) == []


def test_a_zombie_and_the_owner_that_took_its_keys_overlap() -> None:
    zombie = claim(A, 0.0, 10.0)  # its lease runs until 10
    survivors = [claim(silo, 5.0, 20.0, ring=(B, C)) for silo in (B, C)]  # took A's keys at 5
    problems = check_claims([zombie, *survivors])
    assert problems
    assert A in problems[0]


def test_a_takeover_that_waits_for_the_ghost_does_not_overlap() -> None:
    zombie = claim(A, 0.0, 10.0)
    ghosts = {A: 10.5}  # A declared Dead at 5, held until 10.5
    survivors = [claim(silo, 5.0, 20.0, ghosts=ghosts) for silo in (B, C)]
    assert check_claims([zombie, *survivors]) == []


def test_a_later_claim_ends_the_earlier_one_and_nothing_counts_before_serving_from() -> None:
    leaving = [claim(A, 0.0, 10.0), claim(A, 4.0, 4.0)]  # at 4 it stops serving (ShuttingDown)
    joiner = claim(C, 3.0, 20.0, ring=(A, B, C), serving_from=4.5)
    others = [claim(B, 4.0, 20.0, ring=(B, C)), claim(C, 4.1, 20.0, ring=(B, C), serving_from=4.5)]
    assert check_claims([*leaving, joiner, *others]) == []


def test_claims_round_trip_through_a_file_and_a_cut_short_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    written = claim(A, 1.0, 2.0, ghosts={B: 1.5}, serving_from=0.5, token=7)
    claims = ClaimsFile(path)
    claims.append(written)
    claims.close()
    with path.open("a") as file:
        file.write('{"silo": "cut')
    assert load_claims([path]) == [written]


def test_a_lease_renewal_records_the_ring_of_the_current_view_even_before_the_guard_has_seen_it(
    tmp_path: Path,
) -> None:
    """A renewal by a read that came with a newer view is recorded at once, while the task that
    feeds the ownership guard may not have run yet: the claim holds the ring a request would be
    checked against now (the current view's), not the guard's older one."""
    clock = FakeClock(T0)
    lease = MembershipLease(LOCAL.lease_timeout, clock.monotonic)
    me, joiner = address(1), address(2)
    current = view(row(me), version=1)

    async def no_snapshots() -> AsyncIterator[MembershipSnapshot]:
        return
        yield

    ServingGuard(  # it records a claim at each lease confirmation
        address=me,
        options=LOCAL,
        clock=clock,
        lease=lease,
        status=lambda: SiloStatus.ACTIVE,
        draining=lambda: False,
        snapshot=lambda: current,
        snapshots=no_snapshots,
        prober=FunctionProber(),
        claims=ClaimsFile(tmp_path / "claims.jsonl"),
    )
    lease.confirm(clock.monotonic())
    current = view(row(me), row(joiner), version=2)  # published; the guard's feed has not run
    lease.confirm(clock.monotonic() + 0.1)
    recorded = load_claims([tmp_path / "claims.jsonl"])
    assert recorded[-1].ring == tuple(sorted((str(me), str(joiner))))
