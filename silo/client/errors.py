"""The exceptions of the membership client (re-exported by ``silo.client.membership_client``)::

SiloError
└── MembershipClientError            root of every error the client raises on purpose
    ├── ClientConfigError            bad constructor arguments (also a ValueError)
    ├── WrongClusterError            a gateway belongs to another cluster: fix the configuration
    ├── MembershipUnavailableError   no gateway (or the table) could be reached in time
    │                                (also a ConnectionError)
    └── ClientClosedError            the client was closed
"""

from __future__ import annotations

from silo.errors import SiloError

__all__ = [
    "ClientClosedError",
    "ClientConfigError",
    "MembershipClientError",
    "MembershipUnavailableError",
    "WrongClusterError",
]


class MembershipClientError(SiloError):
    """Root of every exception the membership client raises on purpose."""


class ClientConfigError(MembershipClientError, ValueError):
    """The client was given no source, two sources, a bad endpoint, cluster id, URI or interval."""


class WrongClusterError(MembershipClientError):
    """A gateway answered ``FAILED_PRECONDITION``: it serves another cluster. Retrying cannot help."""


class MembershipUnavailableError(MembershipClientError, ConnectionError):
    """No gateway answered (``view()``), or none could be reached for ``retry_timeout`` (``watch()``)."""


class ClientClosedError(MembershipClientError):
    """The client was closed; create a new one."""
