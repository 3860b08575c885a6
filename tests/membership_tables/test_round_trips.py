"""Each networked backend's store round trips per call, counted on the wire: a regression fails here.

The counts are exact (client flights through ``testbed.services.counting_proxy``), not timings,
and are what docs/tables.md reports per backend. A change that adds a round trip to a vote, a
read or a heartbeat must change ``EXPECTED`` (and the docs) on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.round_trips import BACKENDS, OPERATIONS, Config, measure, target

EXPECTED: dict[str, dict[str, int]] = {
    "postgres": {
        "vote": 2,
        "update_rows_1": 1,
        "update_rows_3": 1,
        "lost_race": 1,
        "read_all": 1,
        "read_all_after_idle": 2,
        "read_row": 1,
        "read_version": 1,
        "update_row_at_next_version": 1,
        "insert_row_at_next_version": 1,
        "update_i_am_alive": 1,
    },
    "mariadb": {
        "vote": 4,
        "update_rows_1": 2,
        "update_rows_3": 2,
        "lost_race": 2,
        "read_all": 2,
        "read_all_after_idle": 3,
        "read_row": 2,
        "read_version": 2,
        "update_row_at_next_version": 4,
        "insert_row_at_next_version": 4,
        "update_i_am_alive": 2,
    },
    "zookeeper": {
        "vote": 14,
        "update_rows_1": 1,
        "update_rows_3": 1,
        "lost_race": 1,
        "read_all": 13,
        "read_all_after_idle": 13,
        "read_row": 4,
        "read_version": 1,
        "update_row_at_next_version": 5,
        "insert_row_at_next_version": 5,
        "update_i_am_alive": 2,
    },
    "dynamodb": {
        "vote": 4,
        "update_rows_1": 1,
        "update_rows_3": 1,
        "lost_race": 1,
        "read_all": 3,
        "read_all_after_idle": 3,
        "read_row": 1,
        "read_version": 1,
        "update_row_at_next_version": 2,
        "insert_row_at_next_version": 2,
        "update_i_am_alive": 1,
    },
    "consul": {
        "vote": 2,
        "update_rows_1": 1,
        "update_rows_3": 1,
        "lost_race": 1,
        "read_all": 1,
        "read_all_after_idle": 1,
        "read_row": 1,
        "read_version": 1,
        "update_row_at_next_version": 2,
        "insert_row_at_next_version": 2,
        "update_i_am_alive": 2,
    },
}
"""Requests of each call of ``benchmarks.round_trips.OPERATIONS``, per backend: its round trips, but on
ZooKeeper, whose pipelined requests make a number of round trips that varies with timing (at most this)."""

CONNECTION_PER_REQUEST = ("dynamodb", "consul")
"""Test servers that close the connection after each answer (moto's and the Consul test server's
HTTP/1.0): every request opens a connection. The others keep theirs open after the warm-up."""


def test_every_backend_and_call_has_an_expected_count() -> None:
    assert set(EXPECTED) == set(BACKENDS)
    for backend, counts in EXPECTED.items():
        assert set(counts) == set(OPERATIONS), backend


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trips_per_call(backend: str, tmp_path: Path) -> None:
    with target(backend, tmp_path) as chosen:
        results = measure(chosen, Config(backends=(backend,), repeats=2))
    requests = {operation: sorted(set(entry["requests"])) for operation, entry in results.items()}
    assert requests == {operation: [count] for operation, count in EXPECTED[backend].items()}
    for operation, entry in results.items():
        assert max(entry["round_trips"]) <= EXPECTED[backend][operation], operation
        opened = entry["requests"] if backend in CONNECTION_PER_REQUEST else [0] * len(entry["requests"])
        assert entry["connections"] == opened, f"{operation} opened connections: {entry['connections']}"
    if backend != "zookeeper":  # a client that waits for each answer: a request is a round trip
        assert all(entry["round_trips"] == entry["requests"] for entry in results.values())
