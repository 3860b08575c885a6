"""The Serf baseline's log parsing and failure counting, from log lines and events written by hand."""

from __future__ import annotations

import pytest

from benchmarks.serf_group import SerfEvent, failure_episodes, parse_line, suspicion_timeout

PREFIX = "    2026/11/23 09:11:13 [INFO] "


@pytest.mark.parametrize(
    ("line", "kind", "member"),
    [
        (PREFIX + "serf: EventMemberFailed: member-3 127.0.0.1", "failed", "member-3"),
        (PREFIX + "serf: EventMemberJoin: s1 10.213.0.2", "join", "s1"),
        (PREFIX + "serf: EventMemberLeave: s1 10.213.0.2", "leave", "s1"),
        (PREFIX + "serf: EventMemberReap: s1", "reap", "s1"),
        (PREFIX + "memberlist: Suspect s4 has failed, no acks received", "suspect", "s4"),
        (PREFIX + "memberlist: Marking s4 as failed, suspect timeout reached (1 peer confirmations)", "declared", "s4"),
        ("    2026/11/23 09:11:13 [WARN] memberlist: Refuting a suspect message (from: s2)", "refuted", "me"),
        ("    2026/11/23 09:11:13 [WARN] memberlist: Refuting a dead message (from: s2)", "refuted", "me"),
    ],
)
def test_a_log_line_of_interest_becomes_an_event(line: str, kind: str, member: str) -> None:
    assert parse_line(12.5, "me", line) == SerfEvent(12.5, "me", kind, member)


@pytest.mark.parametrize(
    "line",
    [
        PREFIX + "agent: Received event: member-failed",  # the handler's coalesced copy, 1-3 s late
        PREFIX + "agent.ipc: Accepted client: 127.0.0.1:55836",
        "==> Serf agent running!",
        "",
    ],
)
def test_other_lines_are_ignored(line: str) -> None:
    assert parse_line(1.0, "me", line) is None


def events(*rows: tuple[float, str, str]) -> list[SerfEvent]:
    """Events about member ``x``: (time, observer, kind)."""
    return [SerfEvent(t, observer, kind, "x") for t, observer, kind in rows]


@pytest.mark.parametrize(
    ("rows", "episodes"),
    [
        ((), 0),
        (((1, "a", "join"),), 0),
        (((1, "a", "failed"),), 1),
        # every agent sees the same failure: one episode, not three
        (((1, "a", "failed"), (1.1, "b", "failed"), (1.2, "c", "failed")), 1),
        # refuted and failed again later: two episodes
        (((1, "a", "failed"), (2, "a", "join"), (5, "b", "failed"), (6, "b", "join")), 2),
        # overlapping holds by different agents: still one episode
        (((1, "a", "failed"), (2, "b", "failed"), (3, "a", "join"), (4, "b", "join")), 1),
        # the member's own view of itself is not a failure
        (((1, "x", "failed"),), 0),
        # out of order in the list: sorted by time first
        (((6, "b", "join"), (5, "b", "failed"), (2, "a", "join"), (1, "a", "failed")), 2),
    ],
)
def test_failure_episodes_count_each_span_once_however_many_agents_saw_it(
    rows: tuple[tuple[float, str, str], ...], episodes: int
) -> None:
    assert failure_episodes(events(*rows), "x") == episodes


@pytest.mark.parametrize(
    ("profile", "members", "low", "high"),
    [
        ("lan", 5, 4.0, 24.0),  # log10(5) < 1: the scale stays 1
        ("lan", 10, 4.0, 24.0),
        ("local", 5, 3.0, 18.0),
        ("local", 100, 6.0, 36.0),
    ],
)
def test_suspicion_timeout_bounds_follow_memberlist(profile: str, members: int, low: float, high: float) -> None:
    assert suspicion_timeout(profile, members) == pytest.approx((low, high))
