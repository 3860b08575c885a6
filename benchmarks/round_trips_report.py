"""docs/benchmarks.md's tables of ``benchmarks.round_trips`` (kept apart from it: that module starts stores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.markdown import header, row


def spread(values: Sequence[int]) -> str:
    """``3``, or ``3-4`` when the repeats differ."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def cell(entry: dict[str, Any]) -> str:
    """A call's round trips, and its requests where they differ (ZooKeeper's pipelined ones)."""
    trips, requests = entry["round_trips"], entry.get("requests", entry["round_trips"])
    return spread(trips) if requests == trips else f"{spread(trips)} ({spread(requests)} requests)"


def round_trips(document: dict[str, Any]) -> list[str]:
    """One row per call, one column per store: its round trips (client flights) on the wire."""
    results: dict[str, Any] = document["results"]
    config = document["config"]
    backends = list(results)
    operations = list(next(iter(results.values()))) if results else []
    lines = [
        f"Round trips per call on a table of {config['rows']} rows, each call counted {config['repeats']} times "
        "after a warm-up (a range where the repeats differ). A vote without mutual TLS is `read_all` and one "
        "`update_rows_with_etags`; under mutual TLS a vote decided on the view is `update_rows_1` alone. A round "
        "trip is a client flight (requests sent before the server answered count once); ZooKeeper's requests are "
        "given too, as kazoo sends pipelined ones one per turn of its loop (how many flights they make varies).",
        "",
        *header("call", *backends),
    ]
    for operation in operations:
        lines.append(row(operation, *(cell(results[b][operation]) for b in backends)))
    lines += ["", "Connections opened within the counted calls (each a TCP handshake more): " + opened(results) + "."]
    return lines


def opened(results: dict[str, Any]) -> str:
    """Per store: no connection, one per request (an HTTP/1.0 test server), or how many per call."""
    parts = []
    for backend, calls in results.items():
        opened = {operation: entry["connections"] for operation, entry in calls.items()}
        if not any(any(counts) for counts in opened.values()):
            parts.append(f"{backend} none")
        elif all(entry["connections"] == entry.get("requests") for entry in calls.values()):
            parts.append(f"{backend} one per request (the test server closes each connection after its answer)")
        else:
            parts.append(f"{backend} " + ", ".join(f"{op} {spread(c)}" for op, c in opened.items() if any(c)))
    return "; ".join(parts)
