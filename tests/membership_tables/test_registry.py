from __future__ import annotations

import subprocess
import sys

import pytest

import membership_tables
from membership_tables import InvalidClusterIdError, InvalidTableUriError, open_table
from membership_tables.memory import InMemoryMembershipTable


def test_public_names_are_exactly_the_intended_ones() -> None:
    assert sorted(membership_tables.__all__) == sorted(
        [
            "UNINITIALIZED_VERSION",
            "AccessDeniedError",
            "BackendNotInstalledError",
            "CommittedWrite",
            "InvalidClusterIdError",
            "InvalidEntryError",
            "InvalidUpdateError",
            "InvalidTableUriError",
            "MalformedRow",
            "MalformedRowError",
            "MembershipEntry",
            "MembershipTable",
            "MembershipTableData",
            "MembershipTableError",
            "ReadOnlyTableError",
            "SiloAddress",
            "SiloStatus",
            "TableUnavailableError",
            "TableVersion",
            "Vote",
            "open_table",
        ]
    )
    for name in membership_tables.__all__:
        assert getattr(membership_tables, name) is not None


def test_error_tree_has_one_root() -> None:
    root = membership_tables.MembershipTableError
    for name in membership_tables.__all__:
        value = getattr(membership_tables, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, root), name


def test_memory_uri_opens_the_memory_backend() -> None:
    table = open_table("memory://registry-test", "c1")
    assert isinstance(table, InMemoryMembershipTable)
    assert table.cluster_id == "c1"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("redis://localhost/0", "unknown table URI scheme 'redis'.*supported schemes"),
        ("membership.db", "table URI must be a string like"),
        ("memory://", "expected 'memory://NAME'"),
        ("memory://x?y=1", "expected 'memory://NAME'"),
    ],
)
def test_bad_uris_say_what_is_wrong(uri: str, message: str) -> None:
    with pytest.raises(InvalidTableUriError, match=message):
        open_table(uri, "c1")


def test_non_string_uri_is_refused() -> None:
    with pytest.raises(InvalidTableUriError):
        open_table(42, "c1")  # type: ignore[arg-type]


def test_bad_cluster_id_is_refused_before_anything_opens() -> None:
    with pytest.raises(InvalidClusterIdError):
        open_table("memory://x", 7)  # type: ignore[arg-type]


def test_importing_the_package_imports_no_driver() -> None:
    code = (
        "import sys, membership_tables, silo\n"
        "drivers = {'sqlalchemy', 'kazoo', 'consul', 'boto3', 'psycopg', 'pymysql', 'pyspark'}\n"
        "print(sorted(drivers & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
