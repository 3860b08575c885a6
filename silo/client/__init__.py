"""The membership client library: the live view of a cluster and a stream of its changes.

``MembershipClient`` (blocking) and ``AsyncMembershipClient`` read through silo gateways or
straight from a table; ``ClusterView``/``ViewUpdate`` are what they return. This is what an
application needs; it never loads the protocol roles.

May import: ``membership_tables``, ``silo.wire`` (messages and channels), ``silo.events``, ``silo.errors``.
Never ``silo.membership``, ``silo.runtime`` or ``silo.cli``.
"""

from silo.client.errors import (
    ClientClosedError,
    ClientConfigError,
    MembershipClientError,
    MembershipUnavailableError,
    WrongClusterError,
)
from silo.client.membership_client import AsyncMembershipClient, MembershipClient
from silo.client.topology import ClusterView, SiloInfo, ViewDiff, ViewUpdate
from silo.wire.tls import TlsSettings

__all__ = [
    "AsyncMembershipClient",
    "ClientClosedError",
    "ClientConfigError",
    "ClusterView",
    "MembershipClient",
    "MembershipClientError",
    "MembershipUnavailableError",
    "SiloInfo",
    "TlsSettings",
    "ViewDiff",
    "ViewUpdate",
    "WrongClusterError",
]
