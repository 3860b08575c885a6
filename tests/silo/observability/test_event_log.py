"""``log_membership_events``: one INFO line per event, and no comparing while INFO is off."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from silo.membership.snapshot import MembershipSnapshot
from silo.observability import event_log
from silo.observability.event_log import log_membership_events
from tests.silo.test_events import SEEN, A, B, C, data, row


async def stream(*snapshots: MembershipSnapshot) -> AsyncIterator[MembershipSnapshot]:
    for snapshot in snapshots:
        yield snapshot


def test_events_are_logged_at_info_and_not_compared_while_info_is_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = MembershipSnapshot(data(1, row(A)))
    second = MembershipSnapshot(data(2, row(A), row(B)))
    third = MembershipSnapshot(data(3, row(A), row(B), row(C)))
    with caplog.at_level(logging.INFO, logger="silo.events"):
        asyncio.run(log_membership_events(stream(first, second), lambda: SEEN, A))
    assert [record.event["kind"] for record in caplog.records] == ["joined"]  # type: ignore[attr-defined]
    caplog.clear()

    def no_diff(*_: object) -> tuple[object, ...]:
        raise AssertionError("snapshots compared while silo.events is off")

    monkeypatch.setattr(event_log, "membership_events", no_diff)
    with caplog.at_level(logging.WARNING, logger="silo.events"):
        asyncio.run(log_membership_events(stream(first, second, third), lambda: SEEN, A))
    assert caplog.records == []


def test_an_event_carries_the_time_the_view_changed_not_the_time_it_was_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    changed = SEEN - timedelta(seconds=3)
    first = MembershipSnapshot(data(1, row(A)))
    second = MembershipSnapshot(data(2, row(A), row(B)), observed_at=changed)
    with caplog.at_level(logging.INFO, logger="silo.events"):
        asyncio.run(log_membership_events(stream(first, second), lambda: SEEN, A))
    assert [record.event["observed_at"] for record in caplog.records] == [changed.isoformat()]  # type: ignore[attr-defined]
