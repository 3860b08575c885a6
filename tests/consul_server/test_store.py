"""The test server's KV state against Consul's documented KV and transaction semantics (no HTTP)."""

from __future__ import annotations

import pytest

from testbed.consul_server import KVOp, KVStore


@pytest.fixture
def store() -> KVStore:
    return KVStore()


def entry_of(store: KVStore, key: str) -> tuple[bytes, int, int]:
    _, entry = store.get(key)
    assert entry is not None, f"{key} is missing"
    return entry.value, entry.create_index, entry.modify_index


def test_cas_zero_creates_only(store: KVStore) -> None:
    assert store.put("k", b"first", cas=0)
    assert not store.put("k", b"second", cas=0)
    assert entry_of(store, "k")[0] == b"first"


def test_every_write_gets_a_new_index_and_keeps_the_create_index(store: KVStore) -> None:
    store.put("a", b"1")
    store.put("b", b"1")
    store.put("a", b"2")
    assert entry_of(store, "a") == (b"2", 1, 3)
    assert entry_of(store, "b") == (b"1", 2, 2)
    assert store.index == 3


def test_an_identical_write_changes_nothing_but_new_flags_do(store: KVStore) -> None:
    store.put("a", b"same")
    assert store.put("a", b"same")
    assert entry_of(store, "a")[2] == 1
    assert store.index == 1
    store.put("a", b"same", flags=7)
    assert entry_of(store, "a")[2] == 2


@pytest.mark.parametrize(("cas", "written"), [(1, True), (2, False), (0, False)])
def test_cas_writes_only_at_the_current_modify_index(store: KVStore, cas: int, written: bool) -> None:
    store.put("k", b"old")
    assert store.put("k", b"new", cas=cas) is written
    assert entry_of(store, "k")[0] == (b"new" if written else b"old")


def test_cas_of_a_missing_key_with_an_index_fails(store: KVStore) -> None:
    assert not store.put("k", b"v", cas=5)
    assert store.get("k")[1] is None


@pytest.mark.parametrize(("cas", "deleted", "answer"), [(1, True, True), (9, False, False)])
def test_delete_cas(store: KVStore, cas: int, deleted: bool, answer: bool) -> None:
    store.put("k", b"v")
    assert store.delete("k", cas=cas) is answer
    assert (store.get("k")[1] is None) is deleted


def test_delete_cas_of_a_missing_key_succeeds(store: KVStore) -> None:
    assert store.delete("absent", cas=3)


def test_a_prefix_is_a_plain_string_prefix(store: KVStore) -> None:
    for key in ("c1/version", "c1/members/a", "c10/version", "c2/x"):
        store.put(key, b"v")
    assert [entry.key for entry in store.list("c1/")[1]] == ["c1/members/a", "c1/version"]
    assert [entry.key for entry in store.list("c1")[1]] == ["c1/members/a", "c1/version", "c10/version"]
    store.delete("c1/", recurse=True)
    assert [entry.key for entry in store] == ["c10/version", "c2/x"]


def test_list_reports_the_newest_modify_index_of_the_prefix(store: KVStore) -> None:
    store.put("a/x", b"1")
    store.put("b/x", b"1")
    assert store.list("a/")[0] == 1
    assert store.list("missing/") == (2, [])


def test_a_transaction_commits_every_write_at_one_index(store: KVStore) -> None:
    outcome = store.txn([KVOp("set", "a", b"1"), KVOp("cas", "b", b"2", index=0), KVOp("get", "a")])
    assert outcome.ok
    assert [(entry.key, entry.modify_index, with_value) for entry, with_value in outcome.results] == [
        ("a", 1, False),
        ("b", 1, False),
        ("a", 1, True),
    ]
    assert store.index == 1


def test_a_failed_check_rolls_back_everything_and_reports_every_failure(store: KVStore) -> None:
    store.put("version", b"0")
    before = list(store)
    outcome = store.txn(
        [
            KVOp("cas", "version", b"1", index=1),
            KVOp("set", "row", b"new"),
            KVOp("cas", "other", b"x", index=7),
            KVOp("check-index", "version", index=99),
        ]
    )
    assert not outcome.ok
    assert [(error.op_index, error.what) for error in outcome.errors] == [
        (2, 'failed to set key "other", index is stale'),
        (3, 'failed index check for key "version", current modify index 2 != 99'),
    ]
    assert outcome.results == ()
    assert list(store) == before
    assert store.index == 1


@pytest.mark.parametrize(
    ("op", "error"),
    [
        (KVOp("get", "absent"), 'key "absent" doesn\'t exist'),
        (KVOp("check-index", "absent", index=1), 'failed to check index, key "absent" doesn\'t exist'),
        (KVOp("check-not-exists", "present"), 'key "present" exists'),
        (KVOp("delete-cas", "present", index=42), 'failed to delete key "present", index is stale'),
        (KVOp("frobnicate", "present"), 'unknown KV verb "frobnicate"'),
        (KVOp("lock", "present"), 'KV verb "lock" needs sessions, which the Consul test server does not support'),
    ],
)
def test_failing_operations_say_why(store: KVStore, op: KVOp, error: str) -> None:
    store.put("present", b"v")
    outcome = store.txn([op])
    assert [(e.op_index, e.what) for e in outcome.errors] == [(0, error)]


def test_later_operations_see_earlier_ones(store: KVStore) -> None:
    store.put("t/a", b"1")
    outcome = store.txn(
        [
            KVOp("delete-tree", "t/"),
            KVOp("check-not-exists", "t/a"),
            KVOp("set", "t/b", b"2"),
            KVOp("get-tree", "t/"),
        ]
    )
    assert outcome.ok
    assert [(entry.key, entry.value) for entry, _ in outcome.results] == [("t/b", b"2"), ("t/b", b"2")]
    assert [entry.key for entry in store] == ["t/b"]


def test_a_key_created_and_deleted_in_one_transaction_leaves_nothing(store: KVStore) -> None:
    assert store.txn([KVOp("set", "k", b"v"), KVOp("delete", "k")]).ok
    assert list(store) == []
