"""The Consul test server's ACLs: policies parsed from HCL, and denials answered as Consul does."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import requests

from membership_tables.policies import consul_policy
from testbed.consul_server import AclPolicy, AclTable, ConsulTestServer
from testbed.consul_server.acl import PolicyError

POLICY = AclPolicy.from_hcl(consul_policy("silo-membership") + 'key_prefix "silo-membership/ro/" { policy = "read" }')


@pytest.mark.parametrize(
    ("key", "read", "write"),
    [
        ("silo-membership/c1/version", True, True),
        ("silo-membership/", True, True),
        ("silo-membership/ro/x", True, False),
        ("silo-membership", False, False),  # the prefix is "silo-membership/": a sibling key is outside
        ("silo-membership-other/x", False, False),
        ("other/x", False, False),
        ("", False, False),
    ],
)
def test_the_longest_matching_prefix_decides_and_no_match_denies(key: str, read: bool, write: bool) -> None:
    assert (POLICY.may_read(key), POLICY.may_write(key)) == (read, write)


def test_a_tree_write_needs_write_on_every_rule_below() -> None:
    assert POLICY.may_write_tree("silo-membership/c1/")
    assert not POLICY.may_write_tree("silo-membership/")  # silo-membership/ro/ is read-only
    assert POLICY.may_run("get-tree", "silo-membership/")
    assert not POLICY.may_run("delete-tree", "silo-membership/")


@pytest.mark.parametrize(
    "hcl", ['node_prefix "" { policy = "read" }', 'key_prefix "a/" { policy = "admin" }', "key_prefix"]
)
def test_hcl_the_server_cannot_enforce_is_refused(hcl: str) -> None:
    with pytest.raises(PolicyError):
        AclPolicy.from_hcl(hcl)


@pytest.fixture
def server() -> Iterator[ConsulTestServer]:
    acl = AclTable({"silo-token": POLICY, "admin-token": AclPolicy.allow_all()})
    with ConsulTestServer(acl=acl) as running:
        yield running


def call(server: ConsulTestServer, method: str, path: str, token: str | None, **kwargs: object) -> requests.Response:
    headers = {"X-Consul-Token": token} if token else {}
    return requests.request(method, f"http://{server.address}{path}", headers=headers, timeout=5, **kwargs)  # type: ignore[arg-type]


def test_single_key_requests_outside_the_policy_get_403_permission_denied(server: ConsulTestServer) -> None:
    assert call(server, "PUT", "/v1/kv/other/x", "admin-token", data=b"1").json() is True
    assert call(server, "PUT", "/v1/kv/silo-membership/c1/version", "silo-token", data=b"1").json() is True
    for method, path in [("GET", "/v1/kv/other/x"), ("PUT", "/v1/kv/other/x"), ("DELETE", "/v1/kv/other/x")]:
        answer = call(server, method, path, "silo-token", data=b"2")
        assert (answer.status_code, answer.text) == (403, "Permission denied"), (method, path)
    answer = call(server, "DELETE", "/v1/kv/silo-membership/?recurse", "silo-token")  # ro/ is below
    assert (answer.status_code, answer.text) == (403, "Permission denied")
    assert server.store.get("other/x")[1] is not None


def test_no_token_or_an_unknown_token_may_do_nothing(server: ConsulTestServer) -> None:
    assert call(server, "PUT", "/v1/kv/silo-membership/k", "silo-token", data=b"1").json() is True
    anonymous = call(server, "GET", "/v1/kv/silo-membership/k", None)
    assert (anonymous.status_code, anonymous.text) == (403, "Permission denied")
    unknown = call(server, "GET", "/v1/kv/silo-membership/k", "made-up")
    assert (unknown.status_code, unknown.text) == (403, "ACL not found")
    by_query = requests.get(f"http://{server.address}/v1/kv/silo-membership/k?token=silo-token", timeout=5)
    assert by_query.status_code == 200


def test_a_recursive_read_leaves_out_the_keys_the_token_may_not_read(server: ConsulTestServer) -> None:
    for key in ("silo-membership/a", "silo-membership-other/b", "other/c"):
        assert call(server, "PUT", f"/v1/kv/{key}", "admin-token", data=b"1").json() is True
    everything = call(server, "GET", "/v1/kv/?recurse", "silo-token")
    assert [entry["Key"] for entry in everything.json()] == ["silo-membership/a"]
    assert call(server, "GET", "/v1/kv/other/?recurse", "silo-token").status_code == 404


def test_a_transaction_with_a_denied_operation_is_rolled_back_with_permission_denied(
    server: ConsulTestServer,
) -> None:
    value = base64.b64encode(b"1").decode()
    ops = [
        {"KV": {"Verb": "set", "Key": "silo-membership/c1/x", "Value": value}},
        {"KV": {"Verb": "set", "Key": "other/y", "Value": value}},
    ]
    answer = call(server, "PUT", "/v1/txn", "silo-token", data=json.dumps(ops))
    assert answer.status_code == 409
    assert answer.json()["Errors"] == [{"OpIndex": 1, "What": "Permission denied"}]
    assert list(server.store) == []
    answer = call(server, "PUT", "/v1/txn", "silo-token", data=json.dumps(ops[:1]))
    assert answer.status_code == 200


def test_without_acls_every_request_is_served(consul_test_server: ConsulTestServer) -> None:
    answer = requests.put(f"http://{consul_test_server.address}/v1/kv/acl-off/k", data=b"1", timeout=5)
    assert answer.json() is True
