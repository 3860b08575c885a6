from __future__ import annotations

import copy as copy_module
import dataclasses
import os
import pickle
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest

from membership_tables import (
    InvalidClusterIdError,
    InvalidEntryError,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)
from membership_tables.model import validate_cluster_id
from membership_tables.testing import make_entry

T = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("10.0.0.5:11111@1700000000000", SiloAddress("10.0.0.5", 11111, 1700000000000)),
        ("silo-a.internal:1@0", SiloAddress("silo-a.internal", 1, 0)),
        ("[::1]:30000@17", SiloAddress("::1", 30000, 17)),
    ],
)
def test_address_round_trips_through_text(text: str, address: SiloAddress) -> None:
    assert SiloAddress.parse(text) == address
    assert str(address) == text


@pytest.mark.parametrize("text", ["", "host", "host:1", "host:x@1", "host:1@-2", ":1@1", "a b:1@1", "h:70000@1"])
def test_bad_address_text_is_refused_with_the_expected_format(text: str) -> None:
    with pytest.raises(InvalidEntryError, match=r"host:port@generation|port"):
        SiloAddress.parse(text)


def test_addresses_order_by_host_port_then_generation() -> None:
    old, new = SiloAddress("h", 1, 5), SiloAddress("h", 1, 6)
    assert old < new
    assert old.is_predecessor_of(new)
    assert not new.is_predecessor_of(old)
    assert not SiloAddress("h", 2, 1).is_predecessor_of(new)
    assert new.endpoint == "h:1"
    assert SiloAddress("::1", 5, 1).endpoint == "[::1]:5"


def test_naive_datetimes_are_refused_with_a_hint() -> None:
    with pytest.raises(InvalidEntryError, match=r"naive datetime.*timezone-aware"):
        make_entry(start_time=datetime(2026, 1, 1))
    voter = SiloAddress("h", 1, 1)
    with pytest.raises(InvalidEntryError, match="naive"):
        make_entry(suspect_times=((voter, datetime(2026, 1, 1)),))


def test_datetimes_are_normalised_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    entry = make_entry(start_time=datetime(2026, 1, 1, 12, tzinfo=plus_two))
    assert entry.start_time == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert entry.start_time.tzinfo is UTC


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("proxy_port", -1, "proxy_port"),
        ("proxy_port", 70000, "proxy_port"),
        ("status", 42, "unknown silo status"),
        ("properties", {"k": 1}, "str to str"),
        ("silo_name", None, "silo_name"),
        ("suspect_times", "nope", "suspect_times"),
    ],
)
def test_invalid_entry_fields_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidEntryError, match=message):
        make_entry(**{field: value})


def test_entries_are_immutable_and_replace_validates() -> None:
    entry = make_entry(properties={"a": "b"})
    with pytest.raises(TypeError):
        entry.properties["a"] = "c"  # type: ignore[index]
    assert entry.replace(status=SiloStatus.DEAD).status is SiloStatus.DEAD
    with pytest.raises(InvalidEntryError):
        entry.replace(i_am_alive_time=datetime(2026, 1, 1))


def test_last_activity_is_the_latest_of_start_heartbeat_and_votes() -> None:
    voter = SiloAddress("h", 1, 1)
    entry = make_entry(start_time=T, i_am_alive_time=T + timedelta(seconds=5))
    assert entry.last_activity == T + timedelta(seconds=5)
    voted = entry.replace(suspect_times=((voter, T + timedelta(minutes=1)),))
    assert voted.last_activity == T + timedelta(minutes=1)


def test_table_version_next_keeps_the_etag() -> None:
    assert TableVersion(4, "abc").next() == TableVersion(5, "abc")
    with pytest.raises(InvalidEntryError):
        TableVersion(-1, "x")


def test_table_data_is_sorted_and_looks_up_rows() -> None:
    b, a = make_entry(2), make_entry(1)
    data = MembershipTableData(((b, "e2"), (a, "e1")), TableVersion(2, "v"))
    assert data.entries == (a, b)
    assert data.get(a.silo_address) == (a, "e1")
    assert data.get(SiloAddress("nowhere", 9, 9)) is None


@pytest.mark.parametrize("cluster_id", ["prod", "a", "cluster-1.eu_west", "x" * 128])
def test_valid_cluster_ids(cluster_id: str) -> None:
    assert validate_cluster_id(cluster_id) == cluster_id


@pytest.mark.parametrize("cluster_id", ["", "-lead", "has/slash", "has space", "x" * 129, "ünï"])
def test_invalid_cluster_ids_say_what_is_allowed(cluster_id: str) -> None:
    with pytest.raises(InvalidClusterIdError, match="1-128 letters"):
        validate_cluster_id(cluster_id)


def test_cluster_id_of_wrong_type_is_a_type_error_too() -> None:
    with pytest.raises(InvalidClusterIdError, match="must be a str") as info:
        validate_cluster_id(42)
    assert isinstance(info.value, ValueError)


def test_membership_entry_requires_a_silo_address() -> None:
    with pytest.raises(InvalidEntryError, match="SiloAddress"):
        MembershipEntry(silo_address="h:1@1", status=SiloStatus.ACTIVE, start_time=T, i_am_alive_time=T)  # type: ignore[arg-type]


def test_rows_and_snapshots_survive_pickle_and_deepcopy() -> None:
    voter = SiloAddress("h", 1, 1)
    entry = make_entry(properties={"endpoint": "grpc://h:1"}, suspect_times=((voter, T),))
    data = MembershipTableData(((entry, "etag"),), TableVersion(3, "v"))
    for copy in (pickle.loads(pickle.dumps(data)), copy_module.deepcopy(data)):
        assert copy == data
        with pytest.raises(TypeError):
            copy.entries[0].properties["endpoint"] = "x"  # type: ignore[index]


def test_an_address_pickled_in_one_process_keys_dicts_in_another_with_other_string_hashes() -> None:
    """Addresses cache their hash; Spark ships them between processes whose ``str`` hashes differ."""
    address = SiloAddress("10.0.0.5", 11111, 1700000000000)
    script = (
        "import pickle, sys; from membership_tables import SiloAddress; "
        "shipped = pickle.loads(sys.stdin.buffer.read()); here = SiloAddress('10.0.0.5', 11111, 1700000000000); "
        "print(shipped[here], hash(next(iter(shipped))) == hash(here), next(iter(shipped)) == here)"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            input=pickle.dumps({address: "found"}),
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.decode().split() == ["found", "True", "True"]
    assert copy_module.deepcopy(address) == address
    assert hash(dataclasses.replace(address, port=2)) == hash(SiloAddress("10.0.0.5", 2, 1700000000000))
    assert repr(address) == "SiloAddress(host='10.0.0.5', port=11111, generation=1700000000000)"
    assert address != ("10.0.0.5", 11111, 1700000000000)
    assert sorted([SiloAddress("h", 2, 1), SiloAddress("h", 1, 9)]) == [SiloAddress("h", 1, 9), SiloAddress("h", 2, 1)]


def test_a_new_heartbeat_copy_validates_the_time_and_keeps_the_rest() -> None:
    entry = make_entry(start_time=T, suspect_times=[(SiloAddress("10.0.0.9", 1, 2), T)], properties={"k": "v"})
    later = entry.with_i_am_alive_time(T.astimezone(timezone(timedelta(hours=2))) + timedelta(seconds=5))
    assert later == entry.replace(i_am_alive_time=T + timedelta(seconds=5))
    assert later.i_am_alive_time.tzinfo is UTC
    assert entry.i_am_alive_time == T  # the original is untouched
    with pytest.raises(InvalidEntryError, match="i_am_alive_time is a naive datetime"):
        entry.with_i_am_alive_time(datetime(2026, 1, 1))
    with pytest.raises(InvalidEntryError, match="i_am_alive_time must be a datetime, got str 'yesterday'"):
        entry.with_i_am_alive_time("yesterday")
