"""The conformance check for malformed rows: skipped and reported by every read, never fatal.

A store can hold a row no reader can parse (a disk or a hand edit gone wrong, someone
hostile with write access). The contract (see ``membership_tables.contract``) says reads
leave such a row out of ``rows`` and report it in ``malformed``. Writing one takes the
store's own driver, which no ``MembershipTable`` method offers, so the check takes a
``StoreMalformedRow`` hook from the backend's tests.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from membership_tables.contract import MembershipTable
from membership_tables.model import MembershipTableData, SiloAddress, SiloStatus
from membership_tables.testing.checks import T0, OpenCluster, expect, fresh_table, insert, make_entry, row_etag

StoreMalformedRow = Callable[[MembershipTable, SiloAddress], None]
"""``store(table, silo)``: write, through the store's own driver, a row of ``table``'s cluster
under ``silo``'s key that cannot be parsed, without moving the version (as a hand edit would)."""


def _expect_reported(data: MembershipTableData, expected_rows: int, what: str) -> None:
    expect(len(data.rows) == expected_rows, f"{what}: expected {expected_rows} well-formed rows, got {data.rows}")
    expect(len(data.malformed) == 1, f"{what}: expected the malformed row in `malformed`, got {data.malformed}")
    row = data.malformed[0]
    expect(bool(row.key) and bool(row.reason), f"{what}: a MalformedRow names its key and the reason, got {row!r}")


def check_malformed_rows_are_skipped_and_reported(open_cluster: OpenCluster, store: StoreMalformedRow) -> None:
    table = fresh_table(open_cluster)
    good, other = make_entry(1001, status=SiloStatus.DEAD), make_entry(1002)
    insert(table, good)
    insert(table, other)
    bad = make_entry(1003).silo_address
    store(table, bad)
    first = table.read_all()
    _expect_reported(first, 2, "read_all with one malformed row")
    expect(first.entries == (good, other), f"read_all keeps every well-formed row, got {first.entries}")
    expect(table.read_all() == first, "the malformed row is reported again on the next read, nothing else changed")
    expect(table.read_version() == first.version, "reading a malformed row never moves the version")

    alone = table.read_row(bad)
    _expect_reported(alone, 0, "read_row of the malformed row")
    expect(alone.malformed == first.malformed, "read_row reports the malformed row as read_all does")
    expect(table.read_row(good.silo_address).entries == (good,), "read_row of a well-formed row is unaffected")

    expect(not table.insert_row(make_entry(1003), first.version.next()), "insert over a malformed row: it exists")
    expect(
        table.insert_row_at_next_version(make_entry(1003)) is None,
        "insert_row_at_next_version over a malformed row returns None: it exists",
    )
    expect(
        table.update_row_at_next_version(make_entry(1003), "never-issued-etag") is None,
        "update_row_at_next_version of a malformed row returns None: no etag was ever handed out for it",
    )
    expect(table.read_version() == first.version, "writes of a malformed row never move the version")
    table.update_i_am_alive(bad, T0 + timedelta(minutes=1))  # must not raise
    renamed = other.replace(silo_name="renamed")
    expect(
        table.update_row(renamed, row_etag(first, other.silo_address), first.version.next()),
        "writes of well-formed rows still work beside a malformed one",
    )
    expect(
        table.cleanup_defunct_entries(T0 + timedelta(days=365)) == 1,
        "cleanup removes the old Dead well-formed row and keeps the malformed one (its age is unknown)",
    )
    after = table.read_all()
    _expect_reported(after, 1, "after writes and a cleanup")
    expect(after.entries == (renamed,), f"the written row reads back, got {after.entries}")

    table.delete_cluster_entries()
    table.initialize()
    cleared = table.read_all()
    expect(cleared.rows == () and cleared.malformed == (), f"delete_cluster_entries removes it too, got {cleared}")
