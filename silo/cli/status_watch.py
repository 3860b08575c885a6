"""``silo status --watch``: redraw the table whenever the cluster changes.

Version-driven, not a busy loop: the table is read every ``--interval`` (a sleep in between),
and a frame is drawn only when the version moved or a row changed (a heartbeat counts: the
IAmAlive column moves), or when the table's reachability changed. With ``--json`` a heartbeat
alone draws nothing (``membership_key``: one line per membership change, for scripts and log
shippers) unless ``--heartbeats``. On a terminal each frame replaces the previous one; piped,
frames follow each other separated by a blank line (with ``--json``, one JSON document per line).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime

from membership_tables import MembershipTableData, MembershipTableError

CLEAR_SCREEN = "\x1b[H\x1b[2J"


@dataclass(frozen=True)
class Frame:
    """What was last drawn: the table's content (or the error) that the frame showed."""

    key: Hashable
    text: str


def frame_key(data: MembershipTableData) -> Hashable:
    """What must change for a redraw: the version, every row (etags aside) and the malformed rows."""
    return data.version.version, data.entries, data.malformed


def membership_key(data: MembershipTableData) -> Hashable:
    """What must change for a redraw when heartbeats do not count: ``frame_key`` without IAmAlive times."""
    epoch = datetime.fromtimestamp(0, UTC)
    entries = tuple(entry.with_i_am_alive_time(epoch) for entry in data.entries)
    return data.version.version, entries, data.malformed


def watch(
    read: Callable[[], MembershipTableData],
    render: Callable[[MembershipTableData], str],
    write: Callable[[str], None],
    sleep: Callable[[float], bool],
    interval: float,
    describe_error: Callable[[MembershipTableError], str] = str,
    key: Callable[[MembershipTableData], Hashable] | None = None,
) -> int:
    """Read, draw on change, ``sleep(interval)``; until ``sleep`` returns True (stop). Returns frames drawn.

    ``key`` says what counts as a change (default ``frame_key``: heartbeats included)."""
    key = key or frame_key
    last: Frame | None = None
    drawn = 0
    while True:
        try:
            data = read()
        except MembershipTableError as exc:
            frame = Frame(("error", describe_error(exc)), describe_error(exc))
        else:
            frame = Frame(key(data), render(data))
        if last is None or frame.key != last.key:
            write(frame.text)
            drawn += 1
            last = frame
        if sleep(interval):
            return drawn
