"""The seams between the protocol logic and the wire.

The protocol roles depend on these protocols only; ``silo.wire.prober``
implement them over gRPC, and unit tests implement them with plain functions
(a scripted partition is a three-line lambda).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Protocol

from membership_tables import MembershipTableData, SiloAddress
from silo.errors import SiloError
from silo.membership.clock import Clock, with_timeout
from silo.membership.lease import MembershipConfirmation
from silo.membership.local_health import MAX_SCORE, LocalHealth, effective_timeout
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipDelta

logger = logging.getLogger(__name__)


class ProbeOutcome(enum.Enum):
    """How one direct probe ended; the detector treats the three differently."""

    ANSWERED = "answered"
    """The target answered, as the incarnation we probed."""
    REFUSED = "refused"
    """Nothing listens at the target's endpoint (connection refused), or another incarnation
    answered: evidence of a crash or a restart, never produced by loss or a partition."""
    TIMED_OUT = "timed_out"
    """No answer in time (or any other failure): silence, which may be loss or a partition."""


@dataclass(frozen=True)
class MonitoredLink:
    """What the parts of one target's monitor share: who probes whom, through what, on which clock."""

    target: SiloAddress
    local: SiloAddress
    options: SiloOptions
    clock: Clock
    prober: Prober
    health: LocalHealth

    def probe_timeout(self) -> float:
        """The probe timeout, lengthened by our local-health score (Lifeguard)."""
        return effective_timeout(self.options.probe_timeout, self.health.score())


@dataclass(frozen=True)
class IndirectProbeResult:
    """What an intermediary reports after pinging a target on our behalf."""

    succeeded: bool
    intermediary_health_score: int
    """The intermediary's own local-health score (0 = healthy); an unhealthy
    intermediary's failed probe means "unknown", not "the target is dead"."""
    response_time: float
    """Seconds the intermediary's ping took."""
    failure_message: str = ""


def bounded_indirect_timeout(requested: float, detection_time: float) -> float:
    """The timeout an indirect probe asked of us really gets: ``requested``, capped.

    The cap is the longest a caller of the same options may honestly ask for: a monitor's round
    watches the target until its silence is a suspicion (``indirect_rounds.ROUND_START``), less
    than its ``detection_time`` lengthened by the worst local-health score (``MAX_SCORE + 1``
    times). A caller asking for hours must not tie up a task and a channel of ours that long.
    ``requested`` must be positive and finite (the server refuses anything else).
    """
    return min(requested, detection_time * (MAX_SCORE + 1))


class Prober(Protocol):
    """Direct and indirect probes of other silos."""

    async def ping(self, target: SiloAddress, timeout: float, known_version: int = 0) -> ProbeOutcome:
        """Ping ``target`` and say how it ended within ``timeout`` seconds; ``known_version`` (a
        joiner's validation ping): the newest table version we know of, which ``target`` takes
        as heard before it answers (0: not said)."""
        ...

    async def ping_on_new_connection(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """Ping ``target`` on a connection opened for this ping alone.

        ``ping`` reuses one connection per target. After a cut heals, that connection's TCP may
        still be waiting out its retransmission backoff (200 ms, 400, 800, 1,600 ...), so its
        pings stay unanswered for up to the cut's length again; a new connection's first packets
        leave at once. Costlier than ``ping`` (a handshake each), so only for silent targets.
        """
        ...

    async def connect(self, target: SiloAddress, timeout: float) -> ProbeOutcome:
        """Open a TCP connection to ``target``'s endpoint and close it at once.

        Says whether the network carries packets to the target's host now and its kernel accepts
        (ANSWERED), nothing listens there (REFUSED), or nothing came back (TIMED_OUT): the path,
        not the silo process, which a stopped process's kernel still accepts for.
        """
        ...

    async def probe_indirectly(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> IndirectProbeResult:
        """Ask ``intermediary`` to ping ``target``; raises or fails if it cannot be asked."""
        ...


async def reached_through(
    prober: Prober, clock: Clock, local: SiloAddress, intermediary: SiloAddress, target: SiloAddress, timeout: float
) -> bool | None:
    """Whether ``intermediary``, asked by ``local`` to ping ``target`` within ``timeout``, reached it:
    True, False (it reported that it did not), or None (no report: it could not be asked, or did
    not report within twice ``timeout``; logged at debug level)."""
    try:
        result = await with_timeout(clock, prober.probe_indirectly(intermediary, target, timeout), 2 * timeout)
    except Exception as exc:
        logger.debug("silo %s: cannot ask %s to probe %s: %r", local, intermediary, target, exc)
        return None
    if not result.succeeded:
        logger.debug(
            "silo %s: %s did not reach %s in %.2fs: %s",
            local, intermediary, target, result.response_time, result.failure_message,
        )  # fmt: skip
    return result.succeeded


@dataclass(frozen=True)
class GossipMessage:
    """ "The table is now at ``version``", with the write that set it when the writer knows it.

    Without ``delta`` a receiver re-reads the table if ``version`` is newer than what it holds.
    ``relay_to``: silos the receiver passes the message on to (bounded fan-out).
    """

    version: int
    delta: MembershipDelta | None = None
    relay_to: tuple[SiloAddress, ...] = ()

    def __post_init__(self) -> None:
        if self.delta is not None and self.delta.version.version != self.version:
            raise ValueError(f"gossip of version {self.version} carries a delta to {self.delta.version.version}")


class NotDeliveredError(SiloError, ConnectionError):
    """A gossip message surely did not reach its target: no connection could be made to it. A
    timeout is not reported this way, although the target most likely did not get the message
    either (see ``Gossiper._send`` for why only this case is re-dealt)."""


class GossipSender(Protocol):
    """Fire-and-forget gossip, and the pull a receiver that fell behind makes from its sender."""

    async def send(self, target: SiloAddress, message: GossipMessage) -> None:
        """Deliver one message; errors are swallowed by the caller. Raises a ``ConnectionError``
        (``NotDeliveredError`` from the wire) only when the message surely did not arrive."""
        ...

    async def fetch_membership(self, target: SiloAddress, timeout: float) -> MembershipTableData:
        """``target``'s current view of the table (GetMembership); raises if it cannot be had."""
        ...

    async def confirm_membership(
        self, target: SiloAddress, timeout: float, known_version: int = 0
    ) -> MembershipConfirmation:
        """Ask ``target`` to read our row from the table (ConfirmMembership), telling it the newest
        table version we know of (``known_version``); raises if it cannot be asked."""
        ...


class MembershipRpcHandler(Protocol):
    """What the gRPC server asks of the local silo when a peer calls it."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def silo_address(self) -> SiloAddress: ...

    def health_score(self) -> int:
        """This silo's local-health score (0 = healthy, larger = worse)."""
        ...

    def hear_of(self, version: int) -> None:
        """A peer's ping says the table has reached ``version`` (a joiner's insert): taken as heard,
        as from gossip, so we vouch for no older view during a table outage."""
        ...

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        """A peer (``sender``, None if it did not say) says the table changed: catch up if we are behind."""
        ...

    async def probe_for_peer(self, target: SiloAddress, timeout: float) -> IndirectProbeResult:
        """Ping ``target`` on a peer's behalf (an indirect probe)."""
        ...

    def membership_snapshot(self) -> MembershipTableData:
        """The latest table snapshot this silo holds."""
        ...

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        """Read ``asker``'s row from the table for it, or say what we know if we cannot (``MembershipConfirmation``).

        ``known_version``: the newest table version the asker knows of; one newer than ours is
        taken as heard (as from gossip), so we vouch for no silo with an older view."""
        ...


async def probe_for_peer(
    prober: Prober,
    clock: Clock,
    options: SiloOptions,
    snapshot: MembershipTableData,
    target: SiloAddress,
    timeout: float,
    health_score: int,
) -> IndirectProbeResult:
    """Watch ``target`` on a peer's behalf (``ProbeIndirectly``) for ``timeout`` seconds, capped
    by ``bounded_indirect_timeout`` (``watch_answers``); ``health_score`` is ours, reported with
    the outcome.

    Only silos of the table: a caller must not make us open (and keep) a channel to any endpoint
    it names, nor use us to scan ports. An honest caller's target is in the table."""
    if snapshot.get(target) is None:
        failure = f"{target} is not in this silo's membership table (version {snapshot.version.version}); not probed"
        return IndirectProbeResult(False, health_score, 0.0, failure)
    timeout = bounded_indirect_timeout(timeout, options.detection_time)
    started = clock.monotonic()
    answered, failure = await watch_answers(prober, clock, target, timeout, options.effective_probe_interval)
    if not answered and not failure:
        failure = f"{target} did not answer within {timeout:.2f}s"
    return IndirectProbeResult(answered, health_score, clock.monotonic() - started, failure)


async def watch_answers(
    prober: Prober, clock: Clock, target: SiloAddress, timeout: float, retry_every: float
) -> tuple[bool, str]:
    """Whether ``target`` answers within ``timeout``, and the first error raised if it did not.

    Each attempt pings on our usual connection and on a new one at once (see
    ``Prober.ping_on_new_connection``), both waiting until the end of ``timeout``: a target that
    is paused answers when it resumes. Pings that fail before then (a connection our channel
    gives up on at once, while it backs off after a cut or a pause) are sent again every
    ``retry_every`` seconds. A refusal ends the watch at once: nothing listens there (a crash)
    or another incarnation does.

    An intermediary is asked because the asker has heard nothing for a while; if the cut between
    them just healed, our own connection to the target may still be backing off too."""
    deadline = clock.monotonic() + timeout
    failure = ""
    while (remaining := deadline - clock.monotonic()) > 0:
        attempt_started = clock.monotonic()
        pings = [
            asyncio.ensure_future(with_timeout(clock, ping(target, remaining), remaining))
            for ping in (prober.ping, prober.ping_on_new_connection)
        ]
        try:
            for finished in asyncio.as_completed(pings):
                try:
                    outcome = await finished
                except TimeoutError:
                    continue
                except Exception as exc:
                    failure = failure or f"{type(exc).__name__}: {exc}"
                    continue
                if outcome is ProbeOutcome.ANSWERED:
                    return True, ""
                if outcome is ProbeOutcome.REFUSED:
                    return False, failure or f"{target} refused"
        finally:
            for ping in pings:
                ping.cancel()
        if (wait := min(attempt_started + retry_every, deadline) - clock.monotonic()) > 0:
            await clock.sleep(wait)
    return False, failure
