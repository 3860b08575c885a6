"""The authorization rules: SAN parsing and who may call which RPC (pure, table-driven)."""

from __future__ import annotations

import grpc
import pytest

from silo.wire.peer_identity import (
    RPC_ROLES,
    PeerIdentity,
    Role,
    authorize,
    cluster_dns_name,
    cluster_uri,
    identity_from_sans,
    role_uri,
)

SILO = PeerIdentity(frozenset({"prod"}), frozenset({Role.SILO}))
CLIENT = PeerIdentity(frozenset({"prod"}), frozenset({Role.CLIENT}))
BOTH = PeerIdentity(frozenset({"prod"}), frozenset({Role.SILO, Role.CLIENT}))


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["silo://cluster/prod", "silo://role/silo", "prod.silo-cluster"], SILO),
        (["silo://role/client", "silo://cluster/prod"], CLIENT),
        (["silo://cluster/prod", "silo://role/silo", "silo://role/client"], BOTH),
        (["silo://cluster/prod", "silo://role/admin"], PeerIdentity(frozenset({"prod"}), frozenset())),
        (["prod.silo-cluster", "https://example.com/x"], PeerIdentity(frozenset(), frozenset())),
        (
            ["silo://cluster/a", "silo://cluster/b", "silo://role/silo"],
            PeerIdentity(frozenset({"a", "b"}), frozenset({Role.SILO})),
        ),
        ([], PeerIdentity(frozenset(), frozenset())),
    ],
)
def test_identity_from_sans(names: list[str], expected: PeerIdentity) -> None:
    assert identity_from_sans(names) == expected


def test_the_names_a_certificate_carries() -> None:
    assert cluster_uri("prod") == "silo://cluster/prod"
    assert role_uri(Role.CLIENT) == "silo://role/client"
    assert cluster_dns_name("prod") == "prod.silo-cluster"


@pytest.mark.parametrize(
    ("method", "silo_allowed", "client_allowed"),
    [
        ("Ping", True, False),
        ("PingStream", True, False),
        ("ProbeIndirectly", True, False),
        ("Gossip", True, False),
        ("GetMembership", True, True),
        ("WatchMembership", True, True),
        ("Process", True, True),
    ],
)
def test_the_authorization_table(method: str, silo_allowed: bool, client_allowed: bool) -> None:
    assert (authorize(method, SILO, "prod") is None) is silo_allowed
    refusal = authorize(method, CLIENT, "prod")
    assert (refusal is None) is client_allowed
    if refusal is not None:
        assert refusal.code == grpc.StatusCode.PERMISSION_DENIED
        assert "needs the silo role" in refusal.reason
    assert authorize(method, BOTH, "prod") is None


def test_every_rpc_of_the_services_is_in_the_table() -> None:
    from silo.wire import codec

    methods = {
        name
        for name in vars(codec).values()
        if isinstance(name, codec.Method | codec.StreamMethod | codec.BidiStreamMethod)
    }
    assert {method.name for method in methods} == set(RPC_ROLES)


@pytest.mark.parametrize("method", sorted(RPC_ROLES))
def test_a_certificate_of_another_or_of_several_clusters_is_denied(method: str) -> None:
    other = PeerIdentity(frozenset({"staging"}), frozenset({Role.SILO, Role.CLIENT}))
    several = PeerIdentity(frozenset({"prod", "staging"}), frozenset({Role.SILO}))
    for identity in (other, several):
        refusal = authorize(method, identity, "prod")
        assert refusal is not None
        assert refusal.code == grpc.StatusCode.PERMISSION_DENIED
        assert "only certificates of cluster 'prod'" in refusal.reason


def test_no_certificate_is_unauthenticated_and_no_role_or_an_unknown_rpc_is_denied() -> None:
    missing = authorize("Ping", None, "prod")
    assert missing is not None
    assert missing.code == grpc.StatusCode.UNAUTHENTICATED
    roleless = authorize("GetMembership", PeerIdentity(frozenset({"prod"}), frozenset()), "prod")
    assert roleless is not None
    assert roleless.code == grpc.StatusCode.PERMISSION_DENIED
    unknown = authorize("DropTable", BOTH, "prod")
    assert unknown is not None
    assert unknown.code == grpc.StatusCode.PERMISSION_DENIED
