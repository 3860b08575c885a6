"""``benchmarks.silo_cluster.victim_death_logged``: a survivor's JSON log says when its view lost the victim."""

from __future__ import annotations

import logging
from datetime import timedelta

from benchmarks.silo_cluster import victim_death_logged
from membership_tables import SiloAddress
from silo.cli.log_format import JsonFormatter
from silo.events import EventKind, MembershipEvent
from tests.silo.harness import T0, address

SURVIVOR, VICTIM, OTHER = address(1), address(2), address(3)
VOTED, SEEN = T0 + timedelta(seconds=4), T0 + timedelta(seconds=5)


def logged(kind: EventKind, silo: SiloAddress) -> str:
    """The line ``silo run --log-format json`` writes for this event (the real formatter)."""
    event = MembershipEvent(kind=kind, silo=silo, name="", version=7, at=VOTED, observed_at=SEEN, by=(OTHER,))
    record = logging.makeLogRecord(
        {"name": "silo.events", "levelname": "INFO", "msg": "seen", "event": event.to_json(), "silo": str(SURVIVOR)}
    )
    return JsonFormatter().format(record)


def test_the_death_line_gives_the_survivors_own_time_and_the_last_votes() -> None:
    assert victim_death_logged([logged(EventKind.DECLARED_DEAD, VICTIM)], VICTIM) == (
        SEEN.timestamp(),
        VOTED.timestamp(),
    )


def test_a_departure_counts_too() -> None:
    assert victim_death_logged([logged(EventKind.LEFT, VICTIM)], VICTIM) == (SEEN.timestamp(), VOTED.timestamp())


def test_other_silos_other_events_and_lines_that_are_not_json_are_skipped() -> None:
    lines = [
        f"a line some library printed about {VICTIM}",
        logged(EventKind.SUSPECTED, VICTIM),
        logged(EventKind.DECLARED_DEAD, OTHER),
        logged(EventKind.DECLARED_DEAD, VICTIM)[:-10],  # still being written
    ]
    assert victim_death_logged(lines, VICTIM) is None
