"""Running a handler on one ``Work.Process`` request: items or a columnar batch, either signature.

``execute`` is what the silo's gRPC service calls in its worker thread. It adapts the request
to the handler's signature (``silo.work.handlers.is_columnar``), checks the results (one
``bytes`` per item) and times the handler apart from the decoding and encoding around it, so
callers can tell where a batch's time went. No gRPC here: the service maps the errors to
status codes.

Errors::

    BadRequestError      the request cannot be read (not Arrow IPC, no key column, no pyarrow)
    HandlerFailedError   the handler raised; its exception is the cause
    BadResultsError      the handler returned something else than one bytes result per item
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from silo.errors import SiloError
from silo.work import columns, fencing
from silo.work.handlers import is_columnar

__all__ = ["BadRequestError", "BadResultsError", "HandlerFailedError", "Outcome", "execute"]


class BadRequestError(SiloError):
    """The request's batch cannot be read."""


class HandlerFailedError(SiloError):
    """The handler raised (the exception is ``__cause__``)."""


class BadResultsError(SiloError):
    """The handler's results are not one ``bytes`` per item."""


@dataclass(frozen=True)
class Outcome:
    """The answer to one request: ``results`` for items, ``arrow_results`` (IPC bytes) for a columnar batch."""

    results: list[bytes]
    arrow_results: bytes
    items: int
    handler_seconds: float
    serialization_seconds: float


def execute(
    handler: Callable[..., Any],
    *,
    items: Sequence[tuple[str, bytes]] | None = None,
    arrow_batch: bytes = b"",
    clock: Callable[[], float] = time.perf_counter,
    admit: Callable[[Sequence[str] | Sequence[bytes]], None] | None = None,
    token: int = 0,
) -> Outcome:
    """Run ``handler`` on ``items``, or on the columnar batch ``arrow_batch`` when it is not empty.

    ``admit`` sees the batch's keys before the handler runs and raises to refuse it (the silo's
    ownership check); the handler runs under the fencing ``token`` (``silo.work.fencing``)."""
    started = clock()
    try:
        if items and arrow_batch:
            raise ValueError("the request has both items and an arrow_batch; send one of them")
        batch = columns.read_batch(arrow_batch) if arrow_batch else None
        if batch is not None and batch.num_columns < 1:
            raise ValueError("the batch has no columns; column 0 must hold the routing keys")
        columnar = is_columnar(handler)
        if batch is None:
            count = len(items or ())
            argument: Any = columns.items_batch(items or ()) if columnar else list(items or ())
        else:
            count = batch.num_rows
            argument = batch if columnar else columns.batch_items(batch)
    except (ValueError, columns.ColumnarUnavailableError) as exc:
        raise BadRequestError(str(exc)) from exc
    if admit is not None:
        admit([key for key, _ in items or ()] if batch is None else columns.key_bytes(batch))
    called = clock()
    try:
        with fencing.running_under(token):
            raw = handler(argument)
    except Exception as exc:  # a handler is user code: any failure is the handler's
        raise HandlerFailedError(f"{type(exc).__name__}: {exc}") from exc
    returned = clock()
    try:
        if batch is None and not columnar:
            results = columns.check_results(raw, count)
            encoded = b""
        else:
            array = columns.result_array(raw, count)
            results = array.to_pylist() if batch is None else []
            encoded = columns.write_batch(_results_batch(array)) if batch is not None else b""
    except ValueError as exc:
        raise BadResultsError(str(exc)) from exc
    done = clock()
    return Outcome(results, encoded, count, returned - called, (called - started) + (done - returned))


def _results_batch(array: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([array], names=["result"])
