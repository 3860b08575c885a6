"""The keys of one cluster in Consul's KV store and what they hold: the layout, the ``/v1/txn``
operations on them, and the decoding of the version and heartbeat values."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from membership_tables import codec
from membership_tables.contract import UNINITIALIZED_VERSION
from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import SiloAddress, TableVersion

KVItem = dict[str, Any]


@dataclass(frozen=True)
class ConsulLayout:
    """The keys of one cluster; every key of the cluster starts with ``root`` (which ends in '/')."""

    root: str

    @property
    def version(self) -> str:
        return f"{self.root}version"

    def member(self, silo: SiloAddress | str) -> str:
        return f"{self.root}members/{silo}"

    def alive(self, silo: SiloAddress | str) -> str:
        return f"{self.root}alive/{silo}"


@dataclass
class KeyTree:
    """One recursive read of a cluster, split by kind; ``members``/``alive`` keyed by address text."""

    version: KVItem | None = None
    members: dict[str, KVItem] = field(default_factory=dict)
    alive: dict[str, KVItem] = field(default_factory=dict)

    @classmethod
    def of(cls, root: str, items: Iterable[KVItem]) -> KeyTree:
        """The tree of the items a recursive GET of ``root`` returned (other keys are ignored)."""
        tree = cls()
        for item in items:
            name = item["Key"][len(root) :]
            kind, _, silo = name.partition("/")
            if name == "version":
                tree.version = item
            elif kind in ("members", "alive") and silo:
                getattr(tree, kind)[silo] = item
        return tree


def kv_op(verb: str, key: str, value: bytes | None = None, index: int = 0, flags: int = 0) -> KVItem:
    """One KV operation of ``/v1/txn`` (values travel base64-encoded)."""
    op: KVItem = {"Verb": verb, "Key": key, "Index": index, "Flags": flags}
    if value is not None:
        op["Value"] = base64.b64encode(value).decode("ascii")
    return op


def modify_index(etag: str) -> int | None:
    """The ModifyIndex an etag stands for; ``None`` if no key can have it (so the write just loses).

    Index 0 is refused too: to Consul ``cas`` at 0 means "create", which would let a stale or empty
    token create a version key or resurrect a removed row.
    """
    if not (isinstance(etag, str) and etag.isascii() and etag.isdigit()):
        return None
    return int(etag) or None


def version_value(number: int) -> bytes:
    return json.dumps({"version": number}).encode()


def version_of(item: KVItem | None) -> TableVersion:
    """The table version the version key holds (``UNINITIALIZED_VERSION`` if it is absent)."""
    if item is None:
        return UNINITIALIZED_VERSION
    try:
        number = json.loads(item["Value"] or b"")["version"]
        return TableVersion(number, str(item["ModifyIndex"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise MalformedRowError(
            f'Consul key {item["Key"]!r} must hold {{"version": N}} with N >= 0, got {item["Value"]!r} ({exc}). '
            "Repair or delete it by hand; nothing was changed"
        ) from exc


def alive_time(item: KVItem) -> datetime:
    """The time a heartbeat key holds."""
    try:
        return codec.parse_time((item["Value"] or b"").decode(), "IAmAlive time")
    except (InvalidEntryError, UnicodeDecodeError) as exc:
        raise MalformedRowError(
            f"Consul key {item['Key']!r} must hold an ISO-8601 time, got {item['Value']!r} ({exc}). "
            "Repair or delete it by hand; nothing was changed"
        ) from exc


def heartbeat_is_newer(beat: KVItem, when: datetime) -> bool:
    """True if ``beat`` holds a time at or after ``when``; a malformed one is overwritten by the next beat."""
    try:
        return alive_time(beat) >= when
    except MalformedRowError:
        return False
