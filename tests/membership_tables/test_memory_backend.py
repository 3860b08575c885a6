from __future__ import annotations

import uuid

from membership_tables import open_table
from membership_tables.memory import InMemoryMembershipTable
from membership_tables.testing import make_entry


def test_handles_with_the_same_name_share_state_and_other_names_do_not() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    first, second = open_table(f"memory://{name}", "c1"), open_table(f"memory://{name}", "c1")
    elsewhere = open_table(f"memory://{name}-other", "c1")
    for table in (first, second, elsewhere):
        table.initialize()
    assert first.insert_row(make_entry(), first.read_all().version.next())
    assert second.read_all().entries == (make_entry(),)
    assert elsewhere.read_all().rows == ()


def test_reset_forgets_a_store() -> None:
    name = f"reset-{uuid.uuid4().hex}"
    table = open_table(f"memory://{name}", "c1")
    table.initialize()
    assert table.insert_row(make_entry(), table.read_all().version.next())
    InMemoryMembershipTable.reset(name)
    assert open_table(f"memory://{name}", "c1").read_all().rows == ()
