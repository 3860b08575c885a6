"""Garbage-collector settings for a process whose job is to run silos (``silo run``, and the
scale benchmark's host processes), not for a library user's process.

CPython's cyclic collector runs a young-generation pass every 700 net allocations of tracked
objects and promotes what survives; a silo process keeps thousands of long-lived objects (its
views of the table: one entry, address and timestamp per row, replaced on every change), which
the older passes then walk again and again. Measured with ``gc.callbacks`` in a 500-silo join
storm (20 processes of 25 silos): ~5 s of collector time per second summed over the processes
at its peak, the largest single cost after gRPC itself; with these settings, under 1 s.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold``: a young pass every 50,000 net allocations (most objects of a call are
freed by reference counting long before), an older pass every 20 of those, a full pass every 100
older ones (CPython also waits until a quarter of the long-lived objects are new)."""


def tune_for_silos() -> None:
    """Collect less often: call once when the process starts."""
    gc.set_threshold(*THRESHOLDS)


def freeze_startup_objects() -> None:
    """Move everything alive now (modules, servers, the joined silos) out of the collector's
    scans for good: call once the silos have joined. Objects frozen are still freed by reference
    counting; only a cycle among them that becomes garbage would stay."""
    gc.freeze()
