"""``DynamoDbMembershipTable``: the membership contract on DynamoDB (see the package docstring)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from membership_tables.codec import format_time, parse_time
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.dynamodb._connection import (
    DynamoDbConnection,
    _VersionMovedError,
    cancellation_reasons,
    error_code,
)
from membership_tables.dynamodb._items import (
    ETAG,
    HASH_KEY,
    I_AM_ALIVE,
    RANGE_KEY,
    VERSION_KEY,
    ClusterItems,
    Item,
    new_numeric_etag,
    next_version,
    parse_etag,
)
from membership_tables.dynamodb._schema import ensure_table, put_if_absent
from membership_tables.dynamodb._settings import DynamoDbSettings, parse_uri
from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    ensure_utc,
)

_HEARTBEAT_RACES = 5
"""How often ``update_row``/``update_rows`` re-try with a newer IAmAlive found before giving up (False)."""
MAX_TRANSACT_ITEMS = 100
"""DynamoDB's limit on the items of one ``TransactWriteItems`` request."""


class DynamoDbMembershipTable(MembershipTable):
    """A cluster's membership in one DynamoDB table shared by many clusters.

    The boto3 client is created once and shared by every thread using this handle
    (clients are thread-safe; the session that made it is never used again).
    """

    max_rows_per_update = MAX_TRANSACT_ITEMS - 1
    """``update_rows`` is one ``TransactWriteItems``: a ``Put`` per row plus the version item."""
    read_only_sessions = True

    def __init__(self, settings: DynamoDbSettings, cluster_id: str) -> None:
        super().__init__(cluster_id)
        self.settings = settings
        self._dynamo = DynamoDbConnection(settings)
        self.region = self._dynamo.region
        self._client = self._dynamo.client
        self._items = ClusterItems(settings.table_name, cluster_id)

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, *, read_only: bool = False, **options: Any) -> DynamoDbMembershipTable:
        """``read_only``: a client that sends only read operations (``send_only_reads``)."""
        return cls(replace(parse_uri(uri, **options), read_only=read_only), cluster_id)

    def __repr__(self) -> str:
        where = f", endpoint_url={self.settings.endpoint_url!r}" if self.settings.endpoint_url else ""
        table = f"{self.settings.table_name!r}, region={self.region!r}{where}"
        return f"DynamoDbMembershipTable({table}, cluster_id={self.cluster_id!r})"

    # --- schema ---------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        ensure_table(self._dynamo)
        if try_init_version:
            put_if_absent(self._dynamo, self._items.version_item(0, new_numeric_etag()))

    # --- reads ----------------------------------------------------------------------------

    def _get_version(self) -> TableVersion:
        response = self._client.get_item(
            TableName=self.settings.table_name, Key=self._items.key(VERSION_KEY), ConsistentRead=True
        )
        return self._items.version_from_item(response.get("Item"))

    def _query_items(self) -> Iterator[Item]:
        """Every item of this cluster (version item included), page by page, consistently."""
        arguments: dict[str, Any] = {
            "TableName": self.settings.table_name,
            "KeyConditionExpression": "#cluster = :cluster",
            "ExpressionAttributeNames": {"#cluster": HASH_KEY},
            "ExpressionAttributeValues": {":cluster": {"S": self.cluster_id}},
            "ConsistentRead": True,
        }
        while True:
            page = self._client.query(**arguments)
            yield from page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return
            arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def read_all(self) -> MembershipTableData:
        def fenced_read() -> MembershipTableData:
            # Query pages are not one snapshot; the version item brackets them. Every write
            # changes the version etag, so an unchanged etag means no write committed meanwhile.
            before = self._get_version()
            items = list(self._query_items())
            after = self._get_version()
            if after != before:
                raise _VersionMovedError
            return self._items.snapshot(items, after)

        return self._dynamo.call("read_all", fenced_read)

    def read_version(self) -> TableVersion:
        return self._dynamo.call("GetItem (version)", self._get_version)

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        def transact_get() -> MembershipTableData:
            response = self._client.transact_get_items(
                TransactItems=[
                    {"Get": {"TableName": self.settings.table_name, "Key": self._items.key(VERSION_KEY)}},
                    {"Get": {"TableName": self.settings.table_name, "Key": self._items.key(str(silo_address))}},
                ]
            )
            version_item, row_item = (part.get("Item") for part in response["Responses"])
            return self._items.snapshot([row_item] if row_item else [], self._items.version_from_item(version_item))

        return self._dynamo.call("read_row", transact_get)

    # --- canonical writes -----------------------------------------------------------------

    def _row_put(
        self, row: dict[str, Any], condition: str, names: dict[str, str], values: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One ``Put`` of a transaction: ``row`` if ``condition`` holds (reporting the old item if not)."""
        put: dict[str, Any] = {
            "TableName": self.settings.table_name,
            "Item": row,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            put["ExpressionAttributeValues"] = values
        return put

    def _transact_write(
        self, written: TableVersion, version_etag: int, row_puts: Sequence[dict[str, Any]]
    ) -> list[tuple[str, Item | None]]:
        """One transaction: the version item (its etag must be ``version_etag``; it becomes
        ``written``) and the rows. Returns [] on success, else the cancellation reasons
        (version first, then the rows in order)."""
        table = self.settings.table_name
        request: dict[str, Any] = {
            # The token makes a retry after a lost response idempotent for 10 minutes, so a
            # committed write is never reported as a lost race.
            "ClientRequestToken": uuid.uuid4().hex,
            "TransactItems": [
                {
                    "Put": {
                        "TableName": table,
                        "Item": self._items.version_item(written.version, written.etag),
                        "ConditionExpression": "#etag = :version_etag",
                        "ExpressionAttributeNames": {"#etag": ETAG},
                        "ExpressionAttributeValues": {":version_etag": {"N": str(version_etag)}},
                    }
                },
                *({"Put": put} for put in row_puts),
            ],
        }

        def transact() -> list[tuple[str, Item | None]]:
            try:
                self._client.transact_write_items(**request)
                return []
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if any(code == "ConditionalCheckFailed" for code, _ in reasons):
                    return reasons
                raise

        return self._dynamo.call("TransactWriteItems", transact)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        version_etag = parse_etag(version.etag)
        if version_etag is None:
            return None
        written, row_etag = next_version(version), new_numeric_etag()
        row = self._row_put(self._items.row_item(entry, row_etag), "attribute_not_exists(#silo)", {"#silo": RANGE_KEY})
        if self._transact_write(written, version_etag, [row]):
            return None
        return CommittedWrite(written, ((entry, str(row_etag)),))

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """One transaction of the version item and every row, each conditioned on its etag.

        A row's condition also requires the stored IAmAlive to be no newer than the one
        written, so a newer heartbeat is never overwritten: if only that part failed, the
        stored time is adopted and the transaction tried again (at most ``_HEARTBEAT_RACES`` times).
        """
        batch = checked_updates(updates, self.max_rows_per_update)
        version_etag = parse_etag(version.etag)
        row_etags = [parse_etag(etag) for _, etag in batch]
        if version_etag is None or None in row_etags:
            return None
        entries = [entry for entry, _ in batch]
        for _ in range(_HEARTBEAT_RACES):
            written, new_etags = next_version(version), [new_numeric_etag() for _ in entries]
            reasons = self._transact_write(
                written,
                version_etag,
                [
                    self._row_put(
                        self._items.row_item(entry, new_etag),
                        "#etag = :row_etag AND #alive <= :alive",
                        {"#etag": ETAG, "#alive": I_AM_ALIVE},
                        {":row_etag": {"N": str(row_etag)}, ":alive": {"S": format_time(entry.i_am_alive_time)}},
                    )
                    for entry, row_etag, new_etag in zip(entries, row_etags, new_etags, strict=True)
                ],
            )
            if not reasons:
                return CommittedWrite(
                    written, tuple((entry, str(etag)) for (entry, _), etag in zip(batch, new_etags, strict=True))
                )
            (version_code, _), *row_reasons = reasons
            if version_code == "ConditionalCheckFailed":
                return None
            for position, (code, old) in enumerate(row_reasons):
                if code != "ConditionalCheckFailed":
                    continue
                newer = self._newer_heartbeat(entries[position], row_etags[position], old)
                if newer is None:
                    return None
                entries[position] = newer
        return None

    def _newer_heartbeat(
        self, entry: MembershipEntry, row_etag: int | None, old: Item | None
    ) -> MembershipEntry | None:
        """``entry`` with the stored IAmAlive if only a newer heartbeat failed its condition, else ``None``."""
        if not old:
            return None
        stored_etag, stored_alive = old.get(ETAG, {}).get("N"), old.get(I_AM_ALIVE, {}).get("S")
        if stored_etag != str(row_etag) or not isinstance(stored_alive, str):
            return None
        if stored_alive <= format_time(entry.i_am_alive_time):
            return None
        try:
            return entry.replace(i_am_alive_time=parse_time(stored_alive, I_AM_ALIVE))
        except InvalidEntryError as exc:
            raise MalformedRowError(f"membership row {self._items.where(str(entry.silo_address))}: {exc}") from exc

    # --- blind writes ---------------------------------------------------------------------

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        alive = format_time(ensure_utc(when, "IAmAlive time"))

        def heartbeat() -> None:
            try:
                self._client.update_item(
                    TableName=self.settings.table_name,
                    Key=self._items.key(str(silo_address)),
                    UpdateExpression="SET #alive = :alive",
                    ConditionExpression="attribute_exists(#silo) AND #alive < :alive",
                    ExpressionAttributeNames={"#alive": I_AM_ALIVE, "#silo": RANGE_KEY},
                    ExpressionAttributeValues={":alive": {"S": alive}},
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":  # absent row or newer heartbeat
                    raise

        self._dynamo.call("UpdateItem (IAmAlive)", heartbeat)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        cutoff = format_time(before)
        items = self._dynamo.call("Query", lambda: list(self._query_items()))
        defunct = [
            (entry, etag)
            for entry, etag in self._items.snapshot(items, UNINITIALIZED_VERSION).rows
            if entry.status is SiloStatus.DEAD and entry.last_activity < before
        ]
        return sum(self._delete_if_unchanged(entry, etag, cutoff) for entry, etag in defunct)

    def _delete_if_unchanged(self, entry: MembershipEntry, etag: str, cutoff: str) -> bool:
        """Delete a defunct row unless it was rewritten or heartbeat past the cutoff meanwhile."""

        def delete() -> bool:
            try:
                self._client.delete_item(
                    TableName=self.settings.table_name,
                    Key=self._items.key(str(entry.silo_address)),
                    ConditionExpression="#etag = :etag AND #alive < :cutoff",
                    ExpressionAttributeNames={"#etag": ETAG, "#alive": I_AM_ALIVE},
                    ExpressionAttributeValues={":etag": {"N": etag}, ":cutoff": {"S": cutoff}},
                )
                return True
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise

        return self._dynamo.call("DeleteItem (cleanup)", delete)

    def delete_cluster_entries(self) -> None:
        def delete(silo: str) -> None:
            self._client.delete_item(TableName=self.settings.table_name, Key=self._items.key(silo))

        # The version item goes first: from then on no write of this cluster can commit.
        self._dynamo.call("DeleteItem (version)", lambda: delete(VERSION_KEY))
        items = self._dynamo.call("Query", lambda: list(self._query_items()))
        for item in items:
            self._dynamo.call("DeleteItem", functools.partial(delete, item[RANGE_KEY]["S"]))

    def close(self) -> None:
        self._dynamo.close()
