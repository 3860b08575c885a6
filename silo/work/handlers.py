"""Work handlers built into every silo, and the handler signature.

A handler turns a batch of ``(key, payload)`` items into one result per item, in order. It
runs inside a silo when a client calls ``Work.Process``. Delivery is at-least-once (a
caller that loses a silo mid-call sends the batch again to the key's next owner), so a
handler must be idempotent: the same item processed twice must leave the same effect as once.

Built-ins (``BUILTIN_HANDLERS``), registered on every silo under these names:

``example.checksum``
    For each item, ``checksum(key, payload)``: an 8-byte big-endian blake2b digest of the key
    and the payload. Pure, so a job can check what the silos returned against the same
    computation done locally (``checksum_total``).

``example.echo``
    Each item's payload, unchanged: shows where records went without computing anything.

**Two signatures.** An *item handler* takes ``Sequence[tuple[str, bytes]]``. A *columnar
handler*, marked with ``@columnar``, takes one ``pyarrow.RecordBatch`` (column 0 the routing
keys as strings, the other columns the records' values as the caller sent them) and returns
one ``bytes`` per row, as a list or a binary Arrow array. The silo adapts either way: a
columnar batch reaches an item handler as items (``silo.work.columns.batch_items``), and items
reach a columnar handler as a batch of ``key`` and ``payload`` columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = [
    "BUILTIN_HANDLERS",
    "CHECKSUM_HANDLER",
    "ECHO_HANDLER",
    "Handler",
    "checksum",
    "checksum_handler",
    "checksum_total",
    "columnar",
    "combine_totals",
    "echo_handler",
    "is_columnar",
]

Handler = Callable[[Sequence[tuple[str, bytes]]], Sequence[bytes]]
"""``handler(items) -> results``: one result per ``(key, payload)`` item, same order."""
ColumnarHandler = Callable[[Any], Any]
"""``handler(batch: pyarrow.RecordBatch) -> Sequence[bytes] | pyarrow.Array``, marked ``@columnar``."""

F = TypeVar("F", bound=Callable[..., Any])
_COLUMNAR_MARK = "__silo_columnar__"


def columnar(function: F) -> F:
    """Mark ``function`` as a columnar handler: it takes a ``pyarrow.RecordBatch`` instead of items.

    ::

        @columnar
        def lengths(batch: pyarrow.RecordBatch) -> list[bytes]:
            return [len(key).to_bytes(4, "big") for key in batch.column(0).to_pylist()]
    """
    setattr(function, _COLUMNAR_MARK, True)
    return function


def is_columnar(handler: Callable[..., Any]) -> bool:
    """True for a handler marked ``@columnar``."""
    return getattr(handler, _COLUMNAR_MARK, False) is True


CHECKSUM_HANDLER = "example.checksum"
ECHO_HANDLER = "example.echo"
_CHECKSUM_BYTES = 8
_MODULUS = 1 << (8 * _CHECKSUM_BYTES)


def checksum(key: str, payload: bytes) -> bytes:
    """The digest of one item; the key is length-prefixed so ``("ab", b"c")`` differs from ``("a", b"bc")``."""
    key_bytes = key.encode()
    digest = hashlib.blake2b(digest_size=_CHECKSUM_BYTES)
    digest.update(len(key_bytes).to_bytes(4, "big"))
    digest.update(key_bytes)
    digest.update(payload)
    return digest.digest()


def checksum_handler(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """The ``example.checksum`` handler: ``checksum`` of every item."""
    return [checksum(key, payload) for key, payload in items]


def checksum_total(digests: Iterable[bytes]) -> int:
    """Order-independent sum (mod 2**64) of digests: equal totals mean the same multiset, barring
    collisions, and a lost or duplicated record changes it."""
    return combine_totals(int.from_bytes(digest, "big") for digest in digests)


def combine_totals(totals: Iterable[int]) -> int:
    """The total of several partial ``checksum_total``s (e.g. one per Spark partition)."""
    return sum(totals) % _MODULUS


def echo_handler(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """The ``example.echo`` handler: every item's payload."""
    return [payload for _, payload in items]


BUILTIN_HANDLERS: Mapping[str, Handler] = MappingProxyType(
    {CHECKSUM_HANDLER: checksum_handler, ECHO_HANDLER: echo_handler}
)
"""Handlers every silo serves without ``--handler``; read-only."""
