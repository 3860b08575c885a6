"""The membership lease: how long a silo may act as a member without hearing from the table.

A silo is a member only as long as the table says so, and the others may declare it Dead at
any moment. The lease bounds how long it can go on serving after that without knowing: it
is *confirmed* by every table call that shows this silo's own row Active, and it runs out
``lease_timeout`` seconds (on this silo's monotonic clock) after the **start** of the last such
call. A confirmation is anchored at the call's start, not its end, because the call may have
been linearized anywhere in between: anchored at the start, the anchor precedes a moment at
which the table held the row Active, so it precedes any Dead write of it.

That gives the one inequality the takeover wait (``takeover_wait``) rests on: a silo declared
Dead at real time ``T`` is fenced by ``T + lease_timeout / (1 - rho)``, where ``rho`` bounds
how much faster or slower than real time any silo's clock runs (``max_clock_drift``). A new
owner that learns of the death at ``t >= T`` and waits ``W`` on its own clock, at least
``W * (1 - rho)`` of real time, starts after the old one is fenced when
``W >= lease_timeout / (1 - rho) ** 2``; ``takeover_wait`` rounds that up to
``lease_timeout * (1 + rho) / (1 - rho) ** 2``. No synchronized clocks are assumed: only rates.

A silo whose lease ran out is *fenced*: it serves no work, is not leader and casts no votes
until a confirmation comes. The lease is checked before each request rather than by a timer
alone, so a silo resuming from a pause (GC, SIGSTOP, a stalled VM) is fenced before it serves
anything.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MembershipLease", "takeover_wait"]


def takeover_wait(lease_timeout: float, max_clock_drift: float) -> float:
    """Seconds a new owner waits, on its own clock, after it learned of a death and before it
    serves the dead silo's keys: by then the dead silo is fenced (module docstring)."""
    return lease_timeout * (1 + max_clock_drift) / (1 - max_clock_drift) ** 2


class MembershipLease:
    """The time of the last table confirmation and whether it is still good."""

    def __init__(self, timeout: float, monotonic: Callable[[], float]) -> None:
        self._timeout = timeout
        self._monotonic = monotonic
        self._anchor: float | None = None

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def anchor(self) -> float | None:
        """The start (monotonic) of the newest call that confirmed us Active; None before the first."""
        return self._anchor

    def confirm(self, started_at: float) -> bool:
        """A table call started at ``started_at`` showed our row Active; True if that renews the lease."""
        if self._anchor is not None and started_at <= self._anchor:
            return False
        self._anchor = started_at
        return True

    def age(self) -> float:
        """Seconds since the anchor (infinite before the first confirmation)."""
        if self._anchor is None:
            return float("inf")
        return self._monotonic() - self._anchor

    def valid(self) -> bool:
        """Whether the lease is still good now (checked live: a pause cannot skip it)."""
        return self.age() <= self._timeout

    def remaining(self) -> float:
        """Seconds until the lease runs out (negative once it has)."""
        return self._timeout - self.age()
