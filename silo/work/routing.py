"""Routing keyed records to the silo that owns each key, in batches, surviving silos that die.

A ``Router`` is what one Spark task (or any worker) uses: it holds a ``ClusterView``, hashes
each record's key onto a ``HashRing`` of the view's Active silos, buffers records per owner and
sends full buffers through a ``Send`` function (in production ``SyncWorkClient.process``; in
tests, any function), with the version of the view the batch was grouped on: a silo behind that
view catches up before it serves the batch (``view_version``). It is pure routing: no Spark, no gRPC.

**Failover.** When a send raises ``WorkUnavailableError`` (the silo is unreachable, not Active,
or timed out), the router

1. stops sending to that silo for the rest of its life (it *excludes* it),
2. re-reads the view through ``refresh`` and adopts it only if its version is newer,
3. regroups the failed batch by each key's owner on the ring without the excluded silos and
   sends again.

Removing a silo from a consistent-hash ring moves exactly its keys, each to the next silo
clockwise, which is the owner the key will have once the cluster declares the silo Dead. So
an executor that notices a death before the cluster does already routes the way the cluster
will, and only the dead silo's keys move. A batch that fails ``max_attempts`` times, or finds
no live silo to go to (after waiting ``backoff`` between tries), raises ``NoLiveSiloError``.
Handler errors (``WorkError``) are not retried: they propagate at once.

Every record yields exactly one ``Routed`` result, the first successful one: a batch is
retried only as a whole and only after its send failed, so the output neither loses nor
duplicates records. Delivery to silos is *at least once*, though: a silo may have run the
handler before its reply was lost, so handlers must be idempotent.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from membership_tables import MembershipTableError, SiloAddress
from silo.client.errors import MembershipClientError
from silo.client.topology import ClusterView, ViewTracker
from silo.errors import SiloError
from silo.work.client import WorkError, WorkNotOwnedError, WorkUnavailableError
from silo.work.hashring import DEFAULT_VIRTUAL_NODES, HashRing
from silo.work.shards import Deferred, Delivery, PendingCall, R, Record, Records, Routed, S, Shard, Submit
from silo.work.sidecar import SidecarLocator

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ATTEMPTS",
    "Delivery",
    "NoLiveSiloError",
    "PendingCall",
    "Record",
    "Routed",
    "Router",
    "Send",
    "Shard",
    "Submit",
    "check_positive_int",
    "exponential_backoff",
]

log = logging.getLogger(__name__)

K = TypeVar("K")


class Send(Protocol):
    """``send(silo, handler, items, view_version=V) -> results``: one result per item, in order.

    ``view_version`` is the table version of the router's view when the batch was grouped; pass
    it on to the silo (``SyncWorkClient.process(..., view_version=...)``), which catches up with
    that view before it serves, or refuses the keys it does not own there. Raises
    ``WorkUnavailableError`` when the caller should try another silo."""

    def __call__(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], /, *, view_version: int
    ) -> Sequence[bytes]: ...


DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_ATTEMPTS = 5
"""Failed sends in a row per batch before giving up; each failure removes one silo, so five
covers a batch whose owner and next four owners all die during one task."""

DEFAULT_FAILOVER_TIMEOUT = 120.0
"""Seconds a batch may keep failing before giving up. A dead owner's keys are served again
once the cluster declared it Dead and, unless its endpoint refuses connections, its lease ran
out (production: 15 s of silence, a vote, ``takeover_wait`` 10.3 s); a few times that."""

MAX_REFUSAL_BACKOFF = 1.0
"""The longest pause before retrying keys a silo does not serve yet."""


class NoLiveSiloError(SiloError):
    """No live silo could take a batch: the view has none, or every try failed."""


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is a positive int; else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def exponential_backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based) when no silo is live: 0.2, 0.4, 0.8, ... at most 5."""
    return float(min(5.0, 0.2 * 2 ** (attempt - 1)))


@dataclass
class _Tries:
    """A batch's failed tries: every one (for the error), the failures in a row that ownership
    refusals did not interrupt (``max_attempts`` counts those) and when the first one came."""

    failures: list[str] = field(default_factory=list)
    streak: int = 0
    refusals: int = 0
    """Ownership refusals of the batch so far (``WorkNotOwnedError``): the backoff grows with them."""
    since: float | None = None


@dataclass
class _Part(Generic[S]):
    """A shard with each record's first owner (index into the first ring) and its batch's failed tries."""

    shard: S
    first: npt.NDArray[np.int64]
    failures: _Tries

    def __len__(self) -> int:
        return len(self.shard)

    def take(self, indices: npt.NDArray[np.int64]) -> _Part[S]:
        return _Part(self.shard.take(indices), self.first[indices], self.failures)

    def extend(self, others: Sequence[_Part[S]]) -> _Part[S]:
        firsts = [self.first, *(other.first for other in others)]
        return _Part(self.shard.extend([other.shard for other in others]), np.concatenate(firsts), self.failures)


@dataclass
class _Buffer(Generic[S]):
    ring: HashRing
    """The ring the parts were grouped on: if it changed, they are regrouped before sending."""
    parts: list[_Part[S]]
    size: int = 0


@dataclass
class _Call(Generic[S, R]):
    silo: SiloAddress
    part: _Part[S]
    pending: PendingCall[R]


class Router(Generic[K]):
    """Routes records of one task to their owners' silos; see the module docstring.

    ``sidecar`` is the local silo's advertised ``host:port`` (or ``host:port@generation``),
    typically from ``SILO_SIDECAR_ADDRESS``, or a ``SidecarLocator`` that finds it by host
    (``silo.work.sidecar``): the Active silo of the view it names is the local sidecar, and
    records it owns are reported ``via_sidecar``. ``sleep`` and
    ``backoff`` are injectable so tests never wait.

    ``route`` sends ``Record`` items through ``send``, one call at a time; ``dispatch`` is the
    engine under it, for any ``Shard`` (e.g. Arrow batches) and several calls in flight.
    """

    def __init__(
        self,
        view: ClusterView,
        handler: str,
        send: Send | None,
        refresh: Callable[[], ClusterView],
        *,
        sidecar: str | SidecarLocator | None = None,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Callable[[int], float] = exponential_backoff,
        sleep: Callable[[float], None] = time.sleep,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``send`` is needed by ``route`` only (``dispatch`` takes its own ``submit``).
        ``failover_timeout``: how long a batch may keep failing (silos unavailable, keys not
        served yet while the cluster moves them) before ``NoLiveSiloError``."""
        check_positive_int("max_attempts", max_attempts)
        if not failover_timeout > 0:
            raise ValueError(f"failover_timeout must be a positive number of seconds, got {failover_timeout!r}")
        self._failover_timeout = failover_timeout
        self._monotonic = monotonic
        self._handler = handler
        self._send = send
        self._refresh = refresh
        if isinstance(sidecar, str):
            sidecar = SidecarLocator.at(sidecar) if sidecar.strip() else None
        self._sidecar_locator = sidecar
        self._virtual_nodes = virtual_nodes
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._sleep = sleep
        self._tracker = ViewTracker(view.cluster_id)
        self._tracker.offer(view)
        self._view = view
        self._first_ring = HashRing(view.addresses, virtual_nodes)
        self._first_index = {address: index for index, address in enumerate(self._first_ring.addresses)}
        self._excluded: set[SiloAddress] = set()
        self._ring = self._first_ring
        self._sidecar = self._find_sidecar()

    @property
    def view(self) -> ClusterView:
        """The newest view this router has seen."""
        return self._view

    @property
    def excluded(self) -> frozenset[SiloAddress]:
        """Silos this router stopped sending to because a send to them failed."""
        return frozenset(self._excluded)

    @property
    def sidecar(self) -> SiloAddress | None:
        """The local sidecar silo in the current view, if ``sidecar`` was given and it is Active."""
        return self._sidecar

    def owner(self, key: str) -> SiloAddress | None:
        """Where ``key`` goes now: its owner among the view's Active silos not excluded; None if there is none."""
        return self._ring.owner(key) if len(self._ring) else None

    def route(self, records: Iterable[Record[K]], batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[Routed[K]]:
        """Send every record to its owner in batches of up to ``batch_size`` per silo; yield each result once.

        Records are buffered per owner; a full buffer is sent at once and the rest at the end,
        so results come back grouped by silo, not in input order.
        """
        check_positive_int("batch_size", batch_size)
        send = self._send
        if send is None:
            raise TypeError("Router.route needs the send function given to Router(...); dispatch takes submit")

        def submit(silo: SiloAddress, shard: Records[K]) -> Deferred[Sequence[bytes]]:
            items = [(record.key, record.payload) for record in shard.records]
            return Deferred(partial(send, silo, self._handler, items, view_version=self._view.version))

        shards = (Records(list(chunk)) for chunk in _chunks(records, batch_size))
        for delivery in self.dispatch(shards, submit, batch_size):
            for record, result, moved in zip(
                delivery.shard.records, delivery.results, delivery.rerouted.tolist(), strict=True
            ):
                yield Routed(record.value, result, delivery.silo, moved, delivery.via_sidecar)

    def dispatch(
        self, shards: Iterable[S], submit: Submit[S, R], batch_size: int = DEFAULT_BATCH_SIZE, in_flight: int = 1
    ) -> Iterator[Delivery[S, R]]:
        """Send every record of ``shards`` to its owner, up to ``batch_size`` per call and ``in_flight``
        calls at once; yield each shard piece's results once, as calls complete.

        Records are grouped by owner and buffered per silo; a buffer is sent once it holds
        ``batch_size`` records, the rest at the end. A failed call's records are regrouped on
        the ring without its silo and sent again at once.
        """
        check_positive_int("batch_size", batch_size)
        check_positive_int("in_flight", in_flight)
        buffers: dict[SiloAddress, _Buffer[S]] = {}
        calls: deque[_Call[S, R]] = deque()
        try:
            for shard in shards:
                if not len(shard):
                    continue
                part = _Part(shard, self._first_ring.owner_indices(shard.keys), _Tries())
                for silo, piece in self._group(part):
                    buffer = buffers.get(silo)
                    if buffer is None or buffer.ring is not self._ring:
                        if buffer is not None:
                            self._flush(silo, buffer, batch_size, calls, submit, everything=True)
                        buffer = buffers[silo] = _Buffer(self._ring, [])
                    buffer.parts.append(piece)
                    buffer.size += len(piece)
                    if buffer.size >= batch_size:
                        self._flush(silo, buffer, batch_size, calls, submit, everything=False)
                    while len(calls) >= in_flight:
                        yield from self._complete(calls.popleft(), calls, submit)
            for silo, buffer in buffers.items():
                self._flush(silo, buffer, batch_size, calls, submit, everything=True)
                while len(calls) >= in_flight:
                    yield from self._complete(calls.popleft(), calls, submit)
            buffers.clear()
            while calls:
                yield from self._complete(calls.popleft(), calls, submit)
        finally:
            for call in calls:
                call.pending.cancel()

    def _flush(
        self,
        silo: SiloAddress,
        buffer: _Buffer[S],
        batch_size: int,
        calls: deque[_Call[S, R]],
        submit: Submit[S, R],
        *,
        everything: bool,
    ) -> None:
        """Send the buffer's full batches (and with ``everything`` its remainder); keep the rest in it.

        The buffer's records are ``silo``'s on ``buffer.ring``; if the ring changed since (a silo
        failed, a newer view came), they are regrouped by their owners now.
        """
        if not buffer.parts:
            return
        first, *others = buffer.parts
        joined = first.extend(others) if others else first
        size = len(joined.shard)
        cut = size if everything else size - size % batch_size
        for start in range(0, cut, batch_size):
            piece = joined.take(np.arange(start, min(start + batch_size, cut), dtype=np.int64))
            same_ring = buffer.ring is self._ring
            for owner, part in [(silo, piece)] if same_ring else self._group(piece):
                calls.append(_Call(owner, part, submit(owner, part.shard)))
        buffer.parts = [joined.take(np.arange(cut, size, dtype=np.int64))] if cut < size else []
        buffer.size = size - cut

    def _complete(self, call: _Call[S, R], calls: deque[_Call[S, R]], submit: Submit[S, R]) -> Iterator[Delivery[S, R]]:
        """Wait for ``call``: yield its delivery, or fail over and queue its records again."""
        try:
            results = call.pending.result()
        except WorkNotOwnedError as exc:
            # The silo does not own these keys yet: their owner is still Active in its view, or was
            # declared Dead and may still serve them until its lease runs out. Wait, with the
            # view's verdict: every silo of the view gets another chance (one we excluded may be
            # fine), and the records go to their owners on the newest view.
            tries = call.part.failures
            log.info("silo %s does not serve %d records yet (%s)", call.silo, len(call.part.shard), exc)
            self._record_failure(tries, f"{call.silo}: {exc}", refusal=True)
            self._sleep(min(self._backoff(tries.refusals) / 4, MAX_REFUSAL_BACKOFF))
            self._excluded.clear()
            self._adopt_newer_view()
            for silo, piece in self._group(call.part):
                calls.append(_Call(silo, piece, submit(silo, piece.shard)))
            return
        except WorkUnavailableError as exc:
            size = len(call.part.shard)
            log.info("silo %s unavailable (%s); moving %d records to their next owners", call.silo, exc, size)
            self._record_failure(call.part.failures, f"{call.silo}: {exc}")
            self._excluded.add(call.silo)
            self._adopt_newer_view()
            for silo, piece in self._group(call.part):
                calls.append(_Call(silo, piece, submit(silo, piece.shard)))
            return
        if len(results) != len(call.part.shard):
            raise WorkError(
                f"silo {call.silo} returned {len(results)} results for {len(call.part.shard)} items of handler "
                f"{self._handler!r}; a handler must return exactly one result per item",
                silo=call.silo,
                handler=self._handler,
                code="INVALID_ARGUMENT",
            )
        rerouted = call.part.first != self._first_index.get(call.silo, -2)
        yield Delivery(call.part.shard, results, call.silo, rerouted, call.silo == self._sidecar)

    def _owner_indices(self, part: _Part[S]) -> npt.NDArray[np.int64]:
        """Each record's owner now, as indices into the current ring's addresses."""
        return part.first if self._ring is self._first_ring else self._ring.owner_indices(part.shard.keys)

    def _group(self, part: _Part[S]) -> list[tuple[SiloAddress, _Part[S]]]:
        """``part`` split by current owner, waiting (bounded) until some silo is live."""
        while not len(self._ring):
            self._record_failure(part.failures, f"no live silo in view version {self._view.version}")
            self._sleep(self._backoff(part.failures.streak))
            # Every silo of the view failed us once: give them another chance, they may be back.
            self._excluded.clear()
            self._adopt_newer_view()
        owners = self._owner_indices(part)
        order = np.argsort(owners, kind="stable")
        counts = np.bincount(owners, minlength=len(self._ring))
        groups: list[tuple[SiloAddress, _Part[S]]] = []
        start = 0
        for index, count in enumerate(counts.tolist()):
            if count:
                groups.append((self._ring.addresses[index], part.take(order[start : start + count])))
                start += count
        return groups

    def _record_failure(self, tries: _Tries, failure: str, *, refusal: bool = False) -> None:
        """Count one failed try; raise ``NoLiveSiloError`` after ``max_attempts`` failures in a row
        (ownership refusals interrupt a row: the cluster is moving the keys) or, whatever they
        were, once the batch has been failing for ``failover_timeout``."""
        now = self._monotonic()
        tries.since = now if tries.since is None else tries.since
        tries.failures.append(failure)
        if refusal:
            tries.streak, tries.refusals = 0, tries.refusals + 1
        else:
            tries.streak += 1
        if tries.streak < self._max_attempts and now - tries.since < self._failover_timeout:
            return
        shown = tries.failures if len(tries.failures) <= 10 else [*tries.failures[:5], "...", *tries.failures[-5:]]
        tried = "; ".join(shown)
        active = ", ".join(str(address) for address in self._view.addresses) or "none"
        raise NoLiveSiloError(
            f"no live silo could process a batch for handler {self._handler!r} after {len(tries.failures)} attempts "
            f"in {now - tries.since:.1f}s "
            f"(cluster {self._view.cluster_id!r}, view version {self._view.version}, Active silos: {active}); "
            f"tries: {tried}. Start silos or check that the membership table is reachable."
        )

    def _adopt_newer_view(self) -> None:
        try:
            candidate = self._refresh()
        except (MembershipTableError, MembershipClientError) as exc:
            log.warning("could not re-read the cluster view (%s); keeping version %d", exc, self._view.version)
        else:
            update = self._tracker.offer(candidate)
            if update is not None:
                log.info("cluster view %d -> %d", self._view.version, update.view.version)
                self._view = update.view
                self._excluded &= set(self._view.addresses)
                self._sidecar = self._find_sidecar()
        self._rebuild_ring()

    def _rebuild_ring(self) -> None:
        live = [address for address in self._view.addresses if address not in self._excluded]
        ring = HashRing(live, self._virtual_nodes)
        self._ring = self._first_ring if ring == self._first_ring else ring

    def _find_sidecar(self) -> SiloAddress | None:
        return None if self._sidecar_locator is None else self._sidecar_locator.find(self._view)


def _chunks(records: Iterable[Record[K]], size: int) -> Iterator[tuple[Record[K], ...]]:
    iterator = iter(records)
    while chunk := tuple(itertools.islice(iterator, size)):
        yield chunk
