"""The conformance checks, free of any test framework.

Each check is a function ``check(open_cluster)`` that raises ``ConformanceError``
when the backend breaks the contract. ``open_cluster(cluster_id)`` must return a
*new* handle on the same store for that cluster (the checks open several handles to
act as several silos, and use fresh random cluster ids so they can share one store).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from membership_tables.contract import MembershipTable
from membership_tables.model import (
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)

OpenCluster = Callable[[str], MembershipTable]
Check = Callable[[OpenCluster], None]

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


class ConformanceError(AssertionError):
    """A backend broke the ``MembershipTable`` contract."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def make_entry(
    port: int = 11111,
    *,
    host: str = "10.0.0.1",
    generation: int = 1,
    status: SiloStatus = SiloStatus.ACTIVE,
    start_time: datetime = T0,
    i_am_alive_time: datetime | None = None,
    **fields: object,
) -> MembershipEntry:
    """A plausible row for tests; ``fields`` override any other ``MembershipEntry`` field."""
    names: dict[str, object] = {"host_name": f"host-{port}", "silo_name": f"silo-{port}"}
    return MembershipEntry(
        silo_address=SiloAddress(host, port, generation),
        status=status,
        start_time=start_time,
        i_am_alive_time=i_am_alive_time or start_time,
        **{**names, **fields},  # type: ignore[arg-type]
    )


def new_cluster_id() -> str:
    return f"conformance-{uuid.uuid4().hex[:12]}"


def fresh_table(open_cluster: OpenCluster) -> MembershipTable:
    """A handle on a new, initialized cluster."""
    table = open_cluster(new_cluster_id())
    table.initialize(try_init_version=True)
    return table


def insert(table: MembershipTable, entry: MembershipEntry) -> None:
    """Insert ``entry`` based on a fresh read; fail the check if that does not work."""
    data = table.read_all()
    expect(table.insert_row(entry, data.version.next()), f"insert of {entry.silo_address} into a fresh table failed")


def assert_unchanged(table: MembershipTable, before: MembershipTableData, what: str) -> None:
    after = table.read_all()
    expect(
        after == before, f"{what} must have no side effect, but the table changed:\n  before={before}\n  after={after}"
    )


def row_etag(data: MembershipTableData, address: SiloAddress) -> str:
    row = data.get(address)
    expect(row is not None, f"row {address} is missing")
    assert row is not None
    return row[1]


def check_empty_table_reads_version_zero(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    data = table.read_all()
    expect(data.rows == (), f"a new cluster must have no rows, got {data.rows}")
    expect(data.version.version == 0, f"a new cluster must be at version 0, got {data.version}")
    expect(data.version.etag != "", "an initialized cluster must have a non-empty version etag")


def check_uninitialized_cluster_rejects_writes(open_cluster: OpenCluster) -> None:
    table = open_cluster(new_cluster_id())
    table.initialize(try_init_version=False)
    data = table.read_all()
    expect(
        data.version == TableVersion(0, ""),
        f"a cluster without a version row reads TableVersion(0, ''), got {data.version}",
    )
    expect(
        not table.insert_row(make_entry(), data.version.next()), "insert into a cluster without a version row must fail"
    )
    expect(table.read_all() == data, "a refused insert must leave the cluster uninitialized")


def check_insert_commits_plus_one(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    before = table.read_all().version
    entry = make_entry()
    expect(table.insert_row(entry, before.next()), "insert with the current version must succeed")
    after = table.read_all()
    expect(
        after.version.version == before.version + 1,
        f"insert must set version {before.version + 1}, got {after.version}",
    )
    expect(after.version.etag not in ("", before.etag), "insert must give the version a fresh etag")
    expect(
        after.entries == (entry,), f"the inserted row must read back equal:\n  wrote={entry}\n  read ={after.entries}"
    )


def check_update_commits_plus_one(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry(status=SiloStatus.JOINING)
    insert(table, entry)
    read = table.read_all()
    etag = row_etag(read, entry.silo_address)
    updated = entry.replace(status=SiloStatus.ACTIVE, properties={"endpoint": "grpc://x:1"})
    expect(table.update_row(updated, etag, read.version.next()), "update with current tokens must succeed")
    after = table.read_all()
    expect(
        after.version.version == read.version.version + 1, f"update must bump the version by one, got {after.version}"
    )
    expect(after.version.etag != read.version.etag, "update must give the version a fresh etag")
    expect(row_etag(after, entry.silo_address) != etag, "update must give the row a fresh etag")
    expect(after.entries == (updated,), f"the updated row must read back equal, got {after.entries}")


def check_round_trip_keeps_every_field(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    voter = SiloAddress("10.0.0.2", 22222, 7)
    entry = make_entry(
        host="fe80::1",
        generation=1_767_225_600_123,
        status=SiloStatus.SHUTTING_DOWN,
        start_time=datetime(2026, 3, 1, 12, 0, 0, 1, tzinfo=UTC),
        i_am_alive_time=datetime(2026, 3, 1, 12, 0, 30, 999999, tzinfo=UTC),
        role_name="worker",
        proxy_port=30000,
        update_zone=3,
        fault_zone=4,
        suspect_times=(
            (voter, datetime(2026, 3, 1, 12, 1, tzinfo=UTC)),
            (voter, datetime(2026, 3, 1, 12, 2, tzinfo=UTC)),
        ),
        properties={"endpoint": "grpc://10.0.0.1:1", "ünïcode": "✓ value with 'quotes' and \"double\""},
    )
    insert(table, entry)
    expect(table.read_all().entries == (entry,), f"every field must round-trip exactly, got {table.read_all().entries}")


def check_duplicate_insert_rejected(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry()
    insert(table, entry)
    before = table.read_all()
    clash = entry.replace(status=SiloStatus.JOINING, silo_name="impostor")
    expect(not table.insert_row(clash, before.version.next()), "insert of an existing silo must return False")
    assert_unchanged(table, before, "a duplicate insert")


def check_stale_version_rejected(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    first = make_entry(1001)
    stale = table.read_all()
    insert(table, first)
    before = table.read_all()
    expect(not table.insert_row(make_entry(1002), stale.version.next()), "insert with a stale version etag must fail")
    assert_unchanged(table, before, "an insert with a stale version")
    etag = row_etag(before, first.silo_address)
    expect(
        not table.update_row(first.replace(status=SiloStatus.DEAD), etag, stale.version.next()),
        "update with a current row etag but a stale version etag must fail",
    )
    assert_unchanged(table, before, "an update with a stale version")


def check_stale_row_etag_rejected(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry()
    insert(table, entry)
    old = table.read_all()
    old_etag = row_etag(old, entry.silo_address)
    expect(table.update_row(entry.replace(silo_name="v2"), old_etag, old.version.next()), "first update must succeed")
    before = table.read_all()
    expect(
        not table.update_row(entry.replace(silo_name="v3"), old_etag, before.version.next()),
        "update with a stale row etag (and a current version) must fail",
    )
    assert_unchanged(table, before, "an update with a stale row etag")


def check_update_of_missing_row_rejected(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    insert(table, make_entry(1001))
    before = table.read_all()
    etag = row_etag(before, SiloAddress("10.0.0.1", 1001, 1))
    expect(not table.update_row(make_entry(1002), etag, before.version.next()), "update of a missing row must fail")
    assert_unchanged(table, before, "an update of a missing row")


def check_update_never_recreates_removed_row(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry()
    insert(table, entry)
    read = table.read_all()
    dead = entry.replace(status=SiloStatus.DEAD)
    expect(table.update_row(dead, row_etag(read, entry.silo_address), read.version.next()), "marking Dead must succeed")
    read = table.read_all()
    etag = row_etag(read, entry.silo_address)
    expect(table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1, "cleanup must remove the old Dead row")
    after_cleanup = table.read_all()
    expect(not table.update_row(dead, etag, after_cleanup.version.next()), "update of a removed row must fail")
    expect(table.read_all().rows == (), "an update must never re-create a removed row")


def check_heartbeat_is_not_a_canonical_write(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry()
    insert(table, entry)
    before = table.read_all()
    etag = row_etag(before, entry.silo_address)
    beat = T0 + timedelta(seconds=30)
    table.update_i_am_alive(entry.silo_address, beat)
    after = table.read_all()
    expect(
        after.version == before.version, f"a heartbeat must not change the version: {before.version} -> {after.version}"
    )
    expect(row_etag(after, entry.silo_address) == etag, "a heartbeat must not change the row etag")
    expect(
        after.entries == (entry.replace(i_am_alive_time=beat),),
        f"a heartbeat changes only i_am_alive_time, got {after.entries}",
    )
    voted = entry.replace(suspect_times=((SiloAddress("10.0.0.9", 9, 9), beat),))
    expect(
        table.update_row(voted, etag, before.version.next()), "tokens read before a heartbeat must still work after it"
    )
    expect(
        table.read_all().entries[0].i_am_alive_time == beat,
        "an update carrying an older IAmAlive time must keep the newer heartbeat",
    )


def check_heartbeat_never_goes_backwards_or_creates(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry(i_am_alive_time=T0 + timedelta(minutes=5))
    insert(table, entry)
    table.update_i_am_alive(entry.silo_address, T0)
    expect(table.read_all().entries == (entry,), "an older heartbeat must not move IAmAlive backwards")
    before = table.read_all()
    table.update_i_am_alive(SiloAddress("10.0.0.1", 4242, 1), T0)
    assert_unchanged(table, before, "a heartbeat of an absent silo")


def _race(count: int, action: Callable[[int], bool]) -> list[bool]:
    barrier = threading.Barrier(count)

    def run(index: int) -> bool:
        barrier.wait()
        return action(index)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def check_parallel_inserts_have_one_winner(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    version = setup.read_all().version.next()
    handles = [open_cluster(cluster_id) for _ in range(20)]
    try:
        results = _race(20, lambda i: handles[i].insert_row(make_entry(silo_name=f"contender-{i}"), version))
    finally:
        for handle in handles:
            handle.close()
    expect(results.count(True) == 1, f"exactly one of 20 parallel inserts must win, {results.count(True)} did")
    data = setup.read_all()
    winner = results.index(True)
    expect(data.version.version == 1, f"one winning insert sets version 1, got {data.version}")
    expect(
        [e.silo_name for e in data.entries] == [f"contender-{winner}"],
        f"the winner's row must be stored, got {data.entries}",
    )


def check_parallel_read_modify_write_all_succeed(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    entry = make_entry()
    insert(setup, entry)
    handles = [open_cluster(cluster_id) for _ in range(19)]

    def add_property(index: int) -> bool:
        table = handles[index]
        for _ in range(2000):
            data = table.read_row(entry.silo_address)
            row = data.get(entry.silo_address)
            assert row is not None
            properties = {**row[0].properties, f"writer-{index}": str(index)}
            if table.update_row(row[0].replace(properties=properties), row[1], data.version.next()):
                return True
        return False

    try:
        results = _race(19, add_property)
    finally:
        for handle in handles:
            handle.close()
    expect(all(results), f"every read-modify-write updater must eventually succeed, got {results}")
    data = setup.read_all()
    expect(data.version.version == 20, f"1 insert + 19 updates must leave version 20, got {data.version}")
    expected = {f"writer-{i}": str(i) for i in range(19)}
    expect(
        dict(data.entries[0].properties) == expected, f"no update may be lost, got {dict(data.entries[0].properties)}"
    )


def check_updates_of_different_rows_are_ordered(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    first, second = make_entry(1001), make_entry(1002)
    insert(setup, first)
    insert(setup, second)
    read = setup.read_all()
    rows = [(first, row_etag(read, first.silo_address)), (second, row_etag(read, second.silo_address))]
    handles = [open_cluster(cluster_id) for _ in range(2)]
    try:
        results = _race(
            2,
            lambda i: handles[i].update_row(rows[i][0].replace(silo_name=f"w{i}"), rows[i][1], read.version.next()),
        )
    finally:
        for handle in handles:
            handle.close()
    expect(results.count(True) == 1, f"two updates of different rows from one version: exactly one wins, got {results}")
    data = setup.read_all()
    expect(data.version.version == read.version.version + 1, f"only one write may commit, got {data.version}")
    expect(
        sum(e.silo_name.startswith("w") for e in data.entries) == 1,
        f"only the winner's row changes, got {data.entries}",
    )


def check_reads_are_never_torn(open_cluster: OpenCluster) -> None:
    """A writer stamps each row it writes with the version it sets; a reader checks stamps.

    In an untorn snapshot at version V every stamp is <= V and, once written, the row
    stamped V is present.
    """
    cluster_id = new_cluster_id()
    writer_table = open_cluster(cluster_id)
    writer_table.initialize()
    addresses = [make_entry(1000 + i).silo_address for i in range(3)]
    for i in range(3):
        insert(writer_table, make_entry(1000 + i, properties={"stamp": str(i + 1)}))
    stop = threading.Event()
    failures: list[str] = []

    def write() -> None:
        index = 0
        while not stop.is_set() and index < 150:
            data = writer_table.read_all()
            address = addresses[index % 3]
            row = data.get(address)
            assert row is not None
            stamped = row[0].replace(properties={"stamp": str(data.version.version + 1)})
            writer_table.update_row(stamped, row[1], data.version.next())
            index += 1

    reader_table = open_cluster(cluster_id)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        reads = 0
        while writer.is_alive() or reads < 5:
            data = reader_table.read_all()
            reads += 1
            stamps = [int(e.properties["stamp"]) for e in data.entries]
            if len(stamps) != 3 or max(stamps) != data.version.version:
                failures.append(f"torn read: version {data.version.version} with stamps {stamps}")
            if not writer.is_alive() and reads >= 5:
                break
    finally:
        stop.set()
        writer.join()
        reader_table.close()
    expect(not failures, "; ".join(failures[:3]))


def check_read_row_agrees_with_read_all(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    present, absent = make_entry(1001), make_entry(1002)
    insert(table, present)
    everything = table.read_all()
    one = table.read_row(present.silo_address)
    expect(one.version == everything.version, f"read_row must carry the current version, got {one.version}")
    expect(
        one.rows == (everything.get(present.silo_address),),
        f"read_row must return the same row and etag, got {one.rows}",
    )
    none = table.read_row(absent.silo_address)
    expect(
        none.rows == () and none.version == everything.version,
        f"read_row of an absent silo: no rows, current version; got {none}",
    )


def check_reads_are_detached(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    entry = make_entry(properties={"k": "v"})
    insert(table, entry)
    first = table.read_all()
    copy = MembershipTableData(first.rows, first.version)
    read = table.read_all()
    table.update_row(
        entry.replace(properties={"k": "changed"}), row_etag(read, entry.silo_address), read.version.next()
    )
    expect(first == copy, "a result already returned must not change when the table changes later")
    with contextlib.suppress(TypeError):
        first.entries[0].properties["k"] = "mutated"  # type: ignore[index]
    expect(table.read_all().entries[0].properties["k"] == "changed", "mutating a result must not reach the store")


def check_initialize_is_idempotent(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    table = open_cluster(cluster_id)
    table.initialize()
    insert(table, make_entry())
    before = table.read_all()
    table.initialize(try_init_version=True)
    table.initialize(try_init_version=False)
    other = open_cluster(cluster_id)
    other.initialize(try_init_version=True)
    other.close()
    assert_unchanged(table, before, "initialize on an initialized cluster")


def check_cleanup_removes_only_old_dead_rows(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    cutoff = T0 + timedelta(hours=1)
    old = T0 - timedelta(days=1)
    voter = SiloAddress("10.0.0.9", 9, 9)
    rows = {
        "old-dead": make_entry(1, status=SiloStatus.DEAD, start_time=old),
        "old-active": make_entry(2, status=SiloStatus.ACTIVE, start_time=old),
        "old-joining": make_entry(3, status=SiloStatus.JOINING, start_time=old),
        "dead-at-cutoff": make_entry(4, status=SiloStatus.DEAD, start_time=old, i_am_alive_time=cutoff),
        "dead-recent-alive": make_entry(
            5, status=SiloStatus.DEAD, start_time=old, i_am_alive_time=cutoff + timedelta(seconds=1)
        ),
        "dead-recent-vote": make_entry(
            6, status=SiloStatus.DEAD, start_time=old, suspect_times=((voter, cutoff + timedelta(minutes=1)),)
        ),
        "dead-old-vote": make_entry(7, status=SiloStatus.DEAD, start_time=old, suspect_times=((voter, old),)),
    }
    for entry in rows.values():
        insert(table, entry)
    before = table.read_all()
    removed = table.cleanup_defunct_entries(cutoff)
    after = table.read_all()
    kept = {e.silo_address for e in after.entries}
    expected_kept = {
        rows[k].silo_address
        for k in ("old-active", "old-joining", "dead-at-cutoff", "dead-recent-alive", "dead-recent-vote")
    }
    expect(removed == 2, f"cleanup must remove exactly the 2 old Dead rows, it reported {removed}")
    expect(kept == expected_kept, f"cleanup kept the wrong rows: {sorted(map(str, kept))}")
    expect(after.version == before.version, "cleanup must not change the version")
    expect(table.cleanup_defunct_entries(cutoff) == 0, "a repeated cleanup must remove nothing")


def check_clusters_are_isolated(open_cluster: OpenCluster) -> None:
    first, second = fresh_table(open_cluster), fresh_table(open_cluster)
    entry = make_entry()
    insert(first, entry)
    expect(second.read_all().rows == (), "a row of one cluster must not appear in another")
    expect(second.read_all().version.version == 0, "a write to one cluster must not bump another's version")
    insert(second, entry.replace(silo_name="other cluster"))
    second_before = second.read_all()
    dead = entry.replace(status=SiloStatus.DEAD)
    read = first.read_all()
    first.update_row(dead, row_etag(read, entry.silo_address), read.version.next())
    expect(
        first.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1, "cleanup must remove this cluster's old Dead row"
    )
    first.delete_cluster_entries()
    expect(first.read_all().rows == (), "delete_cluster_entries must remove this cluster's rows")
    expect(second.read_all() == second_before, "cleanup and deletion in one cluster must not touch another")


def check_delete_cluster_entries(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    insert(table, make_entry(1001))
    insert(table, make_entry(1002))
    table.delete_cluster_entries()
    data = table.read_all()
    expect(
        data.rows == () and data.version.version == 0, f"after delete_cluster_entries the cluster is empty, got {data}"
    )
    table.initialize()
    insert(table, make_entry(1001))
    expect(len(table.read_all().rows) == 1, "a deleted cluster can be initialized and used again")


CHECKS: tuple[Check, ...] = (
    check_empty_table_reads_version_zero,
    check_uninitialized_cluster_rejects_writes,
    check_insert_commits_plus_one,
    check_update_commits_plus_one,
    check_round_trip_keeps_every_field,
    check_duplicate_insert_rejected,
    check_stale_version_rejected,
    check_stale_row_etag_rejected,
    check_update_of_missing_row_rejected,
    check_update_never_recreates_removed_row,
    check_heartbeat_is_not_a_canonical_write,
    check_heartbeat_never_goes_backwards_or_creates,
    check_parallel_inserts_have_one_winner,
    check_parallel_read_modify_write_all_succeed,
    check_updates_of_different_rows_are_ordered,
    check_reads_are_never_torn,
    check_read_row_agrees_with_read_all,
    check_reads_are_detached,
    check_initialize_is_idempotent,
    check_cleanup_removes_only_old_dead_rows,
    check_clusters_are_isolated,
    check_delete_cluster_entries,
)


def run_conformance(open_cluster: OpenCluster) -> None:
    """Run every check; raise ``ConformanceError`` listing each one that failed."""
    failures = []
    for check in CHECKS:
        try:
            check(open_cluster)
        except ConformanceError as exc:
            failures.append(f"{check.__name__}: {exc}")
    if failures:
        raise ConformanceError("\n".join(failures))
