"""The test server over HTTP, with plain urllib and with py-consul, against Consul's documented API."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import consul
import pytest

from testbed.consul_server import ConsulTestServer
from testbed.consul_server.server import MAX_TXN_OPS

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def call(server: ConsulTestServer, method: str, path: str, body: bytes | None = None) -> Reply:
    request = urllib.request.Request(f"http://{server.address}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers), error.read())


def txn(server: ConsulTestServer, *ops: dict[str, object]) -> Reply:
    return call(server, "PUT", "/v1/txn", json.dumps([{"KV": op} for op in ops]).encode())


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


@pytest.fixture
def server(private_consul_server: ConsulTestServer) -> ConsulTestServer:
    return private_consul_server


def test_put_with_cas_zero_creates_only_and_answers_true_or_false(server: ConsulTestServer) -> None:
    assert call(server, "PUT", "/v1/kv/app/k?cas=0", b"one").body == b"true"
    assert call(server, "PUT", "/v1/kv/app/k?cas=0", b"two").body == b"false"
    assert call(server, "GET", "/v1/kv/app/k?raw").body == b"one"


def test_get_returns_the_entry_with_base64_value_and_the_index_header(server: ConsulTestServer) -> None:
    call(server, "PUT", "/v1/kv/other", b"x")
    call(server, "PUT", "/v1/kv/app/k?flags=42", b"hello")
    reply = call(server, "GET", "/v1/kv/app/k")
    assert reply.status == 200
    assert reply.json() == [
        {"LockIndex": 0, "Key": "app/k", "Flags": 42, "Value": b64(b"hello"), "CreateIndex": 2, "ModifyIndex": 2}
    ]
    assert reply.headers["X-Consul-Index"] == "2"
    assert reply.headers["X-Consul-KnownLeader"] == "true"


def test_a_missing_key_is_404_with_an_index(server: ConsulTestServer) -> None:
    call(server, "PUT", "/v1/kv/present", b"x")
    reply = call(server, "GET", "/v1/kv/absent")
    assert (reply.status, reply.headers["X-Consul-Index"]) == (404, "1")
    assert call(server, "GET", "/v1/kv/absent/?recurse").status == 404


def test_put_with_cas_updates_only_at_the_modify_index(server: ConsulTestServer) -> None:
    call(server, "PUT", "/v1/kv/k", b"v1")
    assert call(server, "PUT", "/v1/kv/k?cas=7", b"stale").body == b"false"
    assert call(server, "PUT", "/v1/kv/k?cas=1", b"v2").body == b"true"
    entries: Any = call(server, "GET", "/v1/kv/k").json()
    entry = entries[0]
    assert (entry["CreateIndex"], entry["ModifyIndex"], entry["Value"]) == (1, 2, b64(b"v2"))


def test_recurse_keys_and_separator_list_by_prefix(server: ConsulTestServer) -> None:
    for key in ("c1/version", "c1/members/a", "c1/members/b", "c10/version"):
        call(server, "PUT", f"/v1/kv/{key}", b"x")
    recurse = call(server, "GET", "/v1/kv/c1/?recurse")
    assert [entry["Key"] for entry in recurse.json()] == ["c1/members/a", "c1/members/b", "c1/version"]  # type: ignore[attr-defined]
    assert recurse.headers["X-Consul-Index"] == "3"
    assert call(server, "GET", "/v1/kv/c1?keys").json() == ["c1/members/a", "c1/members/b", "c1/version", "c10/version"]
    assert call(server, "GET", "/v1/kv/c1/?keys&separator=/").json() == ["c1/members/", "c1/version"]


def test_delete_recurse_and_cas(server: ConsulTestServer) -> None:
    for key in ("c1/a", "c1/b", "c10/a"):
        call(server, "PUT", f"/v1/kv/{key}", b"x")
    assert call(server, "DELETE", "/v1/kv/c1/?recurse").body == b"true"
    assert call(server, "GET", "/v1/kv/?keys").json() == ["c10/a"]
    assert call(server, "DELETE", "/v1/kv/c10/a?cas=1").body == b"false"
    assert call(server, "DELETE", "/v1/kv/c10/a?cas=3").body == b"true"
    assert call(server, "GET", "/v1/kv/c10/a").status == 404


def test_txn_commits_atomically_and_returns_results(server: ConsulTestServer) -> None:
    reply = txn(
        server,
        {"Verb": "cas", "Key": "v", "Value": b64(b"1"), "Index": 0},
        {"Verb": "set", "Key": "row", "Value": b64(b"r"), "Flags": 3},
        {"Verb": "get", "Key": "row"},
        {"Verb": "delete", "Key": "nothing"},
    )
    assert reply.status == 200
    assert reply.json() == {
        "Results": [
            {"KV": {"LockIndex": 0, "Key": "v", "Flags": 0, "Value": None, "CreateIndex": 1, "ModifyIndex": 1}},
            {"KV": {"LockIndex": 0, "Key": "row", "Flags": 3, "Value": None, "CreateIndex": 1, "ModifyIndex": 1}},
            {"KV": {"LockIndex": 0, "Key": "row", "Flags": 3, "Value": b64(b"r"), "CreateIndex": 1, "ModifyIndex": 1}},
        ],
        "Errors": None,
    }


def test_txn_with_a_failed_check_is_409_and_changes_nothing(server: ConsulTestServer) -> None:
    call(server, "PUT", "/v1/kv/v", b"1")
    reply = txn(
        server,
        {"Verb": "set", "Key": "row", "Value": b64(b"r")},
        {"Verb": "cas", "Key": "v", "Value": b64(b"2"), "Index": 99},
    )
    assert reply.status == 409
    assert reply.json() == {
        "Results": None,
        "Errors": [{"OpIndex": 1, "What": 'failed to set key "v", index is stale'}],
    }
    assert call(server, "GET", "/v1/kv/?keys").json() == ["v"]
    assert call(server, "GET", "/v1/kv/v?raw").body == b"1"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"KV": {}}', 400),
        (b'[{"Node": {"Verb": "get"}}]', 400),
        (b'[{"KV": {"Verb": "set", "Key": "k", "Value": "***"}}]', 400),
        (b'[{"KV": {"Verb": "cas", "Key": "k", "Index": -1}}]', 400),
        (json.dumps([{"KV": {"Verb": "get", "Key": "k"}}] * (MAX_TXN_OPS + 1)).encode(), 413),
    ],
)
def test_malformed_transactions_are_refused(server: ConsulTestServer, body: bytes, status: int) -> None:
    reply = call(server, "PUT", "/v1/txn", body)
    assert reply.status == status, reply.body
    assert call(server, "GET", "/v1/kv/?keys").status == 404


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("PUT", "/v1/kv/", 400), ("PUT", "/v1/kv/k?cas=x", 400), ("GET", "/v1/txn", 405), ("GET", "/v1/agent/self", 404)],
)
def test_bad_requests_get_clear_statuses(server: ConsulTestServer, method: str, path: str, status: int) -> None:
    assert call(server, method, path, b"v" if method == "PUT" else None).status == status


def test_status_leader_answers_an_address(server: ConsulTestServer) -> None:
    assert call(server, "GET", "/v1/status/leader").json() == "127.0.0.1:8300"


def test_py_consul_kv_round_trip_and_cas(server: ConsulTestServer) -> None:
    client = consul.Consul(host=server.host, port=server.port)
    assert client.kv.put("app/a@b[1]", b"\x00binary", cas=0)
    assert not client.kv.put("app/a@b[1]", b"again", cas=0)
    index, entry = client.kv.get("app/a@b[1]", consistency="consistent")
    assert (entry["Value"], entry["ModifyIndex"], index) == (b"\x00binary", 1, "1")
    assert client.kv.get("app/", recurse=True)[1][0]["Key"] == "app/a@b[1]"
    assert client.kv.delete("app/a@b[1]", cas=entry["ModifyIndex"])
    assert client.kv.get("app/a@b[1]")[1] is None


def test_py_consul_txn_commits_and_reports_a_rollback_as_409(server: ConsulTestServer) -> None:
    client = consul.Consul(host=server.host, port=server.port)
    done = client.txn.put([{"KV": {"Verb": "cas", "Key": "k", "Value": b64(b"v"), "Index": 0}}])
    assert done["Errors"] is None
    with pytest.raises(consul.ConsulException, match="409"):
        client.txn.put([{"KV": {"Verb": "cas", "Key": "k", "Value": b64(b"v"), "Index": 0}}])


def test_with_an_acl_token_every_request_must_carry_it() -> None:
    with ConsulTestServer(acl_token="secret") as server:
        assert call(server, "PUT", "/v1/kv/k", b"v").status == 403
        assert call(server, "PUT", "/v1/kv/k?token=secret", b"v").body == b"true"
        client = consul.Consul(host=server.host, port=server.port, token="secret")
        client.token = "secret"  # py-consul prefers CONSUL_HTTP_TOKEN from the environment
        assert client.kv.get("k")[1]["Value"] == b"v"
        with pytest.raises(consul.ConsulException, match="Permission denied"):
            client.txn.put([{"KV": {"Verb": "get", "Key": "k"}}])  # py-consul's txn.put sends no token


def test_stop_refuses_connections_and_start_serves_the_same_data_on_the_same_port(server: ConsulTestServer) -> None:
    call(server, "PUT", "/v1/kv/k", b"kept")
    port = server.port
    server.stop()
    with pytest.raises(urllib.error.URLError):
        call(server, "GET", "/v1/kv/k")
    server.start()
    assert server.port == port
    assert call(server, "GET", "/v1/kv/k?raw").body == b"kept"
