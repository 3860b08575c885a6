"""Membership tables: the shared store behind an Orleans-style cluster membership service.

``open_table(uri, cluster_id)`` returns a ``MembershipTable`` for any supported store;
every backend honours the same contract (see ``membership_tables.contract``) and passes
the same conformance suite (``membership_tables.testing``).
"""

from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable
from membership_tables.errors import (
    AccessDeniedError,
    BackendNotInstalledError,
    InvalidClusterIdError,
    InvalidEntryError,
    InvalidTableUriError,
    InvalidUpdateError,
    MalformedRowError,
    MembershipTableError,
    ReadOnlyTableError,
    TableUnavailableError,
)
from membership_tables.model import (
    CommittedWrite,
    MalformedRow,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    Vote,
)
from membership_tables.registry import open_table

__all__ = [
    "UNINITIALIZED_VERSION",
    "AccessDeniedError",
    "BackendNotInstalledError",
    "CommittedWrite",
    "InvalidClusterIdError",
    "InvalidEntryError",
    "InvalidTableUriError",
    "InvalidUpdateError",
    "MalformedRow",
    "MalformedRowError",
    "MembershipEntry",
    "MembershipTable",
    "MembershipTableData",
    "MembershipTableError",
    "ReadOnlyTableError",
    "SiloAddress",
    "SiloStatus",
    "TableUnavailableError",
    "TableVersion",
    "Vote",
    "open_table",
]
