"""Who a TLS peer is, from its certificate's subject alternative names, and what it may call.

Every certificate of a cluster carries (``silo certs issue`` writes them)::

    URI: silo://cluster/<cluster-id>     the cluster it belongs to (exactly one)
    URI: silo://role/silo | client       what it may do (one or both)
    DNS: <cluster-id>.silo-cluster       so a caller verifies the server it dialled belongs to its
                                         cluster (``grpc.ssl_target_name_override``: silos dial IPs)

The rules here are pure: ``identity_from_sans`` parses the names gRPC reports in the call's
auth context, ``authorize`` decides one call. The server applies them (``silo.wire.server``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

CLUSTER_URI_PREFIX = "silo://cluster/"
ROLE_URI_PREFIX = "silo://role/"
CLUSTER_DNS_SUFFIX = ".silo-cluster"


class Role(enum.Enum):
    """What a certificate lets its holder do (the ``silo://role/...`` SAN)."""

    SILO = "silo"
    """A cluster member: probe, gossip, vote; also everything a client may do."""
    CLIENT = "client"
    """An application: read and watch the membership, send Work batches."""


RPC_ROLES: Mapping[str, frozenset[Role]] = {
    "Ping": frozenset({Role.SILO}),
    "PingStream": frozenset({Role.SILO}),
    "ProbeIndirectly": frozenset({Role.SILO}),
    "Gossip": frozenset({Role.SILO}),
    "GossipStream": frozenset({Role.SILO}),
    "ConfirmMembership": frozenset({Role.SILO}),
    "GetMembership": frozenset({Role.SILO, Role.CLIENT}),
    "WatchMembership": frozenset({Role.SILO, Role.CLIENT}),
    "Process": frozenset({Role.SILO, Role.CLIENT}),
    "Drain": frozenset({Role.SILO}),
}
"""The roles allowed to call each RPC (the authorization table of docs/security.md)."""


def cluster_uri(cluster_id: str) -> str:
    return f"{CLUSTER_URI_PREFIX}{cluster_id}"


def role_uri(role: Role) -> str:
    return f"{ROLE_URI_PREFIX}{role.value}"


def cluster_dns_name(cluster_id: str) -> str:
    """The DNS SAN every certificate of ``cluster_id`` carries and callers verify servers against."""
    return f"{cluster_id}{CLUSTER_DNS_SUFFIX}"


@dataclass(frozen=True)
class PeerIdentity:
    """The cluster and roles a peer's certificate names."""

    clusters: frozenset[str]
    roles: frozenset[Role]

    def describe(self) -> str:
        clusters = ", ".join(sorted(self.clusters)) or "no cluster"
        roles = ", ".join(sorted(role.value for role in self.roles)) or "no role"
        return f"a certificate of {clusters} with {roles}"


def identity_from_sans(names: Iterable[str]) -> PeerIdentity:
    """The identity named by a certificate's SAN values (DNS names and unknown URIs are ignored).

    A role that is not ``silo`` or ``client`` grants nothing.
    """
    clusters: set[str] = set()
    roles: set[Role] = set()
    known_roles = {role.value: role for role in Role}
    for name in names:
        if name.startswith(CLUSTER_URI_PREFIX):
            clusters.add(name.removeprefix(CLUSTER_URI_PREFIX))
        elif name.startswith(ROLE_URI_PREFIX) and name.removeprefix(ROLE_URI_PREFIX) in known_roles:
            roles.add(known_roles[name.removeprefix(ROLE_URI_PREFIX)])
    return PeerIdentity(frozenset(clusters), frozenset(roles))


@dataclass(frozen=True)
class Refusal:
    """Why a call is refused, as a gRPC status and a reason for the log and the caller."""

    code: grpc.StatusCode
    reason: str


def authorize(method: str, identity: PeerIdentity | None, cluster_id: str) -> Refusal | None:
    """None if a peer with ``identity`` may call ``method`` on a silo of ``cluster_id``.

    ``identity`` None: the call carries no verified certificate (UNAUTHENTICATED). A certificate
    of another cluster, of several clusters, or without a role allowed for ``method`` is
    PERMISSION_DENIED. An RPC missing from ``RPC_ROLES`` is refused to everyone.
    """
    if identity is None:
        return Refusal(grpc.StatusCode.UNAUTHENTICATED, f"{method} needs a client certificate; none was presented")
    if identity.clusters != {cluster_id}:
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method} refused to {identity.describe()}: only certificates of cluster {cluster_id!r} "
            f"({cluster_uri(cluster_id)}) may call this silo",
        )
    allowed = RPC_ROLES.get(method, frozenset())
    if not identity.roles & allowed:
        needed = " or ".join(sorted(role.value for role in allowed)) or "no role (unknown RPC)"
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED, f"{method} refused to {identity.describe()}: it needs the {needed} role"
        )
    return None
