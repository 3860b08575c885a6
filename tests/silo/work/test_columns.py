"""Columnar batches: payloads exactly as ``encode_payload`` writes them, keys, results, IPC."""

from __future__ import annotations

import datetime
import decimal
import json
import math

import pyarrow as pa
import pytest

from silo.work.columns import (
    ColumnarUnavailableError,
    batch_items,
    encode_payload,
    encode_payloads,
    items_batch,
    read_batch,
    result_array,
    routing_key,
    routing_keys,
    write_batch,
)

VALUE_COLUMNS = {
    "ints": pa.array([0, -7, 2**62, None], pa.int64()),
    "small_ints": pa.array([1, 2, None, 4], pa.int8()),
    "floats": pa.array([1.0, 2.5, 1e20, float("nan")], pa.float64()),
    "bools": pa.array([True, False, None, True]),
    "strings": pa.array(["a,b", 'q"uote\\', "é\n", None]),
    "dates": pa.array([datetime.date(2026, 1, 2), None, datetime.date(1970, 1, 1), datetime.date(2000, 2, 29)]),
    "decimals": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2"), decimal.Decimal("0.001")]),
    "lists": pa.array([[1, 2], [], None, [3]]),
    "nulls": pa.array([None] * 4, pa.null()),
}
KEYS = pa.array(["k0", "k1", "k2", "k3"])


def batch_of(*names: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([KEYS, *(VALUE_COLUMNS[name] for name in names)], names=["key", *names])


@pytest.mark.parametrize(
    "names",
    [[name] for name in VALUE_COLUMNS] + [["ints", "strings"], ["strings", "floats", "bools", "dates"], []],
)
def test_payloads_are_what_encode_payload_writes_for_each_row(names: list[str]) -> None:
    batch = batch_of(*names)
    rows = [[VALUE_COLUMNS[name][index].as_py() for name in names] for index in range(batch.num_rows)]
    assert encode_payloads(batch) == [encode_payload(row) for row in rows]


def test_payload_json_reads_back() -> None:
    (payload, *_) = encode_payloads(batch_of("ints", "strings"))
    assert json.loads(payload) == [0, "a,b"]
    assert math.isnan(json.loads(encode_payloads(batch_of("floats"))[3])[0])


def test_items_carry_the_routing_key_and_the_json_or_raw_payload() -> None:
    assert batch_items(batch_of("ints", "strings"))[1] == ("k1", b'[-7,"q\\"uote\\\\"]')
    raw = pa.RecordBatch.from_arrays([KEYS, pa.array([b"\x00", None, b"", b"xy"])], names=["key", "blob"])
    assert batch_items(raw) == [("k0", b"\x00"), ("k1", b""), ("k2", b""), ("k3", b"xy")]
    items = [("a", b"1"), ("b", b"")]
    assert batch_items(items_batch(items)) == items


def test_routing_keys_are_strings_and_ints_as_python_writes_them() -> None:
    assert routing_keys(pa.array(["x", "y"])).to_pylist() == ["x", "y"]
    assert routing_keys(pa.array([-3, 2**40], pa.int64())).to_pylist() == ["-3", str(2**40)]
    assert routing_keys(pa.array([1.0, 0.5])).to_pylist() == [str(1.0), str(0.5)]
    assert routing_keys(pa.array([datetime.date(2026, 1, 2)])).to_pylist() == ["2026-01-02"]
    with pytest.raises(ValueError, match=r"key column 'user' is null.*filter nulls out"):
        routing_keys(pa.array(["a", None]), "user")
    assert routing_key(42) == "42"


def test_results_are_one_bytes_per_item() -> None:
    assert result_array([b"a", b""], 2).to_pylist() == [b"a", b""]
    assert result_array(pa.array([b"x"], pa.large_binary()), 1).type == pa.binary()
    for results, message in [
        ([b"a"], "returned 1 results for 2 items"),
        ([b"a", "b"], "returned a str result"),
        (b"ab", "not a sequence of bytes"),
        (pa.array(["a", "b"]), "Arrow array of string"),
        (pa.array([b"a", None]), "null results"),
    ]:
        with pytest.raises(ValueError, match=message):
            result_array(results, 2)


def test_a_batch_travels_as_arrow_ipc() -> None:
    batch = batch_of("ints", "strings", "dates")
    assert read_batch(write_batch(batch)).equals(batch)
    with pytest.raises(ValueError, match="not an Arrow IPC stream"):
        read_batch(b"not arrow")
    assert issubclass(ColumnarUnavailableError, Exception)
