"""The observer seam: what the protocol roles report as they work, for metrics.

The roles call one short method per fact (a probe ended, a suspicion started, a vote was
cast, a refresh finished); the runtime wires an implementation (``silo.observability``
exports them to Prometheus). The protocol never imports an exporter: without one it calls
``NULL_OBSERVER``, which does nothing. Facts the runtime sees by itself (table calls, gossip,
the view version, the health score) are not reported here.

Every method must be cheap and must not raise: it runs on the event loop, inside the probe
and vote paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from membership_tables import SiloAddress

if TYPE_CHECKING:
    from silo.membership.probing import ProbeOutcome
    from silo.membership.votes import VoteOutcome


class MembershipObserver(Protocol):
    """Receives the protocol's facts; ``NullObserver`` is the do-nothing default."""

    def probe_completed(self, target: SiloAddress, outcome: ProbeOutcome, seconds: float) -> None:
        """A direct probe of ``target`` ended with ``outcome`` after ``seconds`` (its round trip)."""

    def suspicion_started(self, target: SiloAddress) -> None:
        """This silo started to suspect ``target`` (silent or refusing long enough)."""

    def indirect_round_completed(self, target: SiloAddress, intermediaries: int, vetoed: bool) -> None:
        """``intermediaries`` silos were asked to ping ``target``; ``vetoed`` if any reached it."""

    def vote_completed(self, target: SiloAddress, outcome: VoteOutcome) -> None:
        """A vote against ``target`` ended (voted, declared it Dead, lost every race, ...)."""

    def refresh_completed(self, seconds: float) -> None:
        """A full re-read of the table (retries included) took ``seconds``."""

    def refresh_skipped(self) -> None:
        """A periodic refresh read only the table version, found it unchanged and skipped the full read."""

    def gossip_received(self, version: int, applied: bool) -> None:
        """A peer said the table is at ``version``; ``applied`` if we then read a newer version."""


class NullObserver:
    """Observes nothing: the default when no metrics are wanted."""

    def probe_completed(self, target: SiloAddress, outcome: ProbeOutcome, seconds: float) -> None:
        pass

    def suspicion_started(self, target: SiloAddress) -> None:
        pass

    def indirect_round_completed(self, target: SiloAddress, intermediaries: int, vetoed: bool) -> None:
        pass

    def vote_completed(self, target: SiloAddress, outcome: VoteOutcome) -> None:
        pass

    def refresh_completed(self, seconds: float) -> None:
        pass

    def refresh_skipped(self) -> None:
        pass

    def gossip_received(self, version: int, applied: bool) -> None:
        pass


NULL_OBSERVER: MembershipObserver = NullObserver()
