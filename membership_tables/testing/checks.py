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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate
from membership_tables.errors import InvalidUpdateError, MembershipTableError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)

OpenCluster = Callable[[str], MembershipTable]
Check = Callable[[OpenCluster], None]

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


class ConformanceError(MembershipTableError, AssertionError):
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


def check_updates_never_move_alive_backwards(open_cluster: OpenCluster) -> None:
    """The IAmAlive an update wrote (not only a heartbeat's) is kept against a later, older one."""
    table = fresh_table(open_cluster)
    entry = make_entry(i_am_alive_time=T0)
    insert(table, entry)
    read = table.read_all()
    newer = entry.replace(silo_name="v2", i_am_alive_time=T0 + timedelta(seconds=4))
    expect(table.update_row(newer, row_etag(read, entry.silo_address), read.version.next()), "update must succeed")
    read = table.read_all()
    older = entry.replace(silo_name="v3", i_am_alive_time=T0 + timedelta(seconds=1))
    expect(table.update_row(older, row_etag(read, entry.silo_address), read.version.next()), "update must succeed")
    read = table.read_all()
    expect(
        read.entries == (older.replace(i_am_alive_time=newer.i_am_alive_time),),
        f"an update_row with an older IAmAlive than an earlier update wrote must keep the newer, got {read.entries}",
    )
    oldest = entry.replace(silo_name="v4", i_am_alive_time=T0)
    expect(
        table.update_rows([(oldest, row_etag(read, entry.silo_address))], read.version.next()),
        "update_rows must succeed",
    )
    expect(
        table.read_all().entries == (oldest.replace(i_am_alive_time=newer.i_am_alive_time),),
        f"update_rows must keep the newer IAmAlive too, got {table.read_all().entries}",
    )


def _race(
    open_cluster: OpenCluster, cluster_id: str, count: int, action: Callable[[MembershipTable, int], bool]
) -> list[bool]:
    """``action(handle, index)`` for ``count`` indexes at once, each on a handle of its own (as
    ``count`` silos would), released together by a barrier; the results in index order."""
    handles = [open_cluster(cluster_id) for _ in range(count)]
    barrier = threading.Barrier(count)

    def run(index: int) -> bool:
        barrier.wait()
        return action(handles[index], index)

    try:
        with ThreadPoolExecutor(max_workers=count) as pool:
            return list(pool.map(run, range(count)))
    finally:
        for handle in handles:
            handle.close()


def check_parallel_inserts_have_one_winner(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    version = setup.read_all().version.next()
    results = _race(
        open_cluster, cluster_id, 20, lambda table, i: table.insert_row(make_entry(silo_name=f"contender-{i}"), version)
    )
    _expect_one_winner(setup, results, "contender-", 1, "parallel inserts")


def _expect_one_winner(table: MembershipTable, results: list[bool], prefix: str, version: int, what: str) -> None:
    """Exactly one of ``results`` won, the table is at ``version``, and its one row is the winner's
    (named ``prefix`` + the winner's index)."""
    winners = results.count(True)
    expect(winners == 1, f"exactly one of {len(results)} {what} must win, {winners} did")
    data = table.read_all()
    expect(data.version.version == version, f"only the winner commits: version {version}, got {data.version}")
    expect(
        [e.silo_name for e in data.entries] == [f"{prefix}{results.index(True)}"],
        f"the winner's row must be stored, got {data.entries}",
    )


def check_parallel_read_modify_write_all_succeed(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    entry = make_entry()
    insert(setup, entry)

    def add_property(table: MembershipTable, index: int) -> bool:
        for _ in range(2000):
            data = table.read_row(entry.silo_address)
            row = data.get(entry.silo_address)
            assert row is not None
            properties = {**row[0].properties, f"writer-{index}": str(index)}
            if table.update_row(row[0].replace(properties=properties), row[1], data.version.next()):
                return True
        return False

    results = _race(open_cluster, cluster_id, 19, add_property)
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
    results = _race(
        open_cluster,
        cluster_id,
        2,
        lambda table, i: table.update_row(rows[i][0].replace(silo_name=f"w{i}"), rows[i][1], read.version.next()),
    )
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


def by_silo(
    rows: Iterable[tuple[MembershipEntry, str] | None],
) -> dict[SiloAddress, tuple[MembershipEntry, str] | None]:
    """Rows by their silo, to compare reads whatever their order."""
    return {row[0].silo_address: row for row in rows if row is not None}


def check_read_rows_agrees_with_read_all(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    first, second, third, absent = make_entry(1001), make_entry(1002), make_entry(1003), make_entry(1004)
    for entry in (first, second, third):
        insert(table, entry)
    everything = table.read_all()
    asked = [third.silo_address, absent.silo_address, first.silo_address, third.silo_address]
    some = table.read_rows(asked)
    expect(some.version == everything.version, f"read_rows must carry the current version, got {some.version}")
    expect(
        len(some.rows) == 2
        and by_silo(some.rows) == by_silo(everything.get(silo.silo_address) for silo in (first, third)),
        f"read_rows must return each row asked for that exists, once, with its etag; got {some.rows}",
    )
    none = table.read_rows([])
    expect(
        none.rows == () and none.version == everything.version,
        f"read_rows of no silos: no rows, current version; got {none}",
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


# --- read_version --------------------------------------------------------------------------


def _expect_version_agrees(table: MembershipTable, when: str) -> None:
    version, everything = table.read_version(), table.read_all().version
    expect(
        version == everything,
        f"read_version must agree with read_all().version {when}: read_version={version}, read_all={everything}",
    )


def check_read_version_agrees_with_read_all(open_cluster: OpenCluster) -> None:
    table = open_cluster(new_cluster_id())
    table.initialize(try_init_version=False)
    expect(
        table.read_version() == UNINITIALIZED_VERSION,
        f"read_version of a cluster without a version row must be {UNINITIALIZED_VERSION}, got {table.read_version()}",
    )
    table.initialize()
    _expect_version_agrees(table, "after initialize")
    entry = make_entry()
    insert(table, entry)
    _expect_version_agrees(table, "after an insert")
    read = table.read_all()
    expect(
        table.update_row(entry.replace(silo_name="v2"), row_etag(read, entry.silo_address), read.version.next()),
        "update with current tokens must succeed",
    )
    _expect_version_agrees(table, "after an update")
    before = table.read_version()
    table.update_i_am_alive(entry.silo_address, T0 + timedelta(minutes=1))
    expect(table.read_version() == before, "a heartbeat must not change what read_version returns")
    table.delete_cluster_entries()
    expect(
        table.read_version() == UNINITIALIZED_VERSION,
        f"read_version after delete_cluster_entries must be {UNINITIALIZED_VERSION}, got {table.read_version()}",
    )
    table.initialize()
    _expect_version_agrees(table, "after a deleted cluster was initialized again")
    expect(table.read_version().etag != before.etag, "a re-initialized cluster must carry a fresh version etag")


def check_read_version_tokens_work_for_writes(open_cluster: OpenCluster) -> None:
    """The version read_version returns is the token a write needs, and it goes stale like read_all's."""
    table = fresh_table(open_cluster)
    first = make_entry(1001)
    version = table.read_version()
    expect(table.insert_row(first, version.next()), "an insert with the version from read_version must succeed")
    before = table.read_all()
    expect(not table.insert_row(make_entry(1002), version.next()), "a read_version token must go stale after a write")
    assert_unchanged(table, before, "an insert with a stale read_version token")


def check_read_version_is_monotonic_under_writes(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    writer_table = open_cluster(cluster_id)
    writer_table.initialize()
    entry = make_entry()
    insert(writer_table, entry)

    def write() -> None:
        for index in range(40):
            data = writer_table.read_row(entry.silo_address)
            row = data.get(entry.silo_address)
            assert row is not None
            writer_table.update_row(row[0].replace(silo_name=f"w{index}"), row[1], data.version.next())

    reader_table = open_cluster(cluster_id)
    writer = threading.Thread(target=write)
    writer.start()
    seen: list[TableVersion] = []
    try:
        while writer.is_alive() or not seen:
            seen.append(reader_table.read_version())
    finally:
        writer.join()
    numbers = [version.version for version in seen]
    expect(numbers == sorted(numbers), f"read_version must never go backwards, it returned versions {numbers}")
    expect(
        len({version.etag for version in seen}) == len(set(numbers)),
        f"each version read must carry one etag of its own, got {sorted(set(seen), key=lambda v: v.version)}",
    )
    _expect_version_agrees(reader_table, "after concurrent writes")


# --- update_rows -----------------------------------------------------------------------------


def _three_rows(table: MembershipTable) -> tuple[list[MembershipEntry], MembershipTableData]:
    entries = [make_entry(1001 + i, i_am_alive_time=T0 + timedelta(seconds=10)) for i in range(3)]
    for entry in entries:
        insert(table, entry)
    return entries, table.read_all()


def _address(entry: MembershipEntry) -> SiloAddress:
    return entry.silo_address


def _updates(read: MembershipTableData, entries: list[MembershipEntry]) -> list[RowUpdate]:
    return [(entry, row_etag(read, entry.silo_address)) for entry in entries]


def check_update_rows_commits_plus_one(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    (first, second, third), read = _three_rows(table)
    voter = SiloAddress("10.0.0.9", 9, 9)
    dead = [
        first.replace(status=SiloStatus.DEAD, suspect_times=((voter, T0 + timedelta(minutes=1)),)),
        second.replace(status=SiloStatus.DEAD, i_am_alive_time=T0),  # older than stored: the stored time stays
    ]
    expect(table.update_rows(_updates(read, dead), read.version.next()), "update_rows with current tokens must succeed")
    after = table.read_all()
    expect(
        after.version.version == read.version.version + 1,
        f"update_rows must bump the version by exactly one, whatever the number of rows; got {after.version}",
    )
    expect(after.version.etag not in ("", read.version.etag), "update_rows must give the version a fresh etag")
    expected = {
        first.silo_address: dead[0],
        second.silo_address: dead[1].replace(i_am_alive_time=second.i_am_alive_time),
        third.silo_address: third,
    }
    actual = {entry.silo_address: entry for entry in after.entries}
    expect(
        actual == expected,
        "update_rows must replace exactly the given rows, keeping the newer stored IAmAlive time:\n"
        f"  expected={sorted(expected.values(), key=_address)}\n  read    ={sorted(actual.values(), key=_address)}",
    )
    for entry in (first, second):
        expect(
            row_etag(after, entry.silo_address) != row_etag(read, entry.silo_address),
            f"update_rows must give row {entry.silo_address} a fresh etag",
        )
    expect(
        row_etag(after, third.silo_address) == row_etag(read, third.silo_address),
        "a row update_rows was not given must keep its etag",
    )


def check_update_rows_is_all_or_nothing(open_cluster: OpenCluster) -> None:
    """A stale or never-issued etag in any position, or a stale version: False, and nothing changes."""
    table = fresh_table(open_cluster)
    entries, _ = _three_rows(table)
    for position, entry in enumerate(entries):
        read = table.read_all()
        old = row_etag(read, entry.silo_address)
        expect(
            table.update_row(entry.replace(silo_name=f"moved-{position}"), old, read.version.next()),
            "update with current tokens must succeed",
        )
        before = table.read_all()
        renamed = [row.replace(silo_name="batch") for row in before.entries]
        for bad in (old, "never-issued-etag"):
            updates = _updates(before, renamed)
            updates[position] = (updates[position][0], bad)
            expect(
                not table.update_rows(updates, before.version.next()),
                f"update_rows with etag {bad!r} for row {position} ({entry.silo_address}) must return False",
            )
            assert_unchanged(table, before, f"an update_rows with a bad etag for row {position}")
    before = table.read_all()
    renamed = [row.replace(silo_name="batch") for row in before.entries]
    stale_version = TableVersion(before.version.version, "never-issued-etag")
    expect(not table.update_rows(_updates(before, renamed), stale_version), "update_rows with a bad version must fail")
    assert_unchanged(table, before, "an update_rows with a bad version etag")
    expect(table.update_rows(_updates(before, renamed), before.version.next()), "current tokens must then succeed")
    expect(
        not table.update_rows(_updates(before, renamed), before.version.next()),
        "update_rows must not succeed twice with the same tokens",
    )


def check_update_rows_of_a_missing_row_rejected(open_cluster: OpenCluster) -> None:
    """A row that was never there, or was removed by cleanup, fails the whole batch and is not re-created."""
    table = fresh_table(open_cluster)
    (first, second, third), read = _three_rows(table)
    dead = first.replace(status=SiloStatus.DEAD)
    expect(table.update_row(dead, row_etag(read, first.silo_address), read.version.next()), "marking Dead must work")
    removed_etag = row_etag(table.read_all(), first.silo_address)
    expect(table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1, "cleanup must remove the old Dead row")
    before = table.read_all()
    present = _updates(before, [second.replace(silo_name="b"), third.replace(silo_name="c")])
    for missing in ((dead, removed_etag), (make_entry(1999), row_etag(before, second.silo_address))):
        for position in range(3):
            updates = [*present[:position], missing, *present[position:]]
            expect(
                not table.update_rows(updates, before.version.next()),
                f"update_rows naming missing row {missing[0].silo_address} at position {position} must fail",
            )
            assert_unchanged(table, before, f"an update_rows naming a missing row at position {position}")


def check_update_rows_refuses_bad_batches(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    limit = table.max_rows_per_update
    expect(
        isinstance(limit, int) and not isinstance(limit, bool) and limit >= 2,
        f"max_rows_per_update must be an int of at least 2, got {limit!r}",
    )
    (first, second, _), before = _three_rows(table)
    etag = row_etag(before, first.silo_address)
    too_many = [(make_entry(port), etag) for port in range(20_000, 20_000 + limit + 1)]
    batches: dict[str, list[RowUpdate]] = {
        "an empty batch": [],
        "a silo named twice": [(first, etag), (second, row_etag(before, second.silo_address)), (first, etag)],
        f"{limit + 1} rows (max_rows_per_update is {limit})": too_many,
    }
    writes: dict[str, Callable[[list[RowUpdate], TableVersion], object]] = {
        "update_rows": table.update_rows,
        "update_rows_with_etags": table.update_rows_with_etags,
    }
    for what, updates in batches.items():
        for name, write in writes.items():
            try:
                write(updates, before.version.next())
            except InvalidUpdateError as exc:
                expect(bool(str(exc)), f"the error of {name} for {what} must say what is wrong")
            else:
                raise ConformanceError(f"{name} with {what} must raise InvalidUpdateError")
            assert_unchanged(table, before, f"an {name} with {what}")


FULL_BATCH_CHECKED_UP_TO = 128
"""A batch of exactly ``max_rows_per_update`` rows is committed when the limit is at most this;
a larger limit (SQL, memory) is checked with a batch of this many rows."""


def check_update_rows_commits_a_full_batch(open_cluster: OpenCluster) -> None:
    """The limit the backend states is one its store really accepts."""
    table = fresh_table(open_cluster)
    size = min(table.max_rows_per_update, FULL_BATCH_CHECKED_UP_TO)
    entries = [make_entry(30_000 + index) for index in range(size)]
    for entry in entries:
        insert(table, entry)
    read = table.read_all()
    dead = [entry.replace(status=SiloStatus.DEAD) for entry in entries]
    expect(
        table.update_rows(_updates(read, dead), read.version.next()),
        f"update_rows of {size} rows (max_rows_per_update {table.max_rows_per_update}) must succeed",
    )
    after = table.read_all()
    expect(after.version.version == read.version.version + 1, f"one batch is one version, got {after.version}")
    expect(
        sorted(after.entries, key=_address) == sorted(dead, key=_address),
        f"every row of a {size}-row batch must be written, got {after.entries}",
    )


def check_update_rows_ordered_with_single_row_writes(open_cluster: OpenCluster) -> None:
    """update_rows takes its place in the one total order of versions: interleaved with update_row
    and insert_row, each write moves the version by one and invalidates the tokens before it."""
    table = fresh_table(open_cluster)
    (first, second, third), read = _three_rows(table)
    expect(
        table.update_rows(
            _updates(read, [first.replace(silo_name="a1"), second.replace(silo_name="b1")]), read.version.next()
        ),
        "update_rows must succeed",
    )
    middle = table.read_all()
    expect(
        not table.update_row(third.replace(silo_name="c1"), row_etag(middle, third.silo_address), read.version.next()),
        "update_row with the version read before an update_rows must fail",
    )
    expect(
        table.update_row(third.replace(silo_name="c1"), row_etag(middle, third.silo_address), middle.version.next()),
        "update_row after update_rows, with fresh tokens, must succeed",
    )
    expect(
        not table.update_rows(_updates(middle, [first.replace(silo_name="a2")]), middle.version.next()),
        "update_rows with the version read before an update_row must fail",
    )
    last = table.read_all()
    expect(table.insert_row(make_entry(1004), last.version.next()), "insert after update_rows must succeed")
    expect(
        table.read_all().version.version == read.version.version + 3,
        f"update_rows, update_row, insert_row: three versions, got {table.read_all().version}",
    )


def check_parallel_update_rows_have_one_winner(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    entries, read = _three_rows(setup)
    batches = [
        _updates(read, [entry.replace(silo_name=f"writer-{index}") for entry in entries[index % 2 :]])
        for index in range(4)
    ]
    results = _race(open_cluster, cluster_id, 4, lambda table, i: table.update_rows(batches[i], read.version.next()))
    expect(results.count(True) == 1, f"exactly one of 4 racing update_rows must win, got {results}")
    winner = results.index(True)
    data = setup.read_all()
    expect(data.version.version == read.version.version + 1, f"only one batch may commit, got {data.version}")
    names = {entry.silo_address: entry.silo_name for entry in data.entries}
    expected = {entry.silo_address: entry.silo_name for entry, _ in batches[winner]}
    expect(
        {address: names[address] for address in expected} == expected
        and all(not name.startswith("writer-") for address, name in names.items() if address not in expected),
        f"the table must hold exactly the winning batch (writer-{winner}), with no row of a losing one: {names}",
    )


def check_update_rows_races_update_row(open_cluster: OpenCluster) -> None:
    """update_rows and update_row of other rows, from one version: exactly one wins."""
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    (first, second, third), read = _three_rows(setup)
    batch = _updates(read, [first.replace(silo_name="batch"), second.replace(silo_name="batch")])

    def write(table: MembershipTable, index: int) -> bool:
        if index == 0:
            return table.update_rows(batch, read.version.next())
        return table.update_row(
            third.replace(silo_name="single"), row_etag(read, third.silo_address), read.version.next()
        )

    results = _race(open_cluster, cluster_id, 2, write)
    expect(results.count(True) == 1, f"update_rows vs update_row from one version: one must win, got {results}")
    data = setup.read_all()
    names = sorted(entry.silo_name for entry in data.entries)
    expected = ["batch", "batch", "silo-1003"] if results[0] else ["silo-1001", "silo-1002", "single"]
    expect(names == expected, f"only the winner's rows may change: expected names {expected}, got {names}")


# --- the *_with_etags writes ----------------------------------------------------------------


def _expect_read_back(table: MembershipTable, written: CommittedWrite | None, given: list[MembershipEntry]) -> None:
    """``written`` holds the given entries in order, with the etags and version a read sees right after."""
    expect(written is not None, "a write with current tokens must return a CommittedWrite, got None")
    assert written is not None
    after = table.read_all()
    expect(
        written.version == after.version,
        f"the CommittedWrite's version must be what read_all returns: returned {written.version}, read {after.version}",
    )
    expected = tuple((entry, row_etag(after, entry.silo_address)) for entry in given)
    expect(
        written.rows == expected,
        "the CommittedWrite must hold each row as given, in the order given, with the etag read_all returns:\n"
        f"  returned={written.rows}\n  expected={expected}",
    )


def check_insert_with_etags_returns_what_a_read_sees(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    before = table.read_all()
    entry = make_entry(status=SiloStatus.JOINING)
    written = table.insert_row_with_etags(entry, before.version.next())
    _expect_read_back(table, written, [entry])
    assert written is not None
    expect(written.version.version == before.version.version + 1, f"insert must set version 1, got {written.version}")
    active = entry.replace(status=SiloStatus.ACTIVE)
    expect(
        table.update_row(active, written.rows[0][1], written.version.next()),
        "the etags an insert_row_with_etags returns must work for the next update_row",
    )
    after = table.read_all()
    losers = {
        "an existing silo": (entry, after.version.next()),
        "a stale version": (make_entry(1002), written.version.next()),
    }
    for what, (loser, version) in losers.items():
        expect(table.insert_row_with_etags(loser, version) is None, f"insert_row_with_etags of {what} must return None")
        assert_unchanged(table, after, f"an insert_row_with_etags of {what}")


def check_update_rows_with_etags_returns_what_a_read_sees(open_cluster: OpenCluster) -> None:
    """In the order given, with each entry as given even when the stored IAmAlive time is newer."""
    table = fresh_table(open_cluster)
    (first, second, third), read = _three_rows(table)
    given = [
        third.replace(status=SiloStatus.DEAD, i_am_alive_time=T0),  # older than stored: the stored time stays
        first.replace(silo_name="renamed"),
    ]
    written = table.update_rows_with_etags(_updates(read, given), read.version.next())
    _expect_read_back(table, written, given)
    assert written is not None
    expect(written.version.version == read.version.version + 1, f"one batch is one version, got {written.version}")
    again = [entry.replace(silo_name="again") for entry, _ in written.rows]
    expect(
        table.update_rows(list(zip(again, (etag for _, etag in written.rows), strict=True)), written.version.next()),
        "the etags an update_rows_with_etags returns must work for the next update_rows",
    )
    read = table.read_all()
    single = table.update_rows_with_etags([(second, row_etag(read, second.silo_address))], read.version.next())
    _expect_read_back(table, single, [second])
    assert single is not None
    expect(
        table.update_row(second.replace(silo_name="last"), single.rows[0][1], single.version.next()),
        "the etag of a one-row update_rows_with_etags must work for the next update_row",
    )


def check_update_rows_with_etags_lost_race_returns_none(open_cluster: OpenCluster) -> None:
    table = fresh_table(open_cluster)
    (first, second, _), stale = _three_rows(table)
    expect(
        table.update_row(first.replace(silo_name="moved"), row_etag(stale, first.silo_address), stale.version.next()),
        "update with current tokens must succeed",
    )
    before = table.read_all()
    renamed = [first.replace(silo_name="batch"), second.replace(silo_name="batch")]
    races: dict[str, tuple[list[RowUpdate], TableVersion]] = {
        "a stale row etag": (_updates(stale, renamed), before.version.next()),
        "a stale version etag": (_updates(before, renamed), stale.version.next()),
        "a missing row": ([*_updates(before, renamed), (make_entry(1999), "never-issued-etag")], before.version.next()),
    }
    for what, (updates, version) in races.items():
        expect(
            table.update_rows_with_etags(updates, version) is None,
            f"update_rows_with_etags with {what} must return None",
        )
        assert_unchanged(table, before, f"an update_rows_with_etags with {what}")
    uninitialized = open_cluster(new_cluster_id())
    uninitialized.initialize(try_init_version=False)
    expect(
        uninitialized.insert_row_with_etags(make_entry(), UNINITIALIZED_VERSION.next()) is None,
        "insert_row_with_etags into a cluster without a version row must return None",
    )


def check_insert_at_next_version_returns_what_a_read_sees(open_cluster: OpenCluster) -> None:
    """No version token: it moves whatever version is current by one, and no token survives it."""
    table = fresh_table(open_cluster)
    first = make_entry(1001)
    insert(table, first)
    read = table.read_all()
    expect(
        table.update_row(first.replace(silo_name="moved"), row_etag(read, first.silo_address), read.version.next()),
        "update with current tokens must succeed",
    )
    entry = make_entry(1002, status=SiloStatus.JOINING)
    before_insert = table.read_version()
    written = table.insert_row_at_next_version(entry)
    _expect_read_back(table, written, [entry])
    assert written is not None
    expect(written.version.version == 3, f"two writes, then the insert at the next version: 3, got {written.version}")
    expect(
        not table.insert_row(make_entry(1003), before_insert.next()),
        "a version token read before an insert_row_at_next_version must be stale after it",
    )
    expect(
        table.update_row(entry.replace(status=SiloStatus.ACTIVE), written.rows[0][1], written.version.next()),
        "the etags an insert_row_at_next_version returns must work for the next update_row",
    )
    after = table.read_all()
    expect(table.insert_row_at_next_version(entry) is None, "insert_row_at_next_version of an existing silo: None")
    assert_unchanged(table, after, "an insert_row_at_next_version of an existing silo")
    uninitialized = open_cluster(new_cluster_id())
    uninitialized.initialize(try_init_version=False)
    expect(
        uninitialized.insert_row_at_next_version(make_entry()) is None,
        "insert_row_at_next_version into a cluster without a version row must return None",
    )
    expect(
        uninitialized.update_row_at_next_version(make_entry(), "never-issued-etag") is None,
        "update_row_at_next_version in a cluster without a version row must return None",
    )
    expect(uninitialized.read_all().rows == (), "a refused insert_row_at_next_version leaves no row")


def check_parallel_inserts_at_next_version_all_win(open_cluster: OpenCluster) -> None:
    """20 silos inserting their own rows at once: none loses to another, each gets its own version."""
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    written: list[CommittedWrite | None] = [None] * 20

    def contend(table: MembershipTable, index: int) -> bool:
        written[index] = table.insert_row_at_next_version(make_entry(2000 + index))
        return written[index] is not None

    results = _race(open_cluster, cluster_id, 20, contend)
    expect(all(results), f"every one of 20 parallel inserts of distinct silos must win, {results.count(False)} lost")
    data = setup.read_all()
    versions = sorted(write.version.version for write in written if write is not None)
    expect(versions == list(range(1, 21)), f"20 inserts at the next version set 1..20 once each, got {versions}")
    expect(data.version.version == 20, f"the table must be at version 20, got {data.version}")
    last = max((write for write in written if write is not None), key=lambda write: write.version.version)
    expect(last.version == data.version, f"the last insert's version is the table's: {last.version} vs {data.version}")
    for write in written:
        assert write is not None
        ((entry, etag),) = write.rows
        expect(row_etag(data, entry.silo_address) == etag, f"row {entry.silo_address}: the etag returned is read back")


def check_parallel_inserts_at_next_version_of_one_silo_have_one_winner(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    results = _race(
        open_cluster,
        cluster_id,
        20,
        lambda table, i: table.insert_row_at_next_version(make_entry(silo_name=f"contender-{i}")) is not None,
    )
    _expect_one_winner(setup, results, "contender-", 1, "parallel inserts at the next version of one silo")


def check_update_at_next_version_returns_what_a_read_sees(open_cluster: OpenCluster) -> None:
    """Conditioned on the row's etag alone: writes of other rows since do not make it lose."""
    table = fresh_table(open_cluster)
    (first, second, _), read = _three_rows(table)  # stored IAmAlive: T0 + 10 s
    expect(
        table.update_row(second.replace(silo_name="moved"), row_etag(read, second.silo_address), read.version.next()),
        "update with current tokens must succeed",
    )
    before = table.read_version()
    active = first.replace(status=SiloStatus.SHUTTING_DOWN, i_am_alive_time=T0)  # older than stored
    written = table.update_row_at_next_version(active, row_etag(read, first.silo_address))
    _expect_read_back(table, written, [active])
    assert written is not None
    expect(written.version.version == before.version + 1, f"one version after {before}, got {written.version}")
    stored = table.read_row(first.silo_address).entries
    expect(
        stored == (active.replace(i_am_alive_time=first.i_am_alive_time),),
        f"the row as given, with the newer stored IAmAlive time kept, got {stored}",
    )
    expect(
        not table.insert_row(make_entry(1009), before.next()),
        "a version token read before an update_row_at_next_version must be stale after it",
    )
    after = table.read_all()
    losers = {
        "a stale row etag": (active.replace(silo_name="again"), row_etag(read, first.silo_address)),
        "a missing row": (make_entry(1999), "never-issued-etag"),
    }
    for what, (entry, etag) in losers.items():
        expect(table.update_row_at_next_version(entry, etag) is None, f"update_row_at_next_version of {what}: None")
        assert_unchanged(table, after, f"an update_row_at_next_version of {what}")
    expect(
        table.update_row(active.replace(silo_name="next"), written.rows[0][1], after.version.next()),
        "the etag an update_row_at_next_version returns must work for the next update_row",
    )


def check_parallel_updates_at_next_version_of_distinct_rows_all_win(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    entries = [make_entry(3000 + index) for index in range(10)]
    for entry in entries:
        insert(setup, entry)
    read = setup.read_all()

    def update(table: MembershipTable, index: int) -> bool:
        entry = entries[index]
        active = entry.replace(silo_name=f"writer-{index}")
        return table.update_row_at_next_version(active, row_etag(read, entry.silo_address)) is not None

    results = _race(open_cluster, cluster_id, 10, update)
    expect(all(results), f"every one of 10 parallel updates of distinct rows must win, {results.count(False)} lost")
    data = setup.read_all()
    expect(data.version.version == 20, f"10 inserts and 10 updates: version 20, got {data.version}")
    names = sorted(entry.silo_name for entry in data.entries)
    expect(names == sorted(f"writer-{index}" for index in range(10)), f"every update is stored, got {names}")


def check_parallel_updates_at_next_version_of_one_row_have_one_winner(open_cluster: OpenCluster) -> None:
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    entry = make_entry()
    insert(setup, entry)
    etag = row_etag(setup.read_all(), entry.silo_address)
    results = _race(
        open_cluster,
        cluster_id,
        20,
        lambda table, i: table.update_row_at_next_version(entry.replace(silo_name=f"w{i}"), etag) is not None,
    )
    _expect_one_winner(setup, results, "w", 2, "parallel updates at the next version of one row from one etag")


def _expect_changes(table: MembershipTable, since: int, written_after: set[SiloAddress], what: str) -> None:
    """``read_changes(since)`` agrees with ``read_all`` on every row it returns, holds every row of
    ``written_after`` (written at a version after ``since``), and, where the store reads changes
    (``reads_changes``), no other row."""
    everything, changes = table.read_all(), table.read_changes(since)
    expect(changes.version == everything.version, f"{what}: read_changes must carry the current version, got {changes}")
    returned = {entry.silo_address for entry in changes.entries}
    expect(written_after <= returned, f"{what}: read_changes({since}) misses {sorted(written_after - returned)}")
    for row in changes.rows:
        expect(row == everything.get(row[0].silo_address), f"{what}: read_changes returns {row}, read_all another")
    if table.reads_changes:
        extra = sorted(returned - written_after)
        expect(not extra, f"{what}: read_changes({since}) returns rows not written since: {extra}")


def check_read_changes_returns_the_rows_written_since(open_cluster: OpenCluster) -> None:
    """Every kind of versioned write is found by ``read_changes`` from the version before it on;
    a heartbeat is no change."""
    table = fresh_table(open_cluster)
    a, b, c, d = (make_entry(1001 + index) for index in range(4))
    insert(table, a)  # version 1
    written = table.insert_row_with_etags(b, table.read_version().next())  # 2
    expect(written is not None, "insert_row_with_etags into a fresh table must win")
    table.insert_row_at_next_version(c)  # 3
    table.update_i_am_alive(a.silo_address, T0 + timedelta(minutes=1))
    _expect_changes(table, 0, {a.silo_address, b.silo_address, c.silo_address}, "three inserts")
    _expect_changes(table, 1, {b.silo_address, c.silo_address}, "after the first insert (and a heartbeat of it)")
    _expect_changes(table, 3, set(), "at the current version")
    read = table.read_all()
    updates = [(entry.replace(silo_name="moved"), row_etag(read, entry.silo_address)) for entry in (a, b)]
    expect(table.update_rows_with_etags(updates, read.version.next()) is not None, "update_rows_with_etags must win")
    _expect_changes(table, 3, {a.silo_address, b.silo_address}, "a two-row update")
    etag = row_etag(table.read_all(), c.silo_address)
    expect(table.update_row_at_next_version(c.replace(silo_name="moved"), etag) is not None, "must win")  # 5
    table.insert_row_at_next_version(d)  # 6
    _expect_changes(table, 4, {c.silo_address, d.silo_address}, "writes at the next version")
    _expect_changes(table, 5, {d.silo_address}, "the last insert")


def check_read_changes_finds_parallel_writes_at_their_versions(open_cluster: OpenCluster) -> None:
    """20 silos writing their rows at the next version at once: from the version before each
    write, ``read_changes`` finds that row, whichever version the store gave it."""
    cluster_id = new_cluster_id()
    setup = open_cluster(cluster_id)
    setup.initialize()
    written: list[CommittedWrite | None] = [None] * 20

    def contend(table: MembershipTable, index: int) -> bool:
        entry = make_entry(2000 + index)
        inserted = table.insert_row_at_next_version(entry)
        if inserted is None:
            return False
        written[index] = table.update_row_at_next_version(entry.replace(silo_name="on"), inserted.rows[0][1])
        return written[index] is not None

    results = _race(open_cluster, cluster_id, 20, contend)
    expect(all(results), f"20 silos writing their own rows at the next version all win, {results.count(False)} lost")
    last = {write.rows[0][0].silo_address: write.version.version for write in written if write is not None}
    for since in range(setup.read_version().version + 1):
        _expect_changes(setup, since, {silo for silo, version in last.items() if version > since}, f"since {since}")


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
    check_updates_never_move_alive_backwards,
    check_parallel_inserts_have_one_winner,
    check_parallel_read_modify_write_all_succeed,
    check_updates_of_different_rows_are_ordered,
    check_reads_are_never_torn,
    check_read_row_agrees_with_read_all,
    check_read_rows_agrees_with_read_all,
    check_reads_are_detached,
    check_initialize_is_idempotent,
    check_cleanup_removes_only_old_dead_rows,
    check_clusters_are_isolated,
    check_delete_cluster_entries,
    check_read_version_agrees_with_read_all,
    check_read_version_tokens_work_for_writes,
    check_read_version_is_monotonic_under_writes,
    check_update_rows_commits_plus_one,
    check_update_rows_is_all_or_nothing,
    check_update_rows_of_a_missing_row_rejected,
    check_update_rows_refuses_bad_batches,
    check_update_rows_commits_a_full_batch,
    check_update_rows_ordered_with_single_row_writes,
    check_parallel_update_rows_have_one_winner,
    check_update_rows_races_update_row,
    check_insert_with_etags_returns_what_a_read_sees,
    check_update_rows_with_etags_returns_what_a_read_sees,
    check_update_rows_with_etags_lost_race_returns_none,
    check_insert_at_next_version_returns_what_a_read_sees,
    check_parallel_inserts_at_next_version_all_win,
    check_parallel_inserts_at_next_version_of_one_silo_have_one_winner,
    check_update_at_next_version_returns_what_a_read_sees,
    check_parallel_updates_at_next_version_of_distinct_rows_all_win,
    check_parallel_updates_at_next_version_of_one_row_have_one_winner,
    check_read_changes_returns_the_rows_written_since,
    check_read_changes_finds_parallel_writes_at_their_versions,
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
