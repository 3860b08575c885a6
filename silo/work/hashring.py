"""Which silo owns a key: consistent hashing with virtual nodes over the Active silos.

Each silo is placed on a 64-bit ring ``virtual_nodes`` times, at ``ring_position(address, i)``
for ``i`` in ``range(virtual_nodes)``: a stable blake2b hash of its ``host:port@generation``
(never Python's per-process randomized ``hash()``), so a Spark driver, its executors and
every client compute the same owner for a key. A key is owned by the first virtual node
clockwise from the key's own position, ``KEY_HASH`` (XXH3-64, seed 0) of its UTF-8 bytes: a
silo hashes every key of every batch again to check it owns them, so the key hash runs twice
per record; XXH3 costs a tenth of a blake2b there (``benchmarks.spark_routing``). Callers say
which hash they used (``ProcessRequest.key_hash``), so a silo can tell a caller that places
keys differently from one with a stale view.

The point of consistent hashing is what a membership change moves: removing a silo moves
exactly that silo's keys (each to the next silo clockwise, which is also its second entry in
``owners``), and adding a silo moves keys only to the new silo. Many virtual nodes per silo
keep the shares even. A restarted silo is a new generation and so lands elsewhere on the ring.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import xxhash

from membership_tables import SiloAddress
from silo.errors import SiloError
from silo.hashing import ring_position

__all__ = ["DEFAULT_VIRTUAL_NODES", "KEY_HASH", "EmptyRingError", "HashRing", "key_position"]


@functools.lru_cache(maxsize=4096)
def _positions(address: SiloAddress, virtual_nodes: int) -> tuple[int, ...]:
    """A silo's virtual-node positions, hashed once per process: a ring is rebuilt at every change
    of its silos, and hashing was nearly all of a rebuild (128 blake2b per silo)."""
    return tuple(ring_position(address, i) for i in range(virtual_nodes))


DEFAULT_VIRTUAL_NODES = 128
"""Virtual nodes per silo. With 128, each of 4 silos typically owns 25% of the keys give or take
two or three points; more nodes even the shares further but cost memory and construction time."""


class EmptyRingError(SiloError, LookupError):
    """A key was looked up on a ring with no silos: no silo is Active."""


KEY_HASH = "xxh3-64"
"""How keys are placed on the ring: XXH3 64-bit, seed 0, of the key's UTF-8 bytes. Every caller
and silo must agree; requests name it (``ProcessRequest.key_hash``)."""


def key_position(key: str | bytes) -> int:
    """The ring position of ``key`` (strings are hashed as UTF-8), stable across processes and versions."""
    return xxhash.xxh3_64_intdigest(key.encode() if isinstance(key, str) else key)


class HashRing:
    """An immutable consistent-hash ring over a set of silos; cheap to pickle and broadcast."""

    def __init__(self, addresses: Iterable[SiloAddress], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int) or virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be a positive int, got {virtual_nodes!r}; the default is 128")
        self._addresses = tuple(sorted(set(addresses)))
        self._virtual_nodes = virtual_nodes
        # Ties between equal positions (astronomically rare) are broken by address, so every
        # process builds the same ring whatever order it was given the silos in.
        nodes = sorted(
            (position, address) for address in self._addresses for position in _positions(address, virtual_nodes)
        )
        self._positions = [position for position, _ in nodes]
        self._owners = [address for _, address in nodes]
        index = {address: number for number, address in enumerate(self._addresses)}
        self._position_array = np.array(self._positions, dtype=np.uint64)
        self._owner_array = np.array([index[address] for address in self._owners], dtype=np.int64)

    @property
    def addresses(self) -> tuple[SiloAddress, ...]:
        """The silos on the ring, sorted."""
        return self._addresses

    @property
    def virtual_nodes(self) -> int:
        return self._virtual_nodes

    def __len__(self) -> int:
        return len(self._addresses)

    def __contains__(self, address: object) -> bool:
        return address in self._addresses

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashRing):
            return NotImplemented
        return (self._addresses, self._virtual_nodes) == (other._addresses, other._virtual_nodes)

    def __hash__(self) -> int:
        return hash((self._addresses, self._virtual_nodes))

    def __repr__(self) -> str:
        silos = ", ".join(str(address) for address in self._addresses)
        return f"HashRing([{silos}], virtual_nodes={self._virtual_nodes})"

    def owner(self, key: str | bytes) -> SiloAddress:
        """The silo that owns ``key``; raises ``EmptyRingError`` if the ring has no silos."""
        return self.owners(key, 1)[0]

    def owner_indices(self, keys: Sequence[str] | Sequence[bytes]) -> npt.NDArray[np.int64]:
        """``owner`` of many keys at once, as indices into ``addresses`` (-1 for every key if the ring is empty).

        The same owners as ``owner``, computed with one XXH3 per key and a vectorised search,
        for the columnar path where a batch holds thousands of keys. Keys are all ``str`` or all
        ``bytes`` (UTF-8, as an Arrow string column's buffers hold them, which saves encoding).
        """
        if not self._addresses:
            return np.full(len(keys), -1, dtype=np.int64)
        data: Sequence[bytes] = keys  # type: ignore[assignment]  # unless all str: checked on the first
        if keys and isinstance(keys[0], str):
            data = [key.encode() for key in keys]  # type: ignore[union-attr]
        positions = np.fromiter(map(xxhash.xxh3_64_intdigest, data), dtype=np.uint64, count=len(data))
        slots = np.searchsorted(self._position_array, positions, side="left")
        slots[slots == len(self._position_array)] = 0  # past the last node: wrap to the first
        owners: npt.NDArray[np.int64] = self._owner_array[slots]
        return owners

    def owners(self, key: str | bytes, n: int) -> tuple[SiloAddress, ...]:
        """The first ``n`` distinct silos clockwise from ``key``: its owner, then the failover order.

        ``owners(key, n)[1]`` is the owner ``key`` gets when its owner leaves the ring. Returns
        every silo (fewer than ``n``) when the ring is smaller than ``n``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int (how many owners to return), got {n!r}")
        if not self._addresses:
            raise EmptyRingError(
                f"no silo owns key {key!r}: the ring is empty because no silo is Active; "
                "start a silo or wait for the cluster to recover"
            )
        wanted = min(n, len(self._addresses))
        found: list[SiloAddress] = []
        start = bisect.bisect_left(self._positions, key_position(key))
        for step in range(len(self._owners)):
            address = self._owners[(start + step) % len(self._owners)]
            if address not in found:
                found.append(address)
                if len(found) == wanted:
                    break
        return tuple(found)
