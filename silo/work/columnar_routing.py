"""Routing Arrow record batches: the ``Router``'s engine with columnar calls, several in flight.

``route_columnar`` feeds ``ColumnarShard``s (a batch to send, plus columns carried to the
output without being sent) to ``Router.dispatch``, which groups rows by owner, buffers them
per silo and fails over exactly as for items; each call is a ``SyncWorkClient.submit_columnar``,
so up to ``in_flight`` batches travel at once over the silos' channels while the executor
groups the next rows. ``RoutingStats`` says where the time went.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import numpy.typing as npt

from membership_tables import SiloAddress
from silo.work import columns
from silo.work.client import PendingColumnarCall, SyncWorkClient
from silo.work.routing import Delivery, Router

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DEFAULT_COLUMNAR_BATCH_SIZE",
    "DEFAULT_IN_FLIGHT",
    "ColumnarShard",
    "RoutingStats",
    "route_columnar",
]

DEFAULT_COLUMNAR_BATCH_SIZE = 10_000
"""Rows per columnar call: large enough that a call's fixed cost (a gRPC round trip, a thread
hop on the silo) is small per row, small enough that a failed call re-sends little."""
DEFAULT_IN_FLIGHT = 4
"""Calls one task keeps in flight: the silos work on some while the task groups the next rows."""


@dataclass
class RoutingStats:
    """Where one or more tasks' routing time went (seconds are summed over calls and tasks).

    Calls overlap (several in flight), so the call-side sums may exceed the wall time.
    """

    records: int = 0
    calls: int = 0
    failed_calls: int = 0
    request_bytes: int = 0
    task_seconds: float = 0.0
    """Wall time of the tasks' routing, from the first input batch to the last output batch."""
    encode_seconds: float = 0.0
    """Executor: writing batches as Arrow IPC."""
    waiting_seconds: float = 0.0
    """Executor: blocked on results (includes reading them)."""
    call_seconds: float = 0.0
    """Sum of call latencies, from submit to the answer's arrival."""
    silo_handler_seconds: float = 0.0
    """Silos: in the handlers."""
    silo_serialization_seconds: float = 0.0
    """Silos: reading batches, converting them for item handlers, writing results."""

    @property
    def network_and_queue_seconds(self) -> float:
        """Call latency not spent in the silos' work: transfer, gRPC and waiting in the silos' queues."""
        return max(0.0, self.call_seconds - self.silo_handler_seconds - self.silo_serialization_seconds)

    @property
    def executor_routing_seconds(self) -> float:
        """Executor time neither encoding nor waiting: hashing keys, grouping rows, building output."""
        return max(0.0, self.task_seconds - self.encode_seconds - self.waiting_seconds)

    def add(self, other: RoutingStats) -> RoutingStats:
        """Both added up (in place; returns ``self``)."""
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    def as_dict(self) -> dict[str, float]:
        """Every field and derived figure, for reports."""
        figures: dict[str, float] = {field.name: getattr(self, field.name) for field in fields(self)}
        figures["network_and_queue_seconds"] = self.network_and_queue_seconds
        figures["executor_routing_seconds"] = self.executor_routing_seconds
        return figures


class ColumnarShard:
    """Rows to route: ``wire`` is sent (column 0 the routing keys as strings, then the values);
    ``carried`` stays with the executor and comes back beside the results (e.g. the original key)."""

    def __init__(self, wire: pa.RecordBatch, carried: pa.RecordBatch) -> None:
        if wire.num_rows != carried.num_rows:
            raise ValueError(f"wire and carried columns differ in length: {wire.num_rows} != {carried.num_rows}")
        self.wire = wire
        self.carried = carried
        self._keys: list[bytes] | None = None

    @property
    def keys(self) -> Sequence[bytes]:
        """The routing keys as UTF-8 bytes (straight from the Arrow buffers, no encoding)."""
        if self._keys is None:
            self._keys = columns.key_bytes(self.wire)
        return self._keys

    def __len__(self) -> int:
        return int(self.wire.num_rows)

    def take(self, indices: npt.NDArray[np.int64]) -> Self:
        return type(self)(self.wire.take(indices), self.carried.take(indices))

    def extend(self, others: Sequence[Self]) -> Self:
        import pyarrow as pa

        shards = [self, *others]
        return type(self)(
            pa.concat_batches([shard.wire for shard in shards]),
            pa.concat_batches([shard.carried for shard in shards]),
        )


class _TimedCall:
    """A columnar call that adds its figures to ``stats`` once it is answered."""

    def __init__(
        self, call: PendingColumnarCall, stats: RoutingStats, lock: threading.Lock, clock: Callable[[], float]
    ) -> None:
        self._call = call
        self._stats = stats
        self._lock = lock
        self._clock = clock
        self._submitted = clock()
        self._answered: float | None = None
        call.add_done_callback(self._on_answer)

    def _on_answer(self) -> None:
        self._answered = self._clock()

    def result(self) -> pa.Array:
        waiting = self._clock()
        try:
            results = self._call.result()
        except Exception:
            self._stats.failed_calls += 1
            raise
        finally:
            now = self._clock()
            with self._lock:
                self._stats.waiting_seconds += now - waiting
                self._stats.call_seconds += (self._answered or now) - self._submitted
        self._stats.calls += 1
        self._stats.records += len(results)
        self._stats.silo_handler_seconds += self._call.handler_seconds
        self._stats.silo_serialization_seconds += self._call.serialization_seconds
        return results

    def cancel(self) -> bool:
        return self._call.cancel()


def route_columnar(
    router: Router[Any],
    client: SyncWorkClient,
    handler: str,
    shards: Iterable[ColumnarShard],
    *,
    batch_size: int = DEFAULT_COLUMNAR_BATCH_SIZE,
    in_flight: int = DEFAULT_IN_FLIGHT,
    timeout: float,
    stats: RoutingStats | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[Delivery[ColumnarShard, pa.Array]]:
    """Route every row of ``shards`` through ``router`` with columnar calls of ``client``.

    Yields each shard piece with its binary results (one per row) once; failover, retries and
    the ``rerouted``/``via_sidecar`` marks are the ``Router``'s (see ``silo.work.routing``).
    """
    figures = stats if stats is not None else RoutingStats()
    lock = threading.Lock()
    started = clock()

    def submit(silo: SiloAddress, shard: ColumnarShard) -> _TimedCall:
        before = clock()
        call = client.submit_columnar(silo, handler, shard.wire, timeout, view_version=router.view.version)
        figures.encode_seconds += clock() - before
        figures.request_bytes += call.request_bytes
        return _TimedCall(call, figures, lock, clock)

    try:
        yield from router.dispatch(shards, submit, batch_size, in_flight)
    finally:
        figures.task_seconds += clock() - started
