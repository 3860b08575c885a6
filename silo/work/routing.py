"""Routing keyed records to the silo that owns each key, in batches, surviving silos that die.

A ``Router`` is what one Spark task (or any worker) uses: it holds a ``ClusterView``, hashes
each record's key onto a ``HashRing`` of the view's Active silos, buffers records per owner and
sends full buffers through a ``Send`` function (in production ``SyncWorkClient.process``; in
tests, any function). It is pure routing: no Spark, no gRPC.

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

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from membership_tables import MembershipTableError, SiloAddress
from silo.client.errors import MembershipClientError
from silo.client.topology import ClusterView, ViewTracker
from silo.errors import SiloError
from silo.work.client import WorkError, WorkUnavailableError
from silo.work.hashring import DEFAULT_VIRTUAL_NODES, HashRing

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ATTEMPTS",
    "NoLiveSiloError",
    "Record",
    "Routed",
    "Router",
    "Send",
    "check_positive_int",
    "exponential_backoff",
]

log = logging.getLogger(__name__)

K = TypeVar("K")

Send = Callable[[SiloAddress, str, Sequence[tuple[str, bytes]]], Sequence[bytes]]
"""``send(silo, handler, items) -> results``: one result per item, in order. Raises
``WorkUnavailableError`` when the caller should try another silo."""

DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_ATTEMPTS = 5
"""Failed sends per batch before giving up; each failure removes one silo, so five covers a
batch whose owner and next four owners all die during one task."""


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


class Record(NamedTuple, Generic[K]):
    """One input record: ``value`` is the caller's key as given (echoed in ``Routed.key``);
    ``key`` is the string hashed onto the ring and sent to the silo."""

    value: K
    key: str
    payload: bytes


class Routed(NamedTuple, Generic[K]):
    """One record's result and how it got there."""

    key: K
    result: bytes
    silo: SiloAddress
    """The silo that processed the record."""
    rerouted: bool
    """True if ``silo`` is not the key's owner in the view the router started with."""
    via_sidecar: bool
    """True if ``silo`` is this worker's local sidecar."""


@dataclass
class _Pending(Generic[K]):
    record: Record[K]
    first_owner: SiloAddress | None


class Router(Generic[K]):
    """Routes records of one task to their owners' silos; see the module docstring.

    ``sidecar`` is the local silo's advertised ``host:port`` (or ``host:port@generation``),
    typically from ``SILO_SIDECAR_ADDRESS``: the Active silo of the view at that endpoint is
    the local sidecar, and records it owns are reported ``via_sidecar``. ``sleep`` and
    ``backoff`` are injectable so tests never wait.
    """

    def __init__(
        self,
        view: ClusterView,
        handler: str,
        send: Send,
        refresh: Callable[[], ClusterView],
        *,
        sidecar: str | None = None,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Callable[[int], float] = exponential_backoff,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        check_positive_int("max_attempts", max_attempts)
        self._handler = handler
        self._send = send
        self._refresh = refresh
        self._sidecar_name = sidecar
        self._virtual_nodes = virtual_nodes
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._sleep = sleep
        self._tracker = ViewTracker(view.cluster_id)
        self._tracker.offer(view)
        self._view = view
        self._first_ring = HashRing(view.addresses, virtual_nodes)
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
        buffers: dict[SiloAddress | None, list[_Pending[K]]] = {}
        for record in records:
            first = self._first_ring.owner(record.key) if len(self._first_ring) else None
            owner = first if self._ring is self._first_ring else self.owner(record.key)
            buffer = buffers.setdefault(owner, [])
            buffer.append(_Pending(record, first))
            if len(buffer) >= batch_size:
                yield from self._deliver(buffers.pop(owner))
        for buffer in buffers.values():
            yield from self._deliver(buffer)

    def _deliver(self, batch: list[_Pending[K]]) -> Iterator[Routed[K]]:
        """Send one batch (regrouped by current owner), failing over until each record has a result."""
        failures: list[str] = []
        queue = self._group(batch, failures)
        while queue:
            silo, items = queue.pop()
            try:
                results = self._send(silo, self._handler, [(item.record.key, item.record.payload) for item in items])
            except WorkUnavailableError as exc:
                log.info("silo %s unavailable (%s); moving %d records to their next owners", silo, exc, len(items))
                failures.append(f"{silo}: {exc}")
                self._excluded.add(silo)
                self._check_attempts(failures)
                self._adopt_newer_view()
                queue.extend(self._group(items, failures))
                continue
            if len(results) != len(items):
                raise WorkError(
                    f"silo {silo} returned {len(results)} results for {len(items)} items of handler "
                    f"{self._handler!r}; a handler must return exactly one result per item",
                    silo=silo,
                    handler=self._handler,
                    code="INVALID_ARGUMENT",
                )
            sidecar = silo == self._sidecar
            for item, result in zip(items, results, strict=True):
                yield Routed(item.record.value, result, silo, silo != item.first_owner, sidecar)

    def _group(self, items: list[_Pending[K]], failures: list[str]) -> list[tuple[SiloAddress, list[_Pending[K]]]]:
        """``items`` grouped by their current owner, waiting (bounded) until some silo is live."""
        while not len(self._ring):
            failures.append(f"no live silo in view version {self._view.version}")
            self._check_attempts(failures)
            self._sleep(self._backoff(len(failures)))
            # Every silo of the view failed us once: give them another chance, they may be back.
            self._excluded.clear()
            self._adopt_newer_view()
        groups: dict[SiloAddress, list[_Pending[K]]] = {}
        for item in items:
            groups.setdefault(self._ring.owner(item.record.key), []).append(item)
        return list(groups.items())

    def _check_attempts(self, failures: list[str]) -> None:
        if len(failures) < self._max_attempts:
            return
        tried = "; ".join(failures)
        active = ", ".join(str(address) for address in self._view.addresses) or "none"
        raise NoLiveSiloError(
            f"no live silo could process a batch for handler {self._handler!r} after {len(failures)} attempts "
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
        name = self._sidecar_name
        if not name:
            return None
        matches = [address for address in self._view.addresses if name in (str(address), address.endpoint)]
        return max(matches, key=lambda address: address.generation, default=None)
