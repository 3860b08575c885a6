from __future__ import annotations

import pytest

from membership_tables import SiloAddress
from silo.membership.generation import next_generation

HOST, PORT = "10.0.0.1", 11111


@pytest.mark.parametrize(
    ("clock_ms", "known", "expected", "case"),
    [
        (1000, [], 1000, "first start: the clock"),
        (1000, [SiloAddress(HOST, PORT, 900)], 1000, "the clock moved on: the clock"),
        (1000, [SiloAddress(HOST, PORT, 5000)], 5001, "the clock stepped back: one past the newest"),
        (1000, [SiloAddress(HOST, PORT, 5000), SiloAddress(HOST, PORT, 7000)], 7001, "several incarnations"),
        (1000, [SiloAddress(HOST, PORT, 1000)], 1001, "same millisecond as the previous one"),
        (1000, [SiloAddress(HOST, PORT + 1, 9000), SiloAddress("10.0.0.2", PORT, 9000)], 1000, "other endpoints"),
    ],
)
def test_generations_only_increase_per_endpoint(
    clock_ms: int, known: list[SiloAddress], expected: int, case: str
) -> None:
    generation = next_generation(clock_ms, HOST, PORT, known)
    assert generation == expected, case
    assert all(SiloAddress(HOST, PORT, generation) > silo for silo in known if silo.endpoint == f"{HOST}:{PORT}")
