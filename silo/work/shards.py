"""What a router moves: records and their results, shards of them, calls in flight, deliveries.

``Router`` (``silo.work.routing``) groups a ``Shard`` by owner and hands each part to a ``Submit``
function that starts a call (``PendingCall``); a ``Delivery`` is a part's results from the silo
that processed it. ``Records`` is a list of ``Record`` as a shard (``Router.route``); Arrow
batches are the other kind (``silo.work.columnar_routing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Generic, NamedTuple, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt

from membership_tables import SiloAddress

__all__ = ["Deferred", "Delivery", "PendingCall", "Record", "Records", "Routed", "Shard", "Submit"]

K = TypeVar("K")


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


class Shard(Protocol):
    """Records that travel together (a list of ``Record``, or an Arrow batch): keys and a way to cut them."""

    @property
    def keys(self) -> Sequence[str] | Sequence[bytes]:
        """The routing key of each record, in order (all ``str``, or all UTF-8 ``bytes``)."""
        ...

    def __len__(self) -> int: ...

    def take(self, indices: npt.NDArray[np.int64]) -> Self:
        """The records at ``indices``, in that order."""
        ...

    def extend(self, others: Sequence[Self]) -> Self:
        """These records followed by those of ``others``."""
        ...


S = TypeVar("S", bound=Shard)
R = TypeVar("R", bound=Sized)
R_co = TypeVar("R_co", bound=Sized, covariant=True)


class PendingCall(Protocol[R_co]):
    """A call in flight: ``result()`` waits for the results (one per record) or raises
    ``WorkUnavailableError``/``WorkError``; ``cancel()`` abandons it."""

    def result(self) -> R_co: ...

    def cancel(self) -> object: ...


Submit = Callable[[SiloAddress, S], PendingCall[R]]
"""``submit(silo, shard)``: start sending ``shard`` to ``silo``; returns the call in flight."""


class Delivery(NamedTuple, Generic[S, R]):
    """A shard's results from the silo that processed it."""

    shard: S
    results: R
    silo: SiloAddress
    rerouted: npt.NDArray[np.bool_]
    """Per record: ``silo`` is not the key's owner in the view the router started with."""
    via_sidecar: bool
    """``silo`` is this worker's local sidecar."""


class Records(Generic[K]):
    """A list of ``Record`` as a ``Shard``."""

    def __init__(self, records: list[Record[K]]) -> None:
        self.records = records
        self.keys = [record.key for record in records]

    def __len__(self) -> int:
        return len(self.records)

    def take(self, indices: npt.NDArray[np.int64]) -> Records[K]:
        return Records([self.records[index] for index in indices.tolist()])

    def extend(self, others: Sequence[Records[K]]) -> Records[K]:
        return Records([record for shard in (self, *others) for record in shard.records])


class Deferred(Generic[R]):
    """A blocking send as a ``PendingCall``: it runs when its result is asked for."""

    def __init__(self, call: Callable[[], R]) -> None:
        self._call = call

    def result(self) -> R:
        return self._call()

    def cancel(self) -> bool:
        return True
