"""What ``silo status`` prints: the table as aligned columns for a person, or as JSON.

The JSON document is a stable interface for scripts::

    {"cluster": ..., "version": N, "silo_membership_version": "0.1.0",
     "silos": [{"address": "host:port@gen", "name": ..., "status": "ACTIVE", "proxy_port": ...,
     "start_time": ISO, "i_am_alive_time": ISO, "suspicions": [{"by": "host:port@gen", "at": ISO}],
     "properties": {"key": "value"}}],
     "malformed": [{"key": ..., "reason": ...}]}

``version`` is the table's version; ``silo_membership_version`` the release of the ``silo``
command that printed the document (``silo --version``). ``malformed`` (present only when there
are some) lists the stored rows the read skipped because they cannot be parsed, named as their
store names them, for an admin to repair or delete; the text form lists them under the silos.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from membership_tables import MembershipEntry, MembershipTableData
from membership_tables.codec import format_time, votes_to_json
from silo import __version__

COLUMNS = ("ADDRESS", "NAME", "STATUS", "LAST I-AM-ALIVE", "PROPERTIES", "SUSPICIONS")


def status_document(cluster_id: str, snapshot: MembershipTableData) -> dict[str, Any]:
    """The JSON-ready document of ``snapshot`` (silos in address order)."""
    document: dict[str, Any] = {
        "cluster": cluster_id,
        "version": snapshot.version.version,
        "silo_membership_version": __version__,
        "silos": [_silo_document(entry) for entry in snapshot.entries],
    }
    if snapshot.malformed:
        document["malformed"] = [{"key": row.key, "reason": row.reason} for row in snapshot.malformed]
    return document


def render_json(cluster_id: str, snapshot: MembershipTableData) -> str:
    return json.dumps(status_document(cluster_id, snapshot), indent=2)


def render_text(cluster_id: str, snapshot: MembershipTableData, now: datetime) -> str:
    """Aligned columns, ages relative to ``now``, and a summary line with the version."""
    counts: dict[str, int] = {}
    for entry in snapshot.entries:
        counts[entry.status.name.lower()] = counts.get(entry.status.name.lower(), 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no silos"
    lines = [f"cluster {cluster_id}  version {snapshot.version.version}  ({summary})"]
    if snapshot.rows:
        table = [COLUMNS, *(_row(entry, now) for entry in snapshot.entries)]
        widths = [max(len(row[column]) for row in table) for column in range(len(COLUMNS) - 1)]
        for row in table:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
    if snapshot.malformed:
        lines.append(f"{len(snapshot.malformed)} malformed row(s), skipped by every silo (repair or delete by hand):")
        lines.extend(f"  {row.key}: {row.reason}" for row in snapshot.malformed)
    return "\n".join(lines)


def format_age(seconds: float) -> str:
    """``"4.2s ago"``, ``"3m12s ago"``, ``"2h05m ago"``; a time ahead of ours (clock skew) as ``"1.0s ahead"``."""
    if seconds < 0:
        return format_duration(-seconds) + " ahead"
    return format_duration(seconds) + " ago"


def format_duration(seconds: float) -> str:
    """``"4.2s"``, ``"3m12s"``, ``"2h05m"``, ``"3d04h"``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _silo_document(entry: MembershipEntry) -> dict[str, Any]:
    return {
        "address": str(entry.silo_address),
        "name": entry.silo_name,
        "status": entry.status.name,
        "proxy_port": entry.proxy_port,
        "start_time": format_time(entry.start_time),
        "i_am_alive_time": format_time(entry.i_am_alive_time),
        "suspicions": votes_to_json(entry),
        "properties": dict(entry.properties),
    }


def _row(entry: MembershipEntry, now: datetime) -> tuple[str, str, str, str, str, str]:
    alive = _time_and_age(entry.i_am_alive_time, now)
    properties = ",".join(f"{key}={value}" for key, value in sorted(entry.properties.items()))
    suspicions = ", ".join(f"{voter} at {_time_and_age(when, now)}" for voter, when in entry.suspect_times)
    return (
        str(entry.silo_address),
        entry.silo_name or "-",
        entry.status.name,
        alive,
        properties or "-",
        suspicions or "-",
    )


def _time_and_age(when: datetime, now: datetime) -> str:
    """UTC time to the millisecond and its age, e.g. ``00:15:21.123Z (4.2s ago)``; the date only if not today."""
    date = "" if when.date() == now.date() else when.strftime("%Y-%m-%d ")
    clock = when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    return f"{date}{clock} ({format_age((now - when).total_seconds())})"
