"""Packet loss and delay injected in the prober, standing in for ``tc netem`` (benchmarks only).

``LossyProber`` wraps a silo's real ``Prober``. Each direct ping, and each indirect-probe
request, is with probability ``loss`` dropped (nothing is sent; after the call's timeout it
fails as a lost packet would: a miss, or ``IntermediaryUnreachableError`` for an indirect
probe) and otherwise with probability ``delay`` held back for a random time (uniform up to
``max_delay_fraction`` x the timeout) before it is forwarded with what is left of its timeout.
The pings an intermediary sends on a peer's behalf go through the same wrapper, so they are
dropped and delayed too. Gossip is not touched. The RNG is seeded: a run is repeatable up to
scheduling.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from membership_tables import SiloAddress
from silo.membership.probing import IndirectProbeResult, ProbeOutcome, Prober
from silo.wire.prober import INDIRECT_DEADLINE_FACTOR, IntermediaryUnreachableError


@dataclass
class Injected:
    """What the wrapper did so far."""

    forwarded: int = 0
    dropped: int = 0
    delayed: int = 0


class LossyProber:
    """A ``Prober`` that drops a fraction ``loss`` of probes and delays a fraction ``delay`` of the rest."""

    def __init__(
        self,
        inner: Prober,
        loss: float = 0.10,
        delay: float = 0.10,
        seed: int = 0,
        max_delay_fraction: float = 0.8,
    ) -> None:
        for name, value in (("loss", loss), ("delay", delay), ("max_delay_fraction", max_delay_fraction)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value}")
        self._inner = inner
        self._loss = loss
        self._delay = delay
        self._max_delay_fraction = max_delay_fraction
        self._rng = random.Random(seed)
        self.injected = Injected()

    async def ping(self, target: SiloAddress, timeout: float, known_version: int = 0) -> ProbeOutcome:
        remaining = await self._impair(timeout)
        if remaining is None:
            return ProbeOutcome.TIMED_OUT
        return await self._inner.ping(target, remaining, known_version)

    async def ping_on_new_connection(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        remaining = await self._impair(timeout)
        if remaining is None:
            return ProbeOutcome.TIMED_OUT
        return await self._inner.ping_on_new_connection(target, remaining)

    async def connect(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        remaining = await self._impair(timeout)
        if remaining is None:
            return ProbeOutcome.TIMED_OUT
        return await self._inner.connect(target, remaining)

    async def probe_indirectly(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> IndirectProbeResult:
        # The whole call has INDIRECT_DEADLINE_FACTOR x timeout; a delay eats into the intermediary's share.
        remaining = await self._impair(timeout, deadline_factor=INDIRECT_DEADLINE_FACTOR)
        if remaining is None:
            raise IntermediaryUnreachableError(f"cannot ask {intermediary} to probe {target}: request dropped")
        return await self._inner.probe_indirectly(intermediary, target, remaining)

    async def _impair(self, timeout: float, deadline_factor: float = 1.0) -> float | None:
        """Drop (wait out the deadline, return None) or delay the probe; the timeout left to forward it with."""
        draw = self._rng.random()
        if draw < self._loss:
            self.injected.dropped += 1
            await asyncio.sleep(timeout * deadline_factor)
            return None
        if draw < self._loss + self._delay:
            held = self._rng.uniform(0.0, self._max_delay_fraction * timeout)
            self.injected.delayed += 1
            await asyncio.sleep(held)
            self.injected.forwarded += 1
            return timeout - held
        self.injected.forwarded += 1
        return timeout
