"""Work in columnar form: Arrow record batches on the wire, and their items for item handlers.

A columnar batch (``Work.Process`` with ``arrow_batch``) is one Arrow record batch: column 0
holds the routing keys as strings, the other columns hold the records' values as the caller
had them (e.g. a Spark DataFrame's value columns). It travels as Arrow IPC bytes, so a batch
of thousands of records is encoded and decoded in a few vectorised calls, with no per-record
message or JSON on the wire.

A handler that takes items (``handler(items) -> results``) sees the same ``(key, payload)``
items it always did: ``batch_items`` turns a batch into items whose payload is the record's
values as a compact JSON array (``encode_payload``), or the raw bytes when the only value
column is binary. Results go back as one binary Arrow column.

pyarrow is imported lazily (it comes with the ``serve-spark`` extra, which the ``spark`` extra
includes), so a silo without it still serves item batches; a columnar request to such a silo fails
with ``ColumnarUnavailableError``, and ``columnar_unavailable`` says so before any request comes.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from silo.errors import SiloError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KEY_COLUMN",
    "ColumnarUnavailableError",
    "batch_items",
    "check_results",
    "columnar_unavailable",
    "encode_payload",
    "encode_payloads",
    "items_batch",
    "key_bytes",
    "read_batch",
    "result_array",
    "routing_key",
    "routing_keys",
    "write_batch",
]

KEY_COLUMN = 0
"""The column of a columnar batch that holds the routing keys (strings)."""

_SEPARATORS = (",", ":")
_PLAIN_TYPES = ("int", "uint", "float", "double", "halffloat", "bool", "null")
"""Arrow type names (prefixes) whose values JSON-encode without quotes, commas or escapes."""


SERVE_SPARK_EXTRA = "serve-spark"
"""The extra that brings pyarrow without pyspark: what a silo needs to serve Spark's columnar batches."""

_NO_PYARROW = (
    "columnar work batches need pyarrow, which is not installed here; install the "
    f"{SERVE_SPARK_EXTRA} extra (pip install 'silo-membership[{SERVE_SPARK_EXTRA}]', "
    "also part of the spark extra)"
)


class ColumnarUnavailableError(SiloError):
    """pyarrow is not installed where a columnar batch had to be read or written."""


def columnar_unavailable() -> str | None:
    """Why this process cannot read or write columnar batches (no pyarrow), or None if it can.

    Looks pyarrow up without importing it: the import costs a silo time and memory that only
    columnar work needs, and a silo asks at start-up, before any batch comes."""
    return _NO_PYARROW if importlib.util.find_spec("pyarrow") is None else None


def _arrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise ColumnarUnavailableError(_NO_PYARROW) from exc
    return pyarrow


def key_bytes(batch: pa.RecordBatch) -> list[bytes]:
    """The routing keys of a columnar batch as UTF-8 bytes, straight from the Arrow buffers (no encoding)."""
    return batch.column(KEY_COLUMN).cast(_arrow().binary()).to_pylist()  # type: ignore[no-any-return]


def routing_key(value: object, column: str = "key") -> str:
    """The string a key is hashed and sent as: strings as they are, anything else as ``str(value)``."""
    if value is None:
        raise ValueError(
            f"key column {column!r} is null in a record; every record needs a key to be routed: "
            "filter nulls out or fill them (df.na.fill) first"
        )
    return value if isinstance(value, str) else str(value)


def routing_keys(keys: pa.Array, column: str = "key") -> pa.Array:
    """``routing_key`` of every value of an Arrow array, as a string array (vectorised for strings and ints)."""
    pa = _arrow()
    if keys.null_count:
        routing_key(None, column)  # raises the error that names the column
    kind = keys.type
    if pa.types.is_string(kind):
        return keys
    if pa.types.is_large_string(kind) or pa.types.is_integer(kind):
        return keys.cast(pa.string())  # an int's Arrow text is Python's str(int)
    return pa.array([routing_key(value, column) for value in keys.to_pylist()], pa.string())


def encode_payload(values: Sequence[Any]) -> bytes:
    """The payload of one record for item handlers: its values as a compact JSON array (UTF-8).

    Values JSON cannot hold (dates, decimals, ...) are sent as their ``str()``. A single
    binary value column is sent as its raw bytes instead (see ``batch_items``).
    """
    return json.dumps(list(values), separators=_SEPARATORS, ensure_ascii=False, default=str).encode()


def _fragments(column: pa.Array) -> list[str]:
    """Each value of ``column`` as ``encode_payload`` writes it inside the array."""
    values = column.to_pylist()
    name = str(column.type)
    if name.startswith(_PLAIN_TYPES):
        # One C call for the whole column; such values contain no comma, so splitting is exact.
        return json.dumps(values, separators=_SEPARATORS).removeprefix("[").removesuffix("]").split(",")
    if name in ("string", "large_string"):
        quote = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) uses
        return ["null" if value is None else quote(value) for value in values]
    return [json.dumps(value, separators=_SEPARATORS, ensure_ascii=False, default=str) for value in values]


def encode_payloads(batch: pa.RecordBatch) -> list[bytes]:
    """``encode_payload`` of every row's values (the columns after the key), column by column."""
    if batch.num_rows == 0:
        return []
    columns = [_fragments(batch.column(index)) for index in range(1, batch.num_columns)]
    if not columns:
        return [b"[]"] * batch.num_rows
    if len(columns) == 1:
        return [f"[{value}]".encode() for value in columns[0]]
    return [f"[{','.join(row)}]".encode() for row in zip(*columns, strict=True)]


def batch_items(batch: pa.RecordBatch) -> list[tuple[str, bytes]]:
    """The ``(key, payload)`` items of a columnar batch, as an item handler receives them."""
    pa = _arrow()
    keys = batch.column(KEY_COLUMN).to_pylist()
    if batch.num_columns == 2 and pa.types.is_binary(batch.column(1).type):
        payloads = [value or b"" for value in batch.column(1).to_pylist()]
    else:
        payloads = encode_payloads(batch)
    return list(zip(keys, payloads, strict=True))


def items_batch(items: Sequence[tuple[str, bytes]]) -> pa.RecordBatch:
    """Items as a columnar batch (``key`` strings, ``payload`` binary): what a columnar handler gets for items."""
    pa = _arrow()
    return pa.RecordBatch.from_arrays(
        [pa.array([key for key, _ in items], pa.string()), pa.array([payload for _, payload in items], pa.binary())],
        names=["key", "payload"],
    )


def check_results(results: object, expected: int) -> list[bytes]:
    """A handler's results as a list of ``bytes``; ``ValueError`` saying what is wrong with them."""
    if not isinstance(results, Sequence) or isinstance(results, (bytes, str)):
        raise ValueError(f"returned {type(results).__name__}, not a sequence of bytes (one result per item)")
    if len(results) != expected:
        raise ValueError(f"returned {len(results)} results for {expected} items; it must return one per item")
    wrong = next((result for result in results if not isinstance(result, bytes)), None)
    if wrong is not None:
        raise ValueError(f"returned a {type(wrong).__name__} result; every result must be bytes")
    return list(results)


def result_array(results: object, expected: int) -> pa.Array:
    """A handler's results as a binary Arrow array; ``ValueError`` saying what is wrong with them.

    A handler returns one ``bytes`` per item (a list, or a binary Arrow array), in order.
    """
    pa = _arrow()
    if isinstance(results, pa.ChunkedArray):
        results = results.combine_chunks()
    if not isinstance(results, pa.Array):
        return pa.array(check_results(results, expected), pa.binary())
    if not (pa.types.is_binary(results.type) or pa.types.is_large_binary(results.type)):
        raise ValueError(f"returned an Arrow array of {results.type}; results must be binary (one per item)")
    if results.null_count:
        raise ValueError("returned null results; every item needs a bytes result")
    if len(results) != expected:
        raise ValueError(f"returned {len(results)} results for {expected} items; it must return one per item")
    return results.cast(pa.binary())


def write_batch(batch: pa.RecordBatch) -> bytes:
    """``batch`` as Arrow IPC stream bytes."""
    pa = _arrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def read_batch(data: bytes) -> pa.RecordBatch:
    """The one record batch of Arrow IPC stream bytes (``ValueError`` if they hold anything else)."""
    pa = _arrow()
    try:
        batches = list(pa.ipc.open_stream(pa.py_buffer(data)))
    except (pa.ArrowException, OSError) as exc:  # e.g. a bogus length reads past the end: ArrowIOError (OSError)
        raise ValueError(f"not an Arrow IPC stream: {exc}") from exc
    if len(batches) != 1:
        raise ValueError(f"expected one record batch in the Arrow IPC stream, found {len(batches)}")
    return batches[0]
