"""A silo's generation: its start time, but strictly newer than any earlier one at its endpoint.

The generation orders incarnations of one ``host:port``: a newer generation supersedes an
older one (the older is declared Dead on join; a silo that finds a newer one terminates). The
wall clock can step back (NTP, a VM restored from a snapshot), which would make a restarted
process look *older* than the one it replaces, so it would terminate itself at once. Taking
the later of the clock and one past the newest generation already in the table keeps the
order strictly increasing whatever the clock does.
"""

from __future__ import annotations

from collections.abc import Iterable

from membership_tables import SiloAddress


def next_generation(wall_clock_ms: int, host: str, port: int, known: Iterable[SiloAddress]) -> int:
    """The generation for a new silo at ``host:port``, given the silos the table already holds."""
    previous = [silo.generation for silo in known if silo.host == host and silo.port == port]
    return max([wall_clock_ms, *(generation + 1 for generation in previous)])
