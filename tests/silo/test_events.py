"""``silo.events.membership_events``: the changes between two snapshots, one table row per case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.events import EventKind, MembershipEvent, membership_events

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SEEN = T0 + timedelta(minutes=5)
A, B, C = (SiloAddress("127.0.0.1", port, 1) for port in (5001, 5002, 5003))


def row(
    silo: SiloAddress,
    status: SiloStatus = SiloStatus.ACTIVE,
    votes: tuple[tuple[SiloAddress, int], ...] = (),
    properties: dict[str, str] | None = None,
    alive: int = 0,
) -> MembershipEntry:
    return MembershipEntry(
        silo,
        status,
        silo_name=f"s{silo.port}",
        start_time=T0,
        i_am_alive_time=T0 + timedelta(seconds=alive),
        suspect_times=tuple((voter, T0 + timedelta(seconds=at)) for voter, at in votes),
        properties=properties or {},
    )


def data(version: int, *rows: MembershipEntry) -> MembershipTableData:
    return MembershipTableData(tuple((entry, f"e{version}") for entry in rows), TableVersion(version, f"v{version}"))


def kinds(events: tuple[MembershipEvent, ...]) -> list[tuple[EventKind, SiloAddress, tuple[SiloAddress, ...]]]:
    return [(event.kind, event.silo, event.by) for event in events]


CASES = [
    pytest.param([row(A)], [row(A), row(B, SiloStatus.JOINING)], [], id="a row inserted as Joining is no event yet"),
    pytest.param([row(B, SiloStatus.JOINING)], [row(B)], [(EventKind.JOINED, B, ())], id="Joining to Active joins"),
    pytest.param([], [row(B)], [(EventKind.JOINED, B, ())], id="first seen Active joins"),
    pytest.param([row(B)], [row(B, votes=((A, 3),))], [(EventKind.SUSPECTED, B, (A,))], id="a new vote suspects"),
    pytest.param(
        [row(B, votes=((A, 3),))],
        [row(B, SiloStatus.DEAD, votes=((A, 3), (C, 4)))],
        [(EventKind.DECLARED_DEAD, B, (A, C))],
        id="the quorum's vote declares dead by every voter",
    ),
    pytest.param([row(B)], [row(B, SiloStatus.SHUTTING_DOWN)], [(EventKind.LEFT, B, ())], id="shutting down leaves"),
    pytest.param(
        [row(B, SiloStatus.SHUTTING_DOWN)], [row(B, SiloStatus.DEAD)], [], id="Dead after shutting down: left already"
    ),
    pytest.param(
        [row(B, votes=((A, 3),))],
        [row(B, SiloStatus.DEAD, votes=((A, 3),))],
        [(EventKind.LEFT, B, ())],
        id="Dead without a new vote is a leave (an operator, or itself)",
    ),
    pytest.param([row(B)], [], [(EventKind.LEFT, B, ())], id="a live row removed leaves"),
    pytest.param([row(B, SiloStatus.DEAD)], [], [], id="a Dead row cleaned up is no event"),
    pytest.param(
        [row(B, properties={"zone": "us"})],
        [row(B, properties={"zone": "eu"})],
        [(EventKind.PROPERTIES_CHANGED, B, ())],
        id="properties changed",
    ),
    pytest.param([row(A), row(B)], [row(A, alive=9), row(B, alive=9)], [], id="heartbeats are no event"),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_events_between_two_snapshots(
    old: list[MembershipEntry],
    new: list[MembershipEntry],
    expected: list[tuple[EventKind, SiloAddress, tuple[SiloAddress, ...]]],
) -> None:
    assert kinds(membership_events(data(1, *old), data(2, *new), SEEN)) == expected


def test_events_carry_the_version_the_table_time_and_the_observation_time() -> None:
    (event,) = membership_events(data(4, row(B)), data(7, row(B, votes=((A, 3),))), SEEN)
    assert (event.version, event.at, event.observed_at, event.name) == (7, T0 + timedelta(seconds=3), SEEN, "s5002")
    assert event.to_json() == {
        "kind": "suspected",
        "silo": str(B),
        "name": "s5002",
        "version": 7,
        "at": "2026-01-01T00:00:03+00:00",
        "observed_at": "2026-01-01T00:05:00+00:00",
        "by": [str(A)],
        "properties": {},
    }
    assert event.describe() == f"{B} (s5002) suspected by {A} at version 7"


def test_a_first_snapshot_or_an_older_one_yields_nothing() -> None:
    assert membership_events(None, data(3, row(A)), SEEN) == ()
    assert membership_events(data(3, row(A)), data(2, row(B)), SEEN) == ()


def test_skipped_versions_fold_together() -> None:
    events = membership_events(data(1), data(5, row(B, votes=((A, 2),)), row(C, SiloStatus.SHUTTING_DOWN)), SEEN)
    assert kinds(events) == [(EventKind.JOINED, B, ()), (EventKind.SUSPECTED, B, (A,))]
