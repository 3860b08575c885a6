"""The gossiper: after each table write of ours, send the write (a delta) to every live silo.

A receiver holding the write's base version applies it without reading the table (see
``MembershipTableManager.on_gossip``). Fire-and-forget: failures are logged at debug level
(the periodic refresh is the safety net). A silo the write declared Dead is told too, so it
stops serving at once instead of at its next refresh.

Bounded fan-out over a stable overlay: a silo sends one message to at most ``gossip_fanout``
silos itself and has at most that many sends in flight. With more targets, it lists them in ring
order starting after itself (``ring.ring_order``, ring 0 of the probe rings) and cuts the list into
``gossip_fanout`` contiguous arcs; the first silo of each arc gets the message with the rest of its
arc to relay, and deals them the same way (``relay_plan``). A write thus reaches N silos in about
log_fanout(N) hops with N - 1 messages in all, and no silo opens N channels per write. Arcs, not
random groups: whoever writes, a silo ends up sending to the same few silos (arc heads at fixed
ring distances from it), so its gRPC channels to them stay open. With random groups nearly every
send of a large cluster opened a new channel (and evicted another from the bounded pool): in a
500-silo cluster that was about a thousand channel setups a second, ~1.3 ms of CPU each, more
than the machine had. A receiver relays only to silos its own snapshot knows, so a hostile
sender cannot make it send to arbitrary endpoints.

Join storms: a silo's writes of its own join (its Joining row, then Active) go to everyone
while few silos are joining. Once more than ``gossip_fanout`` rows are Joining (many silos
starting at once) they are not gossiped: N joins would cost N x N messages, and every receiver
would be off the base version of nearly all of them, which in a storm it leaves to the periodic
refresh anyway (``MembershipTableManager.on_gossip``). Everyone sees the joins at its next
periodic refresh (the version moved, so it reads in full). Runs before 2026-11-26 still sent
each such join to ``gossip_fanout`` silos: a 500-silo storm then opened ~300 gRPC channels a
second for messages the receivers dropped. Deaths, votes, leaves and property changes always go
to everyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Sequence

from membership_tables import SiloAddress, SiloStatus
from silo.membership.background import BackgroundTasks
from silo.membership.clock import Clock, with_timeout
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage, GossipSender
from silo.membership.ring import ring_index, ring_order
from silo.membership.snapshot import MembershipSnapshot

logger = logging.getLogger(__name__)

GOSSIP_STATUSES = (SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)


def gossip_targets(
    snapshot: MembershipSnapshot,
    local: SiloAddress,
    is_fresh: Callable[[SiloAddress], bool],
    declared_dead: Iterable[SiloAddress] = (),
) -> list[SiloAddress]:
    """Every other silo alive by status and fresh, then the silos the write declared Dead."""
    live = [
        entry.silo_address
        for entry in snapshot.with_status(*GOSSIP_STATUSES)
        if entry.silo_address != local and is_fresh(entry.silo_address)
    ]
    return live + [silo for silo in declared_dead if silo != local and silo not in live]


def relay_plan(
    targets: Sequence[SiloAddress], fanout: int, last: Collection[SiloAddress] = ()
) -> list[tuple[SiloAddress, tuple[SiloAddress, ...]]]:
    """Whom to send to directly, each with the silos it relays to: at most ``fanout`` direct sends.

    ``targets`` (in the sender's ring order) are cut into ``fanout`` contiguous arcs of near-equal
    length; each arc's first silo relays to the rest of its arc. Silos in ``last`` (those a write
    is about: a vote's target may be dead, and its arc would hear the write only after its send
    failed) head an arc only if the whole arc is theirs.
    """
    if len(targets) <= fanout:
        return [(target, ()) for target in targets]
    size, longer = divmod(len(targets), fanout)
    plan = []
    start = 0
    for arc_index in range(fanout):
        end = start + size + (arc_index < longer)
        arc = targets[start:end]
        ordered = [silo for silo in arc if silo not in last] + [silo for silo in arc if silo in last]
        plan.append((ordered[0], tuple(ordered[1:])))
        start = end
    return plan


def gossip_peers(local: SiloAddress, silos: Iterable[SiloAddress], fanout: int) -> list[SiloAddress]:
    """The silos ``local`` sends its own writes to itself: the heads of its arcs (``relay_plan``)."""
    return [head for head, _ in relay_plan(list(ring_index(tuple(silos)).following(local)), fanout)]


class Gossiper:
    """Sends "the table is at version V" to the live silos after each write of ours."""

    def __init__(
        self,
        *,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        sender: GossipSender,
        is_fresh: Callable[[SiloAddress], bool],
    ) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._sender = sender
        self._is_fresh = is_fresh
        self._in_flight = asyncio.Semaphore(options.gossip_fanout)
        self._sends = BackgroundTasks()

    def publish(
        self, message: GossipMessage, snapshot: MembershipSnapshot, declared_dead: tuple[SiloAddress, ...] = ()
    ) -> None:
        """Send ``message`` (our write) to every live silo of ``snapshot`` and to the silos it declared Dead."""
        if not self._options.use_liveness_gossip:
            return
        targets = gossip_targets(snapshot, self._address, self._is_fresh, declared_dead)
        relays = [silo for silo in targets if silo not in declared_dead]  # a dead silo relays nothing
        if self._is_own_join(message) and snapshot.in_join_storm(self._options):
            logger.debug(
                "silo %s: its join (version %d) is left to the refresh: join storm", self._address, message.version
            )
            return
        self._deal(message, relays)
        for silo in targets:
            if silo in declared_dead:
                self._send_soon(silo, message)

    def _is_own_join(self, message: GossipMessage) -> bool:
        """Whether ``message`` is our own write of our row as Joining or Active."""
        rows = message.delta.rows if message.delta is not None else ()
        return bool(rows) and all(
            entry.silo_address == self._address and entry.status in (SiloStatus.JOINING, SiloStatus.ACTIVE)
            for entry, _ in rows
        )

    def relay(self, message: GossipMessage, snapshot: MembershipSnapshot) -> None:
        """Pass a received ``message`` on to the silos it asks us to relay to (those our ``snapshot`` knows)."""
        if not message.relay_to:
            return
        in_delta = message.delta.silos if message.delta else frozenset()
        known = [
            silo
            for silo in message.relay_to
            if silo != self._address and (silo in in_delta or snapshot.entry(silo) is not None)
        ]
        if len(known) < len(message.relay_to):
            logger.debug(
                "silo %s: gossip of version %d asked to relay to %d silos it does not know; skipped",
                self._address, message.version, len(message.relay_to) - len(known),
            )  # fmt: skip
        self._deal(GossipMessage(message.version, message.delta), known)

    def _deal(self, message: GossipMessage, targets: Sequence[SiloAddress]) -> None:
        """Send to ``targets`` through the relay tree of our ring order (``relay_plan``)."""
        changed = message.delta.silos if message.delta is not None else frozenset()
        for target, relay_to in relay_plan(ring_order(self._address, targets), self._options.gossip_fanout, changed):
            self._send_soon(target, GossipMessage(message.version, message.delta, relay_to))

    def _send_soon(self, target: SiloAddress, message: GossipMessage) -> None:
        self._sends.spawn(self._send(target, message))

    async def _send(self, target: SiloAddress, message: GossipMessage) -> None:
        """Send ``message``; if ``target`` was to relay it and surely did not get it, deal its arc out ourselves.

        Only then. A timeout usually means the relay did not get the message either (gRPC never
        runs a handler whose deadline passed while the receiver's loop was stalled), so its arc
        misses the write and catches up at its next one or at its periodic refresh: about 65
        silos per death read the table in full at 1,000 silos. Re-dealing on timeouts too was
        tried once more and taken out again after three 1,000-silo storms melted down; a
        fourth melted down without it, so that was not the cause (a profile showed the joiners'
        validation rounds, each a read of the whole table). Re-dealing on timeouts may well be
        the better rule: it is to be measured again once storms no longer melt down.
        """
        async with self._in_flight:
            try:
                await self._sender.send(target, message)
                return
            except ConnectionError as exc:  # not delivered (``NotDeliveredError``): nothing listens there
                failure: Exception = exc
                undelivered = True
            except Exception as exc:  # fire-and-forget: the periodic refresh covers a lost gossip
                failure, undelivered = exc, False
            logger.debug(
                "silo %s: gossip of version %d to %s failed: %r", self._address, message.version, target, failure
            )
        if message.relay_to and undelivered:  # the relay is down: deal its arc out ourselves
            self._deal(GossipMessage(message.version, message.delta), message.relay_to)

    async def stop(self, drain: float = 0.0) -> None:
        """Stop sending: first give the sends under way (re-deals of failed relays included) up to
        ``drain`` seconds to finish.

        A silo that leaves gossips its ShuttingDown and Dead rows and stops right after: without
        the drain, the sends still queued were cancelled, and the silos they were for (and their
        relay arcs) kept a left silo in their views until their next table refresh (two of 19
        for 12 and 18 s in one of eight leaves measured at N = 20).
        """
        if drain > 0:
            with contextlib.suppress(TimeoutError):
                await with_timeout(self._clock, self._sends.finished(), drain)
        await self._sends.cancel_all()
