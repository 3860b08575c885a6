"""Membership events: what changed between two snapshots of the table, as an operator reads it.

``membership_events(old, new, observed_at)`` is the one place events are computed. The silo
runtime logs them (``silo run --log-format json`` makes each a JSON line), the gateways send
them on the ``WatchMembership`` stream, the table-polling client and the dashboard compute
them from their own reads. Every consumer that saw the same two snapshots gets the same events.

The kinds, per silo:

- ``JOINED``: it became Active (from Joining, or first seen Active).
- ``SUSPECTED``: a vote against it appeared, ``by`` its voter, ``at`` the vote's time.
- ``DECLARED_DEAD``: it turned Dead in a write that added a vote (the quorum's last vote);
  ``by`` lists every voter on its row, ``at`` is the last vote's time.
- ``LEFT``: it started to shut down, turned Dead without a new vote (a graceful leave or an
  operator), or its live row vanished.
- ``PROPERTIES_CHANGED``: its advertised properties differ; ``properties`` holds the new ones.

A first snapshot (``old is None``) yields no events: it is the starting state, not a change.
Skipped versions fold together: a silo that joined and was suspected between two reads
yields both events at the newer version.

Only ``membership_tables`` is imported, so every part of ``silo`` may use this module.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus

__all__ = ["EventKind", "MembershipEvent", "membership_events"]

_LIVE = (SiloStatus.JOINING, SiloStatus.ACTIVE)
_LEAVING = (SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)


class EventKind(enum.Enum):
    """What happened to a silo. Wire values (``MembershipEventKind``) are append-only."""

    JOINED = "joined"
    SUSPECTED = "suspected"
    DECLARED_DEAD = "declared_dead"
    LEFT = "left"
    PROPERTIES_CHANGED = "properties_changed"


@dataclass(frozen=True)
class MembershipEvent:
    """One change to one silo, seen at table ``version``."""

    kind: EventKind
    silo: SiloAddress
    name: str
    """The silo's name in its row ("" if it has none)."""
    version: int
    """The table version of the snapshot in which the change was first seen."""
    at: datetime
    """When it happened according to the table: the vote's time for suspicions and deaths,
    the row's IAmAlive time of the write for status changes (the writer's clock)."""
    observed_at: datetime
    """When the observer (a silo, a client, the dashboard) saw it, on its own clock."""
    by: tuple[SiloAddress, ...] = ()
    """The voter of a suspicion; every voter of a death declaration."""
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The new properties, for ``PROPERTIES_CHANGED``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def __reduce__(self) -> tuple[type[MembershipEvent], tuple[object, ...]]:
        fields = (self.kind, self.silo, self.name, self.version, self.at, self.observed_at, self.by)
        return MembershipEvent, (*fields, dict(self.properties))

    def describe(self) -> str:
        """One line for a person, e.g. ``127.0.0.1:5000@1 (silo-1) declared dead by ... at version 7``."""
        who = f"{self.silo} ({self.name})" if self.name else str(self.silo)
        what = self.kind.value.replace("_", " ")
        by = f" by {', '.join(map(str, self.by))}" if self.by else ""
        extra = f" to {dict(self.properties)}" if self.kind is EventKind.PROPERTIES_CHANGED else ""
        return f"{who} {what}{by}{extra} at version {self.version}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; times as ISO 8601 UTC."""
        return {
            "kind": self.kind.value,
            "silo": str(self.silo),
            "name": self.name,
            "version": self.version,
            "at": self.at.isoformat(),
            "observed_at": self.observed_at.isoformat(),
            "by": [str(voter) for voter in self.by],
            "properties": dict(self.properties),
        }


def membership_events(
    old: MembershipTableData | None, new: MembershipTableData, observed_at: datetime
) -> tuple[MembershipEvent, ...]:
    """The events that take ``old`` to ``new``, ordered by silo address then kind; none if ``old`` is None."""
    if old is None or new.version.version <= old.version.version:
        return ()
    before = {entry.silo_address: entry for entry in old.entries}
    events: list[MembershipEvent] = []
    for entry in new.entries:
        events.extend(_row_events(before.pop(entry.silo_address, None), entry, new.version.version, observed_at))
    for gone in before.values():
        if gone.status is not SiloStatus.DEAD:
            events.append(_event(EventKind.LEFT, gone, new.version.version, gone.i_am_alive_time, observed_at))
    return tuple(events)


def _row_events(
    old: MembershipEntry | None, new: MembershipEntry, version: int, observed_at: datetime
) -> list[MembershipEvent]:
    events: list[MembershipEvent] = []
    was = old.status if old is not None else SiloStatus.NONE
    seen = set(old.suspect_times) if old is not None else set()
    added = [vote for vote in new.suspect_times if vote not in seen]
    if new.status is SiloStatus.ACTIVE and was is not SiloStatus.ACTIVE:
        events.append(_event(EventKind.JOINED, new, version, new.i_am_alive_time, observed_at))
    if new.status is SiloStatus.DEAD and was is not SiloStatus.DEAD and added:
        voters = tuple(dict.fromkeys(voter for voter, _ in new.suspect_times))
        last = max(when for _, when in added)
        events.append(_event(EventKind.DECLARED_DEAD, new, version, last, observed_at, by=voters))
        return events
    events.extend(_event(EventKind.SUSPECTED, new, version, when, observed_at, by=(voter,)) for voter, when in added)
    left = (new.status in _LEAVING and was not in _LEAVING) or (
        new.status is SiloStatus.DEAD and was is not SiloStatus.DEAD and was not in _LEAVING
    )
    if old is not None and left:
        events.append(_event(EventKind.LEFT, new, version, new.i_am_alive_time, observed_at))
    if old is not None and new.status in _LIVE and dict(old.properties) != dict(new.properties):
        events.append(
            _event(EventKind.PROPERTIES_CHANGED, new, version, new.i_am_alive_time, observed_at, new.properties)
        )
    return events


def _event(
    kind: EventKind,
    entry: MembershipEntry,
    version: int,
    at: datetime,
    observed_at: datetime,
    properties: Mapping[str, str] | None = None,
    by: tuple[SiloAddress, ...] = (),
) -> MembershipEvent:
    return MembershipEvent(kind, entry.silo_address, entry.silo_name, version, at, observed_at, by, properties or {})
