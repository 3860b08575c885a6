"""What the znodes of a cluster hold: the cluster node's version document, the silo nodes' rows and
their ``alive`` children, and the etags made of znode versions (see the package docstring)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from membership_tables import codec
from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import MalformedRow, MembershipEntry, MembershipTableData, SiloAddress, TableVersion

ALIVE_NODE = "alive"


def node_name(silo_address: SiloAddress) -> str:
    """The silo's child name: ``host:port@generation`` (a ``/`` or ``%`` in a host is escaped)."""
    return quote(str(silo_address), safe=":@[]")


def silo_node_path(cluster_path: str, silo_address: SiloAddress) -> str:
    """The silo node of ``silo_address`` under the cluster node at ``cluster_path``."""
    return f"{cluster_path}/{node_name(silo_address)}"


def version_document(version: int | None) -> bytes:
    """The cluster node's data; ``None`` marks a deleted cluster (no version row)."""
    return json.dumps({"version": version}).encode()


def alive_document(when: datetime) -> bytes:
    return json.dumps({"i_am_alive_time": codec.format_time(when)}).encode()


def _json_field(data: bytes, field: str, path: str) -> object:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedRowError(f"znode {path} is not valid JSON ({exc}); repair or delete it by hand") from exc
    if not isinstance(document, dict) or field not in document:
        raise MalformedRowError(f"znode {path} must hold a JSON object with {field!r}; repair or delete it by hand")
    return document[field]


def parse_version(data: bytes, path: str) -> int | None:
    """The version number the cluster node holds, ``None`` for a deleted cluster's marker."""
    version = _json_field(data, "version", path)
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise MalformedRowError(f"znode {path} has a bad version {version!r}; repair or delete it by hand")
    return version


def parse_alive(data: bytes, path: str) -> datetime:
    try:
        return codec.parse_time(_json_field(data, "i_am_alive_time", path), "i_am_alive_time")
    except InvalidEntryError as exc:
        raise MalformedRowError(f"znode {path} cannot be parsed: {exc}; repair or delete it by hand") from exc


def znode_version(etag: str) -> int | None:
    """The znode data version a version etag names, or ``None`` if no znode could carry it."""
    return int(etag) if etag.isascii() and etag.isdigit() else None


def row_etag(stat: Any) -> str:
    """A silo node's etag: its creation zxid and its data version (see the package docstring)."""
    return f"{stat.czxid}.{stat.version}"


def version_of(version: TableVersion, cluster_stat: Any) -> TableVersion:
    """The version a write set: its number, and the cluster node's data version after it as the etag."""
    return TableVersion(version.version, str(cluster_stat.version))


def parse_row_etag(etag: str) -> tuple[int, int] | None:
    """``(czxid, data version)`` of a row etag, or ``None`` if no silo node could carry it."""
    czxid, dot, version = etag.partition(".")
    if not dot or (parsed := znode_version(czxid)) is None or (data_version := znode_version(version)) is None:
        return None
    return parsed, data_version


@dataclass(frozen=True)
class StoredRow:
    entry: MembershipEntry
    """With IAmAlive already merged from the alive node."""
    row_version: int
    row_czxid: int
    alive_version: int | None
    stored_alive: datetime
    """The IAmAlive time in the silo node's own document (before the alive node's is merged)."""

    @property
    def etag(self) -> str:
        return f"{self.row_czxid}.{self.row_version}"


@dataclass(frozen=True)
class Snapshot:
    version: TableVersion
    rows: tuple[StoredRow, ...]
    malformed: tuple[MalformedRow, ...] = ()

    def data(self) -> MembershipTableData:
        return MembershipTableData(tuple((row.entry, row.etag) for row in self.rows), self.version, self.malformed)
