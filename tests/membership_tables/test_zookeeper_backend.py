"""ZooKeeper-specific behaviour: URIs, the layout an admin sees, outages, malformed znodes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from membership_tables import (
    InvalidTableUriError,
    InvalidUpdateError,
    MalformedRowError,
    SiloStatus,
    TableUnavailableError,
    open_table,
)
from membership_tables.codec import entry_to_document
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from membership_tables.zookeeper import (
    DEFAULT_CHROOT,
    MAX_MULTI_ROW_BYTES,
    ZooKeeperMembershipTable,
    ZooKeeperSettings,
)
from testbed.services.process import free_port, wait_until
from testbed.services.zookeeper import ZooKeeperServer


def settings_of(uri: str, **options: object) -> ZooKeeperSettings:
    table = open_table(uri, "c1", **options)  # no connection until first use
    assert isinstance(table, ZooKeeperMembershipTable)
    return table.settings


@pytest.mark.parametrize(
    ("uri", "hosts", "chroot"),
    [
        ("zookeeper://127.0.0.1:2181/silo", "127.0.0.1:2181", "/silo"),
        ("zookeeper://zk1:2181,zk2:2182,zk3/a/b/", "zk1:2181,zk2:2182,zk3:2181", "/a/b"),
        ("zookeeper://[::1]:2181,10.0.0.2:2181", "[::1]:2181,10.0.0.2:2181", DEFAULT_CHROOT),
        ("zookeeper://zk:2181/", "zk:2181", DEFAULT_CHROOT),
        ("ZooKeeper://zk:2181/membership", "zk:2181", "/membership"),
    ],
)
def test_uri_names_hosts_and_chroot(uri: str, hosts: str, chroot: str) -> None:
    settings = settings_of(uri)
    assert (settings.hosts, settings.chroot) == (hosts, chroot)


def test_timeouts_come_from_options_or_the_query_string() -> None:
    assert settings_of("zookeeper://zk:2181/x?timeout=3").timeout == 3.0
    settings = settings_of("zookeeper://zk:2181/x?timeout=3", timeout=7, connect_timeout="0.5")
    assert (settings.timeout, settings.connect_timeout) == (7.0, 0.5)


@pytest.mark.parametrize(
    ("uri", "options", "message"),
    [
        ("zookeeper:///chroot", {}, "no valid host"),
        ("zookeeper://zk1:2181,,zk2:2181/x", {}, "no valid host"),
        ("zookeeper://zk:0/x", {}, "bad port"),
        ("zookeeper://zk:99999/x", {}, "bad port"),
        ("zookeeper://zk:port/x", {}, "bad port"),
        ("zookeeper://user@zk:2181/x", {}, "no password"),
        ("zookeeper://:pw@zk:2181/x", {}, "both parts non-empty"),
        ("zookeeper://a%3Ab:pw@zk:2181/x", {}, "no ':' in the user"),
        ("zookeeper://zk:2181/a//b", {}, "invalid chroot"),
        ("zookeeper://zk:2181/a/../b", {}, "invalid chroot"),
        ("zookeeper://zk:2181/x#frag", {}, "fragment"),
        ("zookeeper://zk:2181/x?retries=3", {}, "unknown ZooKeeper table option"),
        ("zookeeper://zk:2181/x", {"session": 3}, "unknown ZooKeeper table option"),
        ("zookeeper://zk:2181/x?timeout=soon", {}, "positive number of seconds"),
        ("zookeeper://zk:2181/x", {"connect_timeout": -1}, "positive number of seconds"),
        ("zookeeper://zk:2181/x", {"timeout": float("inf")}, "positive number of seconds"),
    ],
)
def test_bad_uris_and_options_are_refused(uri: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTableUriError, match=message):
        open_table(uri, "c1", **options)


def test_unreachable_server_raises_table_unavailable() -> None:
    table = open_table(f"zookeeper://127.0.0.1:{free_port()}/x", "c1", connect_timeout=0.5)
    with table, pytest.raises(TableUnavailableError, match="cannot connect") as caught:
        table.read_all()
    assert isinstance(caught.value.__cause__, KazooTimeoutError)


def test_closed_handle_refuses_use() -> None:
    table = open_table("zookeeper://127.0.0.1:1/x", "c1")
    table.close()
    with pytest.raises(TableUnavailableError, match="closed"):
        table.read_all()


# -- against a real server ----------------------------------------------------------------


@pytest.fixture
def chroot() -> str:
    return f"/backend-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def table(zookeeper_server: ZooKeeperServer, chroot: str) -> Iterator[ZooKeeperMembershipTable]:
    handle = open_table(zookeeper_server.uri(chroot), "prod")
    assert isinstance(handle, ZooKeeperMembershipTable)
    handle.initialize()
    with handle:
        yield handle


@pytest.fixture
def zk(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain kazoo client: what an admin's tools see."""
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.mark.slow
def test_layout_is_readable_by_an_admin(table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str) -> None:
    first, second = make_entry(1001, status=SiloStatus.JOINING), make_entry(1002, properties={"endpoint": "e"})
    for entry in (first, second):
        assert table.insert_row(entry, table.read_all().version.next())
    data = table.read_all()

    cluster_data, cluster_stat = zk.get(f"{chroot}/prod")
    assert json.loads(cluster_data) == {"version": 2}
    assert data.version.etag == str(cluster_stat.version)
    assert sorted(zk.get_children(f"{chroot}/prod")) == ["10.0.0.1:1001@1", "10.0.0.1:1002@1"]
    for entry in (first, second):
        row_data, row_stat = zk.get(f"{chroot}/prod/{entry.silo_address}")
        assert json.loads(row_data) == entry_to_document(entry)
        assert data.get(entry.silo_address) == (entry, f"{row_stat.czxid}.{row_stat.version}")
        alive_data, _ = zk.get(f"{chroot}/prod/{entry.silo_address}/alive")
        assert json.loads(alive_data) == {"i_am_alive_time": entry_to_document(entry)["i_am_alive_time"]}


@pytest.mark.slow
def test_heartbeat_writes_only_the_alive_node(table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    row_path = f"{chroot}/prod/{entry.silo_address}"
    row_before, cluster_before = zk.get(row_path), zk.get(f"{chroot}/prod")

    beat = T0 + timedelta(seconds=30)
    table.update_i_am_alive(entry.silo_address, beat)

    assert zk.get(row_path) == row_before
    assert zk.get(f"{chroot}/prod") == cluster_before
    assert json.loads(zk.get(f"{row_path}/alive")[0]) == {"i_am_alive_time": beat.isoformat(timespec="microseconds")}
    assert table.read_row(entry.silo_address).entries == (entry.replace(i_am_alive_time=beat),)


@pytest.mark.slow
def test_heartbeat_restores_a_missing_alive_node(table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    zk.delete(f"{chroot}/prod/{entry.silo_address}/alive")
    assert table.read_all().entries == (entry,)

    beat = T0 + timedelta(seconds=5)
    table.update_i_am_alive(entry.silo_address, beat)
    assert table.read_all().entries == (entry.replace(i_am_alive_time=beat),)


@pytest.mark.slow
def test_delete_cluster_entries_removes_the_subtree_only(
    zookeeper_server: ZooKeeperServer, table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str
) -> None:
    assert table.insert_row(make_entry(), table.read_all().version.next())
    with open_table(zookeeper_server.uri(chroot), "other") as other:
        other.initialize()
        table.delete_cluster_entries()
        marker, stat = zk.get(f"{chroot}/prod")
        assert json.loads(marker) == {"version": None}  # kept, so its data version never restarts
        assert zk.get_children(f"{chroot}/prod") == []
        assert sorted(zk.get_children(chroot)) == ["other", "prod"]
        assert json.loads(zk.get(f"{chroot}/other")[0]) == {"version": 0}
        table.delete_cluster_entries()  # a repeat is a no-op
        assert zk.exists(f"{chroot}/prod") == stat


@pytest.mark.slow
@pytest.mark.parametrize(
    ("suffix", "data", "message"),
    [
        ("", b"{not json", "not valid JSON"),
        ("", b'{"address": "10.0.0.1:11111@1", "status": "LOST"}', "unknown status"),
        ("", json.dumps(entry_to_document(make_entry(2222))).encode(), "belongs at"),
        ("/alive", b"[]", "must hold a JSON object"),
    ],
)
def test_a_malformed_znode_is_skipped_and_reported_by_path(
    table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str, suffix: str, data: bytes, message: str
) -> None:
    entry, other = make_entry(), make_entry(3333)
    assert table.insert_row(entry, table.read_all().version.next())
    assert table.insert_row(other, table.read_all().version.next())
    path = f"{chroot}/prod/{entry.silo_address}{suffix}"
    zk.set(path, data)
    for read, rows in ((table.read_all, (other,)), (lambda: table.read_row(entry.silo_address), ())):
        data_read = read()
        assert data_read.entries == rows
        (malformed,) = data_read.malformed
        assert malformed.key == f"znode {path}"
        assert message in malformed.reason
    if suffix:  # the silo's next heartbeat replaces a malformed one
        table.update_i_am_alive(entry.silo_address, T0 + timedelta(hours=1))
        assert table.read_all().malformed == ()


@pytest.mark.slow
def test_malformed_cluster_node_raises(table: ZooKeeperMembershipTable, zk: KazooClient, chroot: str) -> None:
    zk.set(f"{chroot}/prod", b'{"version": -3}')
    with pytest.raises(MalformedRowError, match=f"{chroot}/prod has a bad version"):
        table.read_all()


@pytest.mark.slow
def test_update_rows_refuses_a_multi_op_larger_than_the_server_takes(table: ZooKeeperMembershipTable) -> None:
    """Rows averaging more than 5 KiB would not fit jute.maxbuffer in 100 rows: refused before any request."""
    bulky = {"blob": "x" * 6000}
    entries = [make_entry(2000 + i, properties=bulky) for i in range(MAX_MULTI_ROW_BYTES // 6000 + 1)]
    for entry in entries:
        assert table.insert_row(entry, table.read_version().next())
    read = table.read_all()
    etags = {entry.silo_address: etag for entry, etag in read.rows}
    updates = [(entry.replace(status=SiloStatus.DEAD), etags[entry.silo_address]) for entry in entries]
    with pytest.raises(InvalidUpdateError, match="bytes of rows in one ZooKeeper multi-op"):
        table.update_rows(updates, read.version.next())
    assert table.read_all() == read
    assert table.update_rows(updates[: len(updates) // 2], read.version.next()), "half of it fits"


@pytest.mark.slow
def test_outage_raises_then_the_same_handle_recovers(
    zookeeper_server: ZooKeeperServer, table: ZooKeeperMembershipTable
) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    before = table.read_all()
    zookeeper_server.stop()
    try:
        for operation in (
            table.read_all,
            lambda: table.read_row(entry.silo_address),
            lambda: table.insert_row(make_entry(1002), before.version.next()),
            lambda: table.update_i_am_alive(entry.silo_address, T0 + timedelta(seconds=1)),
        ):
            with pytest.raises(TableUnavailableError) as caught:
                operation()
            assert caught.value.__cause__ is not None
    finally:
        zookeeper_server.start()

    def readable() -> bool:
        try:
            table.read_all()
        except TableUnavailableError:
            return False
        return True

    wait_until(readable, 30, "the handle to reconnect after the ZooKeeper restart")
    assert table.read_all() == before
    assert table.update_row(entry.replace(status=SiloStatus.SHUTTING_DOWN), before.rows[0][1], before.version.next())
