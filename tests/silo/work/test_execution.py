"""``execute``: either request form reaches either handler signature; errors and timings."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from silo.work.columns import read_batch, write_batch
from silo.work.execution import BadRequestError, BadResultsError, HandlerFailedError, execute
from silo.work.handlers import checksum, checksum_handler, is_columnar
from tests.silo import work_handlers

ITEMS = [("ab", b"[1]"), ("c", b"[2]")]
BATCH = pa.RecordBatch.from_arrays([pa.array(["ab", "c"]), pa.array([1, 2])], names=["key", "value"])


def test_an_item_handler_gets_items_from_either_form() -> None:
    assert execute(checksum_handler, items=ITEMS).results == [checksum(key, payload) for key, payload in ITEMS]
    outcome = execute(checksum_handler, arrow_batch=write_batch(BATCH))
    assert outcome.results == []
    assert read_batch(outcome.arrow_results).column(0).to_pylist() == [checksum(k, p) for k, p in ITEMS]
    assert outcome.items == 2


def test_a_columnar_handler_gets_a_batch_from_either_form() -> None:
    assert is_columnar(work_handlers.key_lengths)
    assert not is_columnar(checksum_handler)
    outcome = execute(work_handlers.key_lengths, arrow_batch=write_batch(BATCH))
    assert read_batch(outcome.arrow_results).column(0).to_pylist() == [b"\0\0\0\2", b"\0\0\0\1"]
    assert execute(work_handlers.key_lengths, items=ITEMS).results == [b"\0\0\0\2", b"\0\0\0\1"]
    seen = execute(work_handlers.columns_seen, items=ITEMS).results
    assert seen[0] == b'{"key": "ab", "payload": "[1]"}'


def test_the_handler_is_timed_apart_from_serialization() -> None:
    ticks = itertools.count()
    outcome = execute(checksum_handler, arrow_batch=write_batch(BATCH), clock=lambda: float(next(ticks)))
    assert (outcome.handler_seconds, outcome.serialization_seconds) == (1.0, 2.0)


def test_failures_say_whose_fault_they_are() -> None:
    with pytest.raises(HandlerFailedError, match="RuntimeError: crash handler always fails"):
        execute(work_handlers.crash, items=ITEMS)
    with pytest.raises(BadResultsError, match="returned 1 results for 2 items"):
        execute(work_handlers.short, arrow_batch=write_batch(BATCH))
    with pytest.raises(BadResultsError, match="returned a str result"):
        execute(lambda items: ["x"] * len(items), items=ITEMS)
    with pytest.raises(BadRequestError, match="not an Arrow IPC stream"):
        execute(checksum_handler, arrow_batch=b"garbage")
    with pytest.raises(BadRequestError, match="not an Arrow IPC stream"):  # found by fuzzing: pyarrow raised OSError
        execute(checksum_handler, arrow_batch=b"\x00\x00\x00\x80")
    with pytest.raises(BadRequestError, match="both items and an arrow_batch"):
        execute(checksum_handler, items=ITEMS, arrow_batch=write_batch(BATCH))
