"""The dashboard's document: what the page shows, computed from table reads.

Pure functions of a snapshot, the options and ``now``: the silos with their status and
heartbeat age, the probe graph (each Active silo's targets on the ``num_probed_silos`` rings,
from ``silo.membership.ring``, the code the silos themselves run), the fresh suspicions with
their voters and age, and table-latency figures of the dashboard's own reads. The timeline is
a list of ``silo.events.MembershipEvent`` kept by the monitor.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from membership_tables import MembershipEntry, MembershipTableData, SiloStatus
from membership_tables.codec import format_time
from silo.events import MembershipEvent
from silo.hashing import ring_position
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets
from silo.membership.votes import fresh_votes

RING_SIZE = 2**64


def silo_document(entry: MembershipEntry, now: datetime) -> dict[str, Any]:
    return {
        "address": str(entry.silo_address),
        "name": entry.silo_name,
        "status": entry.status.name,
        "host": entry.host_name,
        "proxy_port": entry.proxy_port,
        "start_time": format_time(entry.start_time),
        "i_am_alive_time": format_time(entry.i_am_alive_time),
        "i_am_alive_age_s": round((now - entry.i_am_alive_time).total_seconds(), 3),
        "properties": dict(entry.properties),
        "ring_angle": round(360 * ring_position(entry.silo_address, 0) / RING_SIZE, 3),
    }


def probe_edges(data: MembershipTableData, options: SiloOptions) -> list[dict[str, Any]]:
    """Who probes whom: each Active silo's successors on the rings (``ring.probe_targets``)."""
    active = [entry.silo_address for entry in data.entries if entry.status is SiloStatus.ACTIVE]
    return [
        {"from": str(prober), "to": str(target), "ring": ring}
        for prober in active
        for ring, target in enumerate(probe_targets(prober, active, options.num_probed_silos))
    ]


def suspicions(data: MembershipTableData, options: SiloOptions, now: datetime) -> list[dict[str, Any]]:
    """The fresh votes against silos not yet Dead: who suspects whom, since when."""
    found = []
    for entry in data.entries:
        if entry.status is SiloStatus.DEAD:
            continue
        for voter, when in fresh_votes(entry.suspect_times, now, options.death_vote_expiration):
            found.append(
                {
                    "silo": str(entry.silo_address),
                    "name": entry.silo_name,
                    "by": str(voter),
                    "at": format_time(when),
                    "age_s": round((now - when).total_seconds(), 3),
                }
            )
    return found


def latency_document(samples: Sequence[float]) -> dict[str, Any]:
    """Figures of the dashboard's own ``read_all`` latencies (seconds, most recent last)."""
    if not samples:
        return {"reads": 0}
    ordered = sorted(samples)
    return {
        "reads": len(samples),
        "last_ms": round(samples[-1] * 1000, 2),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "recent_ms": [round(sample * 1000, 2) for sample in samples[-60:]],
    }


def dashboard_document(
    *,
    cluster_id: str,
    data: MembershipTableData | None,
    options: SiloOptions,
    now: datetime,
    timeline: Iterable[MembershipEvent],
    latencies: Sequence[float],
    error: str = "",
) -> dict[str, Any]:
    """Everything the page shows, JSON-ready."""
    entries = sorted(data.entries, key=lambda entry: entry.silo_address) if data is not None else []
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.status.name] = counts.get(entry.status.name, 0) + 1
    return {
        "cluster": cluster_id,
        "version": data.version.version if data is not None else None,
        "now": format_time(now),
        "error": error,
        "counts": counts,
        "silos": [silo_document(entry, now) for entry in entries],
        "probes": probe_edges(data, options) if data is not None else [],
        "num_probed_silos": options.num_probed_silos,
        "suspicions": suspicions(data, options, now) if data is not None else [],
        "malformed": [{"key": row.key, "reason": row.reason} for row in data.malformed] if data is not None else [],
        "timeline": [event.to_json() for event in reversed(list(timeline))],
        "table_latency": latency_document(latencies),
    }
