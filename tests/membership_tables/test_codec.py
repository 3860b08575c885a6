from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from membership_tables import MalformedRowError, SiloAddress, SiloStatus
from membership_tables.codec import dumps, entry_to_document, loads
from membership_tables.testing import make_entry


def test_document_is_human_readable() -> None:
    voter = SiloAddress("10.0.0.2", 2, 3)
    entry = make_entry(suspect_times=((voter, datetime(2026, 1, 1, tzinfo=UTC)),), properties={"k": "v"})
    document = entry_to_document(entry)
    assert document["address"] == "10.0.0.1:11111@1"
    assert document["status"] == "ACTIVE"
    assert document["suspect_times"] == [{"by": "10.0.0.2:2@3", "at": "2026-01-01T00:00:00.000000+00:00"}]
    assert document["properties"] == {"k": "v"}


def test_round_trip() -> None:
    entry = make_entry(status=SiloStatus.JOINING, properties={"ü": "✓"})
    assert loads(dumps(entry), "test") == entry


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "expected a JSON object"),
        (json.dumps({**entry_to_document(make_entry()), "status": "ZOMBIE"}).encode(), "unknown status 'ZOMBIE'"),
        (json.dumps({**entry_to_document(make_entry()), "address": "nope"}).encode(), "cannot parse silo address"),
        (json.dumps({**entry_to_document(make_entry()), "start_time": "yesterday"}).encode(), "not an ISO-8601"),
        (json.dumps({**entry_to_document(make_entry()), "start_time": "2026-01-01T00:00:00"}).encode(), "naive"),
        (json.dumps({**entry_to_document(make_entry()), "suspect_times": [{"by": "h:1@1"}]}).encode(), "ISO-8601"),
    ],
)
def test_malformed_documents_name_the_row_and_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(MalformedRowError, match=message) as info:
        loads(data, "/membership/c1/h:1@1")
    assert "/membership/c1/h:1@1" in str(info.value)
    assert "nothing was changed" in str(info.value)
