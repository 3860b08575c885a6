"""``open_table``: pick a backend from the URI scheme and import its driver lazily."""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from membership_tables.contract import MembershipTable
from membership_tables.errors import BackendNotInstalledError, InvalidTableUriError
from membership_tables.model import validate_cluster_id
from membership_tables.read_only import ReadOnlyMembershipTable


class BackendFactory(Protocol):
    read_only_sessions: bool

    def from_uri(self, uri: str, cluster_id: str, **options: Any) -> MembershipTable: ...


# scheme (the part before "+" of a SQLAlchemy dialect+driver) -> (module, class, pip extra)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "memory": ("membership_tables.memory", "InMemoryMembershipTable", ""),
    "sqlite": ("membership_tables.sql", "SqlMembershipTable", "sql"),
    "postgresql": ("membership_tables.sql", "SqlMembershipTable", "postgres"),
    "postgres": ("membership_tables.sql", "SqlMembershipTable", "postgres"),
    "mysql": ("membership_tables.sql", "SqlMembershipTable", "mysql"),
    "mariadb": ("membership_tables.sql", "SqlMembershipTable", "mysql"),
    "zookeeper": ("membership_tables.zookeeper", "ZooKeeperMembershipTable", "zookeeper"),
    "consul": ("membership_tables.consul", "ConsulMembershipTable", "consul"),
    "dynamodb": ("membership_tables.dynamodb", "DynamoDbMembershipTable", "dynamodb"),
}

DISTRIBUTION = "silo-membership"


def uri_scheme(uri: object) -> str:
    """The backend key of ``uri`` (``postgresql+psycopg://`` -> ``postgresql``)."""
    if not isinstance(uri, str) or "://" not in uri:
        raise InvalidTableUriError(
            f"table URI must be a string like 'sqlite:///membership.db' or 'memory://dev', got {uri!r}"
        )
    try:
        scheme = urlsplit(uri).scheme.lower()
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse table URI {uri!r}: {exc}") from exc
    return scheme.split("+", 1)[0]


def open_table(uri: str, cluster_id: str, *, read_only: bool = False, **options: Any) -> MembershipTable:
    """Open the membership table of ``cluster_id`` in the store named by ``uri``.

    Supported URIs: ``memory://NAME``; any SQLAlchemy URL (``sqlite:///file.db``,
    ``postgresql+psycopg://user:pw@host/db``, ``mysql+pymysql://user:pw@host/db``);
    ``zookeeper://[user:password@]host:port[,host:port]/chroot``; ``consul://host:port/key/prefix``;
    ``dynamodb://TABLE?region=REGION&endpoint_url=URL``. ``options`` go to the
    backend. Nothing is created until ``initialize()``.

    ``read_only``: a handle that only reads (``silo status``, ``silo dashboard``): every write
    raises ``ReadOnlyTableError`` and changes nothing, and where the store can be told
    (``MembershipTable.read_only_sessions``: SQL, DynamoDB) it refuses writes too (see
    ``membership_tables.read_only``).
    """
    validate_cluster_id(cluster_id)
    scheme = uri_scheme(uri)
    if scheme not in _BACKENDS:
        known = ", ".join(sorted({*_BACKENDS} - {"postgres"}))
        raise InvalidTableUriError(f"unknown table URI scheme {scheme!r} in {uri!r}; supported schemes: {known}")
    module_name, class_name, extra = _BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendNotInstalledError(
            f"the {scheme} membership table needs a driver that is not installed ({exc}); "
            f"install it with: pip install '{DISTRIBUTION}[{extra}]'"
        ) from exc
    backend = cast(BackendFactory, getattr(module, class_name))
    if not read_only:
        return backend.from_uri(uri, cluster_id, **options)
    session = {"read_only": True} if backend.read_only_sessions else {}
    return ReadOnlyMembershipTable(backend.from_uri(uri, cluster_id, **options, **session))
