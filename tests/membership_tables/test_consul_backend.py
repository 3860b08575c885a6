"""Consul-specific behaviour of the Consul membership table: URIs, the key layout, failures."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import consul
import pytest
import requests

from membership_tables import (
    AccessDeniedError,
    InvalidTableUriError,
    InvalidUpdateError,
    MalformedRowError,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from membership_tables.codec import entry_to_document, format_time
from membership_tables.consul import MAX_TXN_BYTES, ConsulMembershipTable, ConsulSettings, parse_consul_uri
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from testbed.consul_server import ConsulTestServer

# --- URIs (no server needed) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "options", "expected"),
    [
        ("consul://127.0.0.1:8500/silo/prod", {}, ConsulSettings("127.0.0.1", 8500, "silo/prod")),
        ("consul://consul.internal", {}, ConsulSettings("consul.internal", 8500, "silo-membership")),
        ("consul://h:1/", {}, ConsulSettings("h", 1, "silo-membership")),
        ("consul://h:1/a/b/", {"timeout": 2}, ConsulSettings("h", 1, "a/b", timeout=2.0)),
        ("consul://h:1/p?scheme=https&timeout=0.5", {}, ConsulSettings("h", 1, "p", "https", 0.5)),
        ("consul://h:1/p?timeout=9", {"timeout": "3"}, ConsulSettings("h", 1, "p", timeout=3.0)),
        ("consul://[::1]:8501/p", {}, ConsulSettings("[::1]", 8501, "p")),
    ],
)
def test_uris_are_parsed(uri: str, options: dict[str, Any], expected: ConsulSettings) -> None:
    assert parse_consul_uri(uri, options) == expected


def test_the_token_comes_from_the_environment_or_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "from-env")
    assert parse_consul_uri("consul://h:1/p", {}).token == "from-env"
    assert parse_consul_uri("consul://h:1/p", {"token": "explicit"}).token == "explicit"
    assert "from-env" not in repr(parse_consul_uri("consul://h:1/p", {}))


@pytest.mark.parametrize(
    ("uri", "options", "message"),
    [
        ("consul:///prefix", {}, "names no host"),
        ("consul://h:notaport/p", {}, "cannot parse Consul URI"),
        ("consul://h:99999/p", {}, "cannot parse Consul URI"),
        ("consul://user:secret@h:1/p", {}, "CONSUL_HTTP_TOKEN"),
        ("consul://h:1/a//b", {}, "empty, '.' or '..' segment"),
        ("consul://h:1/a/../b", {}, "empty, '.' or '..' segment"),
        ("consul://h:1/p#frag", {}, "fragment"),
        ("consul://h:1/p?colour=red", {}, r"unknown Consul table options \['colour'\]"),
        ("consul://h:1/p", {"scheme": "ftp"}, "scheme must be 'http' or 'https'"),
        ("consul://h:1/p", {"timeout": "soon"}, "timeout must be seconds > 0"),
        ("consul://h:1/p", {"timeout": 0}, "timeout must be seconds > 0"),
    ],
)
def test_bad_uris_say_what_is_wrong(uri: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTableUriError, match=message):
        open_table(uri, "c1", **options)


def test_open_table_returns_the_consul_table_without_contacting_anything() -> None:
    table = open_table("consul://127.0.0.1:1/p", "c1")
    assert isinstance(table, ConsulMembershipTable)
    assert table.layout.root == "p/c1/"


# --- against the test server -----------------------------------------------------------------


@pytest.fixture
def prefix() -> str:
    return f"backend-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kv(consul_test_server: ConsulTestServer) -> Any:
    """A plain py-consul client: what an admin's `consul kv` sees."""
    return consul.Consul(host=consul_test_server.host, port=consul_test_server.port).kv


def tree(kv: Any, prefix: str) -> dict[str, Any]:
    """``consul kv get -recurse <prefix>/`` as {key: (value, ModifyIndex)}."""
    _, items = kv.get(f"{prefix}/", recurse=True)
    return {item["Key"]: (item["Value"], item["ModifyIndex"]) for item in items or ()}


@pytest.mark.slow
def test_the_layout_is_readable_by_an_admin(consul_test_server: ConsulTestServer, kv: Any, prefix: str) -> None:
    entry = make_entry(status=SiloStatus.ACTIVE)
    with open_table(consul_test_server.uri(prefix), "prod") as table:
        table.initialize()
        assert table.insert_row(entry, table.read_all().version.next())
        table.update_i_am_alive(entry.silo_address, T0 + timedelta(seconds=5))
    keys = tree(kv, prefix)
    silo = "10.0.0.1:11111@1"
    assert sorted(keys) == [f"{prefix}/prod/alive/{silo}", f"{prefix}/prod/members/{silo}", f"{prefix}/prod/version"]
    assert json.loads(keys[f"{prefix}/prod/version"][0]) == {"version": 1}
    assert json.loads(keys[f"{prefix}/prod/members/{silo}"][0]) == entry_to_document(entry)
    assert keys[f"{prefix}/prod/alive/{silo}"][0].decode() == format_time(T0 + timedelta(seconds=5))


@pytest.mark.slow
def test_etags_are_modify_indexes_and_heartbeats_leave_the_row_key_alone(
    consul_test_server: ConsulTestServer, kv: Any, prefix: str
) -> None:
    entry = make_entry()
    member, version = f"{prefix}/c1/members/{entry.silo_address}", f"{prefix}/c1/version"
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        assert table.insert_row(entry, table.read_all().version.next())
        before = tree(kv, prefix)
        table.update_i_am_alive(entry.silo_address, T0 + timedelta(minutes=1))
        after = tree(kv, prefix)
        data = table.read_all()
    assert after[member] == before[member]
    assert after[version] == before[version]
    assert data.rows[0][1] == str(before[member][1])
    assert data.version == TableVersion(1, str(before[version][1]))


@pytest.mark.slow
def test_an_identical_update_still_gets_fresh_etags(consul_test_server: ConsulTestServer, prefix: str) -> None:
    """Consul keeps the ModifyIndex of a write that changes nothing; the backend must not rely on it."""
    entry = make_entry()
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        assert table.insert_row(entry, table.read_all().version.next())
        read = table.read_all()
        assert table.update_row(entry, read.rows[0][1], read.version.next())
        after = table.read_all()
    assert after.rows[0][1] != read.rows[0][1]
    assert after.version.etag != read.version.etag


@pytest.mark.slow
def test_update_rows_refuses_a_transaction_larger_than_the_agent_takes(
    consul_test_server: ConsulTestServer, prefix: str
) -> None:
    """63 rows fit the operation limit, but rows averaging 8 KiB would not fit txn_max_req_len."""
    bulky = {"blob": "x" * 9000}
    entries = [make_entry(2000 + i, properties=bulky) for i in range(MAX_TXN_BYTES // 12000 + 1)]
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        for entry in entries:
            assert table.insert_row(entry, table.read_version().next())
        read = table.read_all()
        etags = {entry.silo_address: etag for entry, etag in read.rows}
        updates = [(entry.replace(status=SiloStatus.DEAD), etags[entry.silo_address]) for entry in entries]
        with pytest.raises(InvalidUpdateError, match="byte Consul transaction"):
            table.update_rows(updates, read.version.next())
        assert table.read_all() == read
        assert table.update_rows(updates[: len(updates) // 2], read.version.next()), "half of it fits"


@pytest.mark.slow
def test_a_zero_etag_never_creates_anything(consul_test_server: ConsulTestServer, prefix: str) -> None:
    """Index 0 means "create" to Consul's cas; a token of "0" must lose, not create."""
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize(try_init_version=False)
        assert not table.insert_row(make_entry(), TableVersion(1, "0"))
        table.initialize()
        read = table.read_all()
        assert not table.update_row(make_entry(), "0", read.version.next())
        assert table.read_all() == read


@pytest.mark.slow
def test_clusters_whose_names_share_a_prefix_stay_apart(consul_test_server: ConsulTestServer, prefix: str) -> None:
    uri = consul_test_server.uri(prefix)
    with open_table(uri, "c1") as c1, open_table(uri, "c10") as c10:
        for table in (c1, c10):
            table.initialize()
            assert table.insert_row(make_entry(), table.read_all().version.next())
        c1.delete_cluster_entries()
        assert c1.read_all().rows == ()
        assert len(c10.read_all().rows) == 1


@pytest.mark.slow
def test_concurrent_cleanups_count_each_row_once(consul_test_server: ConsulTestServer, prefix: str) -> None:
    uri = consul_test_server.uri(prefix)
    with open_table(uri, "c1") as setup:
        setup.initialize()
        for port in range(1, 9):
            assert setup.insert_row(make_entry(port, status=SiloStatus.DEAD), setup.read_all().version.next())
    handles = [open_table(uri, "c1") for _ in range(4)]
    counts = [0] * 4
    barrier = threading.Barrier(4)

    def clean(index: int) -> None:
        barrier.wait()
        counts[index] = handles[index].cleanup_defunct_entries(T0 + timedelta(days=1))

    threads = [threading.Thread(target=clean, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for handle in handles:
        handle.close()
    assert sum(counts) == 8


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("version", b'{"version": -1}', "version' must hold"),
        ("version", b"", "version' must hold"),
    ],
)
def test_a_malformed_version_key_raises_an_error_that_names_the_key(
    consul_test_server: ConsulTestServer, kv: Any, prefix: str, key: str, value: bytes, message: str
) -> None:
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        assert table.insert_row(make_entry(), table.read_all().version.next())
        kv.put(f"{prefix}/c1/{key}", value)
        before = tree(kv, prefix)
        with pytest.raises(MalformedRowError, match=message):
            table.read_all()
        assert tree(kv, prefix) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("members/10.0.0.1:11111@1", b"{not json", "members/10.0.0.1:11111@1'.* not valid JSON"),
        ("members/10.0.0.1:11111@1", b'{"status": "ZOMBIE"}', "members/10.0.0.1:11111@1'.* unknown status"),
        ("members/10.0.0.9:1@1", json.dumps(entry_to_document(make_entry())).encode(), "not of 10.0.0.9:1@1"),
        ("alive/10.0.0.1:11111@1", b"yesterday", "alive/10.0.0.1:11111@1' must hold an ISO-8601 time"),
    ],
)
def test_malformed_rows_are_skipped_and_reported_by_key(
    consul_test_server: ConsulTestServer, kv: Any, prefix: str, key: str, value: bytes, message: str
) -> None:
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        assert table.insert_row(make_entry(2222), table.read_all().version.next())
        if key.endswith("11111@1"):
            assert table.insert_row(make_entry(), table.read_all().version.next())
        kv.put(f"{prefix}/c1/{key}", value)
        before = tree(kv, prefix)
        data = table.read_all()
        assert data.entries == (make_entry(2222),)
        assert len(data.malformed) == 1
        assert re.search(message, str(data.malformed[0])), data.malformed
        assert tree(kv, prefix) == before
        if key.startswith("alive/"):  # the silo's next heartbeat replaces a malformed one
            table.update_i_am_alive(make_entry().silo_address, T0 + timedelta(hours=1))
            assert table.read_all().malformed == ()


@pytest.mark.slow
def test_unknown_keys_under_the_cluster_are_ignored(consul_test_server: ConsulTestServer, kv: Any, prefix: str) -> None:
    with open_table(consul_test_server.uri(prefix), "c1") as table:
        table.initialize()
        assert table.insert_row(make_entry(), table.read_all().version.next())
        kv.put(f"{prefix}/c1/notes/readme", b"hand-written")
        kv.put(f"{prefix}/c1/alive/10.0.0.7:7@7", format_time(T0).encode())
        assert table.read_all().entries == (make_entry(),)


@pytest.mark.slow
def test_the_token_goes_with_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "not-the-acl-token")
    entry = make_entry(status=SiloStatus.DEAD)
    with ConsulTestServer(acl_token="s3cret-acl-token") as server:
        with open_table(server.uri("acl"), "c1") as denied, pytest.raises(AccessDeniedError, match="ACL not found"):
            denied.initialize()
        with open_table(server.uri("acl"), "c1", token="s3cret-acl-token") as table:
            table.initialize()
            assert table.insert_row(entry, table.read_all().version.next())
            table.update_i_am_alive(entry.silo_address, T0 + timedelta(seconds=1))
            read = table.read_all()
            assert table.update_row(entry, read.rows[0][1], read.version.next())
            assert table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1
            table.delete_cluster_entries()
            assert list(server.store) == []


# --- failures -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_stopped_server_raises_table_unavailable_and_the_same_handle_recovers(
    private_consul_server: ConsulTestServer,
) -> None:
    entry = make_entry()
    table = open_table(private_consul_server.uri("down"), "c1", timeout=1)
    table.initialize()
    assert table.insert_row(entry, table.read_all().version.next())
    private_consul_server.stop()
    attempts: list[Callable[[], object]] = [
        table.read_all,
        lambda: table.read_row(entry.silo_address),
        lambda: table.insert_row(make_entry(2), TableVersion(2, "1")),
        lambda: table.update_i_am_alive(entry.silo_address, T0),
        lambda: table.cleanup_defunct_entries(T0),
        table.initialize,
    ]
    for attempt in attempts:
        with pytest.raises(TableUnavailableError, match=r"Consul at http://127\.0\.0\.1") as caught:
            attempt()
        assert isinstance(caught.value.__cause__, requests.ConnectionError)
    private_consul_server.start()
    assert table.read_all().entries == (entry,)
    table.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: an agent that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


@pytest.mark.slow
def test_an_agent_that_never_answers_times_out_as_table_unavailable(silent_port: int) -> None:
    table = open_table(f"consul://127.0.0.1:{silent_port}/p", "c1", timeout=0.2)
    with table, pytest.raises(TableUnavailableError) as caught:
        table.read_all()
    assert isinstance(caught.value.__cause__, requests.Timeout)


class _FailingAgent(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._fail()

    def do_PUT(self) -> None:
        self._fail()

    def _fail(self) -> None:
        body = b"rpc error: No cluster leader"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def failing_agent() -> Iterator[int]:
    """An HTTP server that answers every request with 500, like an agent without a leader."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FailingAgent)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_server_errors_are_table_unavailable_not_lost_races(failing_agent: int) -> None:
    with open_table(f"consul://127.0.0.1:{failing_agent}/p", "c1") as table:
        for attempt in (table.read_all, lambda: table.insert_row(make_entry(), TableVersion(1, "5"))):
            with pytest.raises(TableUnavailableError, match="No cluster leader") as caught:
                attempt()
            assert isinstance(caught.value.__cause__, consul.ConsulException)
