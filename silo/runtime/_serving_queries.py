"""What a silo answers about serving: whether it is fenced, draining, ready, may serve work or
leads, and which keys it owns; ``Silo`` inherits these from ``ServingQueries``, and
``silo.runtime.serving.ServingGuard`` decides them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from membership_tables import SiloAddress
from silo.membership.cleanup import cleanup_leader, leader_order
from silo.membership.table_manager import MembershipTableManager
from silo.runtime.serving import ServingGuard
from silo.work.ownership import OwnershipCheck


class ServingQueries:
    """The serving half of ``Silo``'s public API (its attributes are set by ``Silo.__init__``)."""

    _address: SiloAddress
    _manager: MembershipTableManager
    _serving: ServingGuard
    _draining: bool

    @property
    def fenced(self) -> bool:
        """True while this Active silo's membership lease has run out (``silo.runtime.serving``)."""
        return self._serving.fenced

    @property
    def draining(self) -> bool:
        """True from ``drain()`` (or ``stop()``) on: the silo takes no new work and is not ready."""
        return self._draining

    def readiness(self) -> str | None:
        """Why an orchestrator must not count this silo as ready (``/readyz``); None if it may."""
        return self._serving.readiness(table_down=self._manager.table_down)

    def work_refusal(self) -> str | None:
        """Why this silo must not serve work right now (None: it may)."""
        return self._serving.work_refusal()

    def results_guard(self) -> Callable[[], str | None]:
        """For work that starts now: why its results must be withheld when its handler returns
        (the lease ran out in between), or None (``ServingGuard.results_guard``)."""
        return self._serving.results_guard()

    def is_leader(self) -> bool:
        """Whether this silo is the cluster's leader now: the oldest Active silo of its view, not
        fenced (a fenced silo may have been declared Dead and replaced already), and no older silo
        declared Dead may still be leading (its takeover wait runs, as for its keys)."""
        if self.work_refusal() is not None or cleanup_leader(self._manager.snapshot) != self._address:
            return False
        return not any(leader_order(ghost) < leader_order(self._address) for ghost in self._serving.pending_ghosts())

    def ownership(self) -> OwnershipCheck:
        """The keys this silo may serve now (its serving ring) and the fencing token, frozen for one request."""
        return self._serving.ownership()

    def on_fencing(self, listener: Callable[[bool], Awaitable[None]]) -> None:
        """Await ``listener(True)`` when this silo fences itself and ``listener(False)`` when it unfences."""
        self._serving.on_fencing(listener)
