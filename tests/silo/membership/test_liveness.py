"""Freshness on our own monotonic clock (``silo.membership.liveness``)."""

from __future__ import annotations

import math
from datetime import timedelta

from silo.membership.liveness import LivenessTracker
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot
from tests.silo.harness import T0, HandClock, address, row, view

OPTIONS = SiloOptions.local()
G = OPTIONS.full_refresh_interval
A, B, C = address(1), address(2), address(3)


def watched_until_the_limit(tracker: LivenessTracker, clock: HandClock, snapshot: MembershipSnapshot) -> float:
    """``snapshot`` read at once and then every full-read interval (no heartbeat moves) until the
    freshness limit of its rows falls within our watch; returns that limit's time."""
    start = clock.now
    tracker.observe(snapshot)
    while clock.now + G < start + tracker.limit:
        clock.now += G
        tracker.observe(snapshot)
    return start + tracker.limit


def test_fresh_now_answers_as_is_fresh_did_when_it_was_made() -> None:
    clock = HandClock()
    tracker = LivenessTracker(OPTIONS, clock)
    clock.now = watched_until_the_limit(tracker, clock, view(row(A), row(B)))
    at_the_limit = tracker.fresh_now()
    assert [at_the_limit(A), at_the_limit(B), at_the_limit(C)] == [True, True, False]
    assert [tracker.is_fresh(A), tracker.is_fresh(B), tracker.is_fresh(C)] == [True, True, False]
    clock.now += 0.001
    past_it = tracker.fresh_now()
    assert [past_it(A), tracker.is_fresh(A)] == [False, False]
    assert at_the_limit(A), "a test made earlier answers as of its making"
    assert tracker.stays_fresh_until()(A) < clock.now


def test_nobody_turns_stale_while_our_full_reads_stop_and_the_gap_does_not_count_after() -> None:
    clock = HandClock()
    tracker = LivenessTracker(OPTIONS, clock)
    tracker.observe(view(row(A)))
    clock.now += 10 * tracker.limit  # no read of ours: an outage, a starved process
    assert tracker.is_fresh(A)
    assert tracker.fresh_now()(A)
    assert tracker.stays_fresh_until()(A) == math.inf, "fresh until a read shows otherwise"
    assert tracker.silent_for(A) == 10 * tracker.limit
    # the read that ends the gap sees the same heartbeat: only the time watched counts, before and after it
    limit_reached = watched_until_the_limit(tracker, clock, view(row(A))) - G
    clock.now = limit_reached
    assert tracker.is_fresh(A)
    clock.now += 0.001
    assert not tracker.is_fresh(A)


def test_a_full_read_keeps_the_watch_of_rows_still_there_and_drops_rows_gone() -> None:
    clock = HandClock()
    tracker = LivenessTracker(OPTIONS, clock)
    tracker.observe(view(row(A), row(B)))
    clock.now += 1.0
    later = T0 + timedelta(seconds=1)
    # equal addresses, new objects, as a later read parses them: A heartbeated, B did not, C is new
    tracker.observe(view(row(address(1), when=later), row(address(2)), row(C)))
    assert tracker.silent_for(A) == 0.0
    assert tracker.silent_for(B) == 1.0
    assert tracker.seen_heartbeating(A, within=10.0) is True
    assert tracker.seen_heartbeating(B, within=10.0) is None
    tracker.observe(view(row(A, when=later), row(C)))
    assert tracker.silent_for(B) is None, "a row gone from a full read is no longer watched"
    assert tracker.silent_for(A) == 0.0
