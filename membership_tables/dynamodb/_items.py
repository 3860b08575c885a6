"""The items of one cluster in the DynamoDB table: keys, etags, and rows to and from items."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeGuard

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from membership_tables.codec import document_to_entry, entry_to_document
from membership_tables.contract import UNINITIALIZED_VERSION
from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import MalformedRow, MembershipEntry, MembershipTableData, TableVersion

Item = Mapping[str, Any]
"""A DynamoDB item in the low-level wire format (``{"etag": {"N": "17"}, ...}``)."""

HASH_KEY = "cluster_id"
RANGE_KEY = "silo"
VERSION_KEY = "~version"
ETAG = "etag"
I_AM_ALIVE = "i_am_alive_time"
_MAX_ETAG = 2**63 - 1

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def new_numeric_etag() -> int:
    """A fresh etag: a uniformly random number in 1..2**63-1.

    A counter (old + 1) is fresh only within one item's life: a row deleted by cleanup and
    inserted again, or a cluster deleted and initialized again, would restart it, and a
    silo still holding a token from the old life could then win a write it should lose.
    A random 63-bit etag never depends on history; two draws collide with probability
    2**-63, far below any other failure in the system.
    """
    return secrets.randbelow(_MAX_ETAG) + 1


def next_version(version: TableVersion) -> TableVersion:
    """The version item a write based on ``version`` leaves: its number, with a fresh etag."""
    return TableVersion(version.version, str(new_numeric_etag()))


def parse_etag(etag: str) -> int | None:
    """The number an etag string stands for, or None if we can never have issued it."""
    if not etag.isascii() or not etag.isdigit() or len(etag) > 19:
        return None
    value = int(etag)
    return value if 0 < value <= _MAX_ETAG else None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: object) -> object:
    """DynamoDB numbers arrive as Decimal; the model wants int (others fail validation)."""
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class ClusterItems:
    """The items of one cluster: their keys, and rows and versions to and from items."""

    def __init__(self, table_name: str, cluster_id: str) -> None:
        self.table_name = table_name
        self.cluster_id = cluster_id

    def key(self, silo: str) -> dict[str, Any]:
        return {HASH_KEY: {"S": self.cluster_id}, RANGE_KEY: {"S": silo}}

    def where(self, silo: object) -> str:
        return f"(cluster_id={self.cluster_id!r}, silo={silo!r}) in DynamoDB table {self.table_name!r}"

    def version_item(self, version: int, etag: int | str) -> dict[str, Any]:
        return {**self.key(VERSION_KEY), "version": {"N": str(version)}, ETAG: {"N": str(etag)}}

    def version_from_item(self, item: Item | None) -> TableVersion:
        if not item:
            return UNINITIALIZED_VERSION
        try:
            version = _plain(_deserializer.deserialize(item["version"]))
            etag = _plain(_deserializer.deserialize(item[ETAG]))
            if not _is_int(version) or not _is_int(etag):
                raise TypeError("version and etag must be integers")
            return TableVersion(version, str(etag))
        except (KeyError, TypeError, InvalidEntryError) as exc:
            raise MalformedRowError(
                f"version item {self.where(VERSION_KEY)} cannot be parsed ({exc!r}): it needs numeric 'version' "
                "and 'etag' attributes. Repair or delete it by hand; nothing was changed"
            ) from exc

    def row_from_item(self, item: Item) -> tuple[MembershipEntry, str] | MalformedRow:
        """The row an item holds and its etag, or how the item is malformed."""
        silo = item.get(RANGE_KEY, {}).get("S")
        key = f"item {self.where(silo)}"
        try:
            attributes = {name: _plain(_deserializer.deserialize(value)) for name, value in item.items()}
        except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            return MalformedRow(key, f"undecodable attributes ({exc!r})")
        etag = attributes.pop(ETAG, None)
        if not _is_int(etag):
            return MalformedRow(key, f"no numeric 'etag' attribute (got {etag!r})")
        attributes.pop(HASH_KEY, None)
        attributes["address"] = attributes.pop(RANGE_KEY, None)
        try:
            entry = document_to_entry(attributes)
        except InvalidEntryError as exc:
            return MalformedRow(key, str(exc))
        if str(entry.silo_address) != silo:
            return MalformedRow(key, f"the key is not in canonical form (expected {str(entry.silo_address)!r})")
        return entry, str(etag)

    def row_item(self, entry: MembershipEntry, etag: int) -> dict[str, Any]:
        document = entry_to_document(entry)
        silo = document.pop("address")
        item = {name: _serializer.serialize(value) for name, value in document.items()}
        return {**item, **self.key(silo), ETAG: {"N": str(etag)}}

    def snapshot(self, items: list[Item], version: TableVersion) -> MembershipTableData:
        """The rows of ``items`` (the version item among them is skipped) at ``version``."""
        read = [self.row_from_item(item) for item in items if item.get(RANGE_KEY, {}).get("S") != VERSION_KEY]
        return MembershipTableData.from_parsed(read, version)
