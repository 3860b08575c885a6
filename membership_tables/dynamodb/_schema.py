"""The DynamoDB table itself: created on demand (``initialize``), waited for, its key schema checked."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from membership_tables.dynamodb._connection import DynamoDbConnection, error_code
from membership_tables.dynamodb._items import HASH_KEY, RANGE_KEY, Item
from membership_tables.dynamodb._settings import DynamoDbSettings
from membership_tables.errors import SCHEMA_MISSING_FIX, AccessDeniedError, InvalidTableUriError, TableUnavailableError

_USABLE_TABLE_STATES = {"ACTIVE", "UPDATING"}  # an UPDATING table still serves reads and writes


def describe(connection: DynamoDbConnection) -> Mapping[str, Any] | None:
    """The table's description, or None if it does not exist."""

    def request() -> Mapping[str, Any] | None:
        try:
            return connection.client.describe_table(TableName=connection.settings.table_name)["Table"]
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise

    return connection.call("DescribeTable", request)


def ensure_table(connection: DynamoDbConnection) -> None:
    """Create the table (on demand) if missing and wait while it is being created."""
    table = describe(connection)
    if table is None:
        try:
            _create_table(connection)
        except AccessDeniedError as exc:
            raise AccessDeniedError(
                f"DynamoDB table {connection.settings.table_name!r} does not exist in {connection.region}, and these "
                f"credentials may not create it; {SCHEMA_MISSING_FIX}"
            ) from exc.__cause__
        table = describe(connection)
    deadline = time.monotonic() + connection.settings.table_wait_time
    while table is None or table.get("TableStatus") == "CREATING":
        if time.monotonic() > deadline:
            raise TableUnavailableError(
                f"DynamoDB table {connection.settings.table_name!r} is still being created after "
                f"{connection.settings.table_wait_time}s; try initialize() again later"
            )
        time.sleep(0.5)
        table = describe(connection)
    if table.get("TableStatus") not in _USABLE_TABLE_STATES:
        raise TableUnavailableError(
            f"DynamoDB table {connection.settings.table_name!r} is {table.get('TableStatus')}, not usable; "
            "wait for it to become ACTIVE or name another table"
        )
    _check_key_schema(connection.settings, table)


def _create_table(connection: DynamoDbConnection) -> None:
    def create() -> None:
        try:
            connection.client.create_table(
                TableName=connection.settings.table_name,
                KeySchema=[
                    {"AttributeName": HASH_KEY, "KeyType": "HASH"},
                    {"AttributeName": RANGE_KEY, "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": HASH_KEY, "AttributeType": "S"},
                    {"AttributeName": RANGE_KEY, "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if error_code(exc) != "ResourceInUseException":  # another process is creating it
                raise

    connection.call("CreateTable", create)


def _check_key_schema(settings: DynamoDbSettings, table: Mapping[str, Any]) -> None:
    keys = {(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    if keys != {(HASH_KEY, "HASH"), (RANGE_KEY, "RANGE")} or types.get(HASH_KEY) != "S" or types.get(RANGE_KEY) != "S":
        raise InvalidTableUriError(
            f"DynamoDB table {settings.table_name!r} exists with another key schema ({sorted(keys)}); "
            f"a membership table needs hash key {HASH_KEY!r} (S) and range key {RANGE_KEY!r} (S): "
            "name another table in the URI"
        )


def put_if_absent(connection: DynamoDbConnection, item: Item) -> None:
    """Put ``item`` unless an item with its key exists (racing initializers agree)."""

    def put() -> None:
        try:
            connection.client.put_item(
                TableName=connection.settings.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(#silo)",
                ExpressionAttributeNames={"#silo": RANGE_KEY},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    connection.call("PutItem (version)", put)
