"""What a silo may serve now: fencing by its membership lease, the keys it owns, its claims.

A silo serves only while its lease is valid (``silo.membership.lease``): ``ServingGuard`` logs and
announces each change between fenced and not (health turns NOT_SERVING while fenced), withholds
the results of a handler that outlived the lease, keeps the ownership guard
(``silo.runtime.ownership``) fed with every snapshot, and records what the silo may serve at every
change of it (``silo.runtime.claims``) for the tests that check one owner per key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from membership_tables import SiloAddress, SiloStatus
from silo.membership.clock import Clock
from silo.membership.lease import MembershipLease
from silo.membership.options import SiloOptions
from silo.membership.probing import ProbeOutcome, Prober
from silo.membership.snapshot import MembershipSnapshot
from silo.runtime.claims import ClaimsFile, ServingClaim
from silo.runtime.ownership import OwnershipGuard
from silo.work.ownership import OwnershipCheck

__all__ = ["ServingGuard"]

logger = logging.getLogger(__name__)


class ServingGuard:
    """Fencing, ownership and claims of one silo."""

    def __init__(
        self,
        *,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        lease: MembershipLease,
        status: Callable[[], SiloStatus],
        draining: Callable[[], bool],
        snapshot: Callable[[], MembershipSnapshot],
        snapshots: Callable[[], AsyncIterator[MembershipSnapshot]],
        prober: Prober,
        claims: ClaimsFile | None = None,
    ) -> None:
        """``status``: the silo's own lifecycle status; ``draining``: whether it drains (takes no new
        work); ``snapshot``/``snapshots``: its current view
        and the stream of newer ones; ``claims``: where to record what it may serve (tests)."""
        self._address = address
        self._options = options
        self._clock = clock
        self._lease = lease
        self._status = status
        self._draining = draining
        self._snapshot = snapshot
        self._snapshots = snapshots
        self._prober = prober
        self._claims = claims
        self._ownership = OwnershipGuard(
            address, takeover_wait=options.takeover_wait, monotonic=clock.monotonic, provably_gone=self._gone
        )
        if claims is not None:
            lease.on_confirm = self.record_claim
            self._ownership.on_change = self.record_claim
        self._fenced_since: float | None = None
        self._listeners: list[Callable[[bool], Awaitable[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def fenced(self) -> bool:
        """True while this Active silo's membership lease has run out: the table has not confirmed
        it Active for ``lease_timeout``, so the others may have declared it Dead and moved its keys.
        Checked live, so a silo resuming from a pause is fenced before it serves anything."""
        return self._status() is SiloStatus.ACTIVE and not self._lease.valid()

    def work_refusal(self) -> str | None:
        """Why this silo must not serve work right now: draining, not Active, or fenced (None: it may)."""
        if self._draining():
            return f"silo {self._address} is draining (shutting down); send the batch to another silo"
        status = self._status()
        if status is not SiloStatus.ACTIVE:
            return f"silo {self._address} is {status.name}, not ACTIVE; send the batch to another silo"
        if not self.fenced:
            return None
        return (
            f"silo {self._address} is fenced: the membership table has not confirmed it Active for "
            f"{self._lease.age():.1f}s (lease_timeout {self._options.lease_timeout}s); send the batch to another silo"
        )

    def readiness(self, *, table_down: bool) -> str | None:
        """Why an orchestrator must not count this silo as ready (``/readyz``); None if it may: Active
        in its own view, its lease valid (not fenced), the table reachable, and not draining."""
        refusal = self.work_refusal()
        if refusal is not None:
            return refusal
        if self._snapshot().status_of(self._address) is not SiloStatus.ACTIVE:
            return f"silo {self._address} is not Active in its own view of the table yet"
        if table_down:
            return f"silo {self._address} cannot reach the membership table"
        return None

    def results_guard(self) -> Callable[[], str | None]:
        """A check for work that starts now, to run when its handler returns: why its results must
        be withheld (the lease ran out at some moment in between, so the others may have moved
        its keys and served them), or None if they may be returned."""
        lease, started = self._lease, self._clock.monotonic()

        def withheld() -> str | None:
            if lease.held_since(started):
                return None
            return (
                f"silo {self._address} lost its membership lease while the handler ran "
                f"({self._clock.monotonic() - started:.1f}s; lease_timeout {self._options.lease_timeout}s): "
                "another silo may own these keys now, so the results are withheld; send the batch to another silo"
            )

        return withheld

    def ownership(self) -> OwnershipCheck:
        """The keys this silo may serve now (its serving ring) and the fencing token, frozen for one request."""
        self._ownership.observe(self._snapshot())
        return self._ownership.check()

    def pending_ghosts(self) -> frozenset[SiloAddress]:
        """Silos declared Dead that may still be serving (their takeover wait runs)."""
        self._ownership.observe(self._snapshot())
        return self._ownership.pending_ghosts()

    def hold_own_keys(self, seconds: float) -> None:
        """Serve none of our keys for at least ``seconds`` from now (``OwnershipGuard.hold_own_keys``)."""
        self._ownership.hold_own_keys(seconds)

    def on_fencing(self, listener: Callable[[bool], Awaitable[None]]) -> None:
        """Await ``listener(True)`` when this silo fences itself and ``listener(False)`` when it unfences."""
        self._listeners.append(listener)

    def start(self) -> None:
        """Once Active: watch the lease, and feed every snapshot to the ownership guard."""
        self._tasks = [asyncio.create_task(self._watch_lease()), asyncio.create_task(self._follow_ownership())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._ownership.close()

    def record_claim(self) -> None:
        """Append what we may serve from now on (``silo.runtime.claims``): called at every change of it."""
        if self._claims is None:
            return
        # the ring of the view as it is now, as a request would check it (``ownership``): a
        # lease renewal by a read that brought a newer view is recorded before the task that
        # feeds the guard has run, and with the guard's older ring the claim said what no
        # request could have served (a 2 ms overlap with a joiner's first claim, under load)
        self._ownership.observe(self._snapshot())
        now = self._clock.monotonic()
        ring, ghosts, serving_from, token = self._ownership.claim()
        expires = self._lease.expires_at()
        valid_until = expires if self._status() is SiloStatus.ACTIVE and expires is not None else now
        self._claims.append(
            ServingClaim(
                silo=str(self._address),
                at=now,
                ring=tuple(sorted(str(silo) for silo in ring)),
                ghosts={str(silo): until for silo, until in ghosts.items()},
                serving_from=serving_from,
                valid_until=valid_until,
                token=token,
            )
        )

    async def _watch_lease(self) -> None:
        """Log and announce each change between fenced and not: sleeps until the lease would run
        out, then, while fenced, checks every renewal interval whether a confirmation came."""
        lease = self._lease
        while True:
            remaining = lease.remaining()
            if remaining >= 0:
                await self._clock.sleep(remaining + self._options.lease_renew_interval / 10)
                continue
            if self._fenced_since is None:
                self._fenced_since = self._clock.monotonic()
                logger.warning(
                    "silo %s is fenced: the membership table has not confirmed it Active for %.1fs "
                    "(lease_timeout %ss); it serves no work, leads nothing and votes only on refusals until it does",
                    self._address, lease.age(), self._options.lease_timeout,
                )  # fmt: skip
                await self._announce(True)
            await self._clock.sleep(self._options.lease_renew_interval / 2)
            if lease.valid() and self._fenced_since is not None:
                logger.warning(
                    "silo %s is no longer fenced: the table confirmed it Active again after %.1fs fenced",
                    self._address, self._clock.monotonic() - self._fenced_since,
                )  # fmt: skip
                self._fenced_since = None
                await self._announce(False)

    async def _follow_ownership(self) -> None:
        """Feed every snapshot to the ownership guard as it comes: a death starts its takeover wait
        (and the check whether the dead silo's endpoint refuses) when we learn of it."""
        async for snapshot in self._snapshots():
            self._ownership.observe(snapshot)

    async def _gone(self, silo: SiloAddress) -> bool:
        """Whether ``silo`` provably cannot serve: its endpoint refuses, or another incarnation answers."""
        return await self._prober.ping(silo, self._options.probe_timeout) is ProbeOutcome.REFUSED

    async def _announce(self, fenced: bool) -> None:
        for listener in self._listeners:
            try:
                await listener(fenced)
            except Exception:
                logger.exception("a fencing listener of silo %s failed", self._address)
