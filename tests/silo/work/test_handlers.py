"""The built-in work handlers: pure, deterministic, one result per item."""

from __future__ import annotations

import pytest

from silo.work.handlers import (
    BUILTIN_HANDLERS,
    CHECKSUM_HANDLER,
    ECHO_HANDLER,
    checksum,
    checksum_handler,
    checksum_total,
    combine_totals,
    echo_handler,
)


def test_every_silo_serves_the_examples_and_the_registry_is_read_only() -> None:
    assert BUILTIN_HANDLERS[CHECKSUM_HANDLER] is checksum_handler
    assert BUILTIN_HANDLERS[ECHO_HANDLER] is echo_handler
    with pytest.raises(TypeError):
        BUILTIN_HANDLERS["mine"] = echo_handler  # type: ignore[index]


def test_checksum_is_eight_stable_bytes_per_item_in_order() -> None:
    items = [("a", b"1"), ("b", b"2"), ("a", b"1")]
    results = checksum_handler(items)
    assert results == [checksum("a", b"1"), checksum("b", b"2"), checksum("a", b"1")]
    assert all(len(result) == 8 for result in results)
    assert results[0] != results[1]
    assert checksum("a", b"1").hex() == "43e31b4b34d5a229"  # pinned: no per-process salt, same on every host


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("ab", b"c"), ("a", b"bc")),  # the key is length-prefixed, not just concatenated
        (("k", b""), ("k", b"\x00")),
        (("k1", b"p"), ("k2", b"p")),
    ],
)
def test_checksum_separates_key_from_payload(left: tuple[str, bytes], right: tuple[str, bytes]) -> None:
    assert checksum(*left) != checksum(*right)


def test_checksum_total_ignores_order_but_counts_duplicates_and_losses() -> None:
    digests = checksum_handler([(f"k{i}", b"x") for i in range(100)])
    total = checksum_total(digests)
    assert checksum_total(reversed(digests)) == total
    assert checksum_total([*digests, digests[0]]) != total
    assert checksum_total(digests[1:]) != total
    assert 0 <= total < 2**64
    assert checksum_total([]) == 0
    assert combine_totals([checksum_total(digests[:40]), checksum_total(digests[40:])]) == total


def test_echo_returns_payloads() -> None:
    assert echo_handler([("a", b"1"), ("b", b"")]) == [b"1", b""]
