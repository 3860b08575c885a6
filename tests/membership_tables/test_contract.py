"""``checked_updates``: what every backend's ``update_rows`` refuses before it talks to its store."""

from __future__ import annotations

from typing import Any

import pytest

from membership_tables import InvalidUpdateError
from membership_tables.contract import checked_updates
from membership_tables.testing import make_entry

FIRST, SECOND = make_entry(1001), make_entry(1002)


def test_a_valid_batch_comes_back_as_a_tuple() -> None:
    assert checked_updates([(FIRST, "e1"), (SECOND, "e2")], max_rows=2) == ((FIRST, "e1"), (SECOND, "e2"))


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        pytest.param([], "needs at least one", id="empty"),
        pytest.param((), "needs at least one", id="empty tuple"),
        pytest.param([(FIRST, "e1"), (FIRST, "e2")], "names silo 10.0.0.1:1001@1 twice", id="twice"),
        pytest.param([(FIRST, "e1")] * 3, "got 3 rows, but this store applies at most 2", id="too many"),
        pytest.param({"silo": "e1"}, "takes a sequence of .* got dict", id="a mapping"),
        pytest.param("e1", "takes a sequence of .* got str", id="a string"),
        pytest.param([FIRST], "update 0 of update_rows must be a \\(MembershipEntry, etag str\\) pair", id="no etag"),
        pytest.param([(FIRST, 7)], "update 0 .* pair", id="etag not a str"),
        pytest.param([(FIRST, "e1"), ("x", "e2")], "update 1 .* pair", id="not an entry"),
        pytest.param([(FIRST, "e1", "extra")], "update 0 .* pair", id="a triple"),
    ],
)
def test_bad_batches_say_what_is_wrong(updates: Any, message: str) -> None:
    with pytest.raises(InvalidUpdateError, match=message):
        checked_updates(updates, max_rows=2)


def test_the_error_is_a_value_error_of_the_package() -> None:
    assert issubclass(InvalidUpdateError, ValueError)
