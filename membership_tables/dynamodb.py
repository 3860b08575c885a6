"""DynamoDB membership table: ``dynamodb://TABLE?region=REGION&endpoint_url=URL``.

One DynamoDB table holds any number of clusters. Hash key ``cluster_id`` (S), range key
``silo`` (S): a silo's ``host:port@generation``, or ``~version`` for the cluster's version
item (a silo key always holds ``:`` and ``@``, so the two can never collide).

* version item: ``version`` (N) and ``etag`` (N).
* row item: the fields of ``codec.entry_to_document`` as plain attributes (the address is
  the ``silo`` key), a numeric ``etag``, and ``i_am_alive_time`` as an ISO-8601 UTC string,
  which sorts like the time it names and so can be compared in condition expressions.

Every canonical write is one ``TransactWriteItems`` of the version item and the row (every
row, for ``update_rows``), each with a condition on its etag; heartbeats are a conditional ``UpdateItem`` of
``i_am_alive_time`` alone. Reads are strongly consistent and fenced by the version item.
Etags are random 63-bit numbers (see ``new_numeric_etag``). Throttling, 5xx, network
errors and transaction conflicts are retried by one tenacity policy (botocore's own
retries are off) and then raise ``TableUnavailableError``. See ``docs/dynamodb.md``.
"""

from __future__ import annotations

import functools
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar
from urllib.parse import parse_qs, urlsplit

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from membership_tables.codec import document_to_entry, entry_to_document, format_time, parse_time
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import (
    SCHEMA_MISSING_FIX,
    AccessDeniedError,
    InvalidEntryError,
    InvalidTableUriError,
    MalformedRowError,
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
    ensure_utc,
)
from membership_tables.redaction import remember_secret

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

T = TypeVar("T")
Item = Mapping[str, Any]
"""A DynamoDB item in the low-level wire format (``{"etag": {"N": "17"}, ...}``)."""

HASH_KEY = "cluster_id"
RANGE_KEY = "silo"
VERSION_KEY = "~version"
ETAG = "etag"
I_AM_ALIVE = "i_am_alive_time"
_MAX_ETAG = 2**63 - 1
_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_URI_PARAMETERS = ("region", "endpoint_url")
_THROTTLED = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TransactionInProgressException",
    "InternalServerError",
    "ServiceUnavailable",
}
_DENIED = {
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "MissingAuthenticationTokenException",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "AccessDenied",
}
"""Refused credentials or a missing IAM permission: ``AccessDeniedError``, never retried."""
_USABLE_TABLE_STATES = {"ACTIVE", "UPDATING"}  # an UPDATING table still serves reads and writes
_RETRYABLE_CANCELLATIONS = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
_HEARTBEAT_RACES = 5
"""How often ``update_row``/``update_rows`` re-try with a newer IAmAlive found before giving up (False)."""
MAX_TRANSACT_ITEMS = 100
"""DynamoDB's limit on the items of one ``TransactWriteItems`` request."""

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


@dataclass(frozen=True)
class DynamoDbSettings:
    """Where the table is and how hard to try; built by ``parse_uri``.

    ``retry_time`` (seconds, default 5) and ``max_attempts`` (default 8) bound the one retry
    policy for throttling, 5xx, network errors and transaction conflicts: a short budget,
    because the silo runtime has its own backoff above this layer. ``connect_timeout`` and
    ``read_timeout`` (seconds) bound one HTTP request (botocore's defaults are 60 s).
    ``table_wait_time`` (seconds) bounds the wait for a new table to become ACTIVE.
    Credentials given here override the AWS chain (environment, profile, instance role).
    """

    table_name: str
    region: str | None = None
    endpoint_url: str | None = None
    retry_time: float = 5.0
    max_attempts: int = 8
    connect_timeout: float = 2.0
    read_timeout: float = 5.0
    table_wait_time: float = 60.0
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)


_NUMBER_OPTIONS = ("retry_time", "connect_timeout", "read_timeout", "table_wait_time")
_STRING_OPTIONS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_SECRET_OPTIONS = ("aws_secret_access_key", "aws_session_token")


def parse_uri(uri: str, **options: Any) -> DynamoDbSettings:
    """Validate ``dynamodb://TABLE?region=R&endpoint_url=U`` and the options into settings."""
    example = "dynamodb://membership?region=eu-west-1"
    try:
        parts = urlsplit(uri)
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse DynamoDB table URI {uri!r} ({exc}); expected e.g. {example}") from exc
    if parts.scheme.lower() != "dynamodb" or parts.path not in ("", "/") or parts.fragment:
        raise InvalidTableUriError(
            f"expected 'dynamodb://TABLE?region=REGION&endpoint_url=URL' (e.g. {example}), got {uri!r}"
        )
    table_name = parts.netloc
    if not table_name:
        raise InvalidTableUriError(f"the DynamoDB table URI {uri!r} names no table; expected e.g. {example}")
    if not _TABLE_NAME_RE.match(table_name):
        raise InvalidTableUriError(
            f"invalid DynamoDB table name {table_name!r} in {uri!r}: use 3-255 letters, digits, '_', '-' or '.'"
        )
    unknown = sorted(set(query) - set(_URI_PARAMETERS))
    if unknown:
        raise InvalidTableUriError(
            f"unknown query parameter(s) {unknown} in {uri!r}; the DynamoDB URI takes only {list(_URI_PARAMETERS)}"
        )
    params: dict[str, str] = {}
    for name, values in query.items():
        if len(values) != 1 or not values[0]:
            raise InvalidTableUriError(f"query parameter {name!r} in {uri!r} must be given once, with a value")
        params[name] = values[0]
    endpoint = params.get("endpoint_url")
    if endpoint is not None and not re.match(r"^https?://[^/?#\s]+/?$", endpoint):
        raise InvalidTableUriError(f"endpoint_url must be like 'http://127.0.0.1:8000', got {endpoint!r} in {uri!r}")
    return DynamoDbSettings(table_name, params.get("region"), endpoint, **_checked_options(options))


def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    known = (*_NUMBER_OPTIONS, "max_attempts", *_STRING_OPTIONS)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidTableUriError(f"unknown DynamoDB table option(s) {unknown}; known options: {sorted(known)}")
    for name, value in options.items():
        if name in _STRING_OPTIONS:
            valid = isinstance(value, str) and bool(value)
        elif name == "max_attempts":
            valid = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        else:
            valid = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if not valid:
            shown = "***" if name in _SECRET_OPTIONS else repr(value)
            raise InvalidTableUriError(f"DynamoDB option {name}={shown} is invalid; see DynamoDbSettings for its type")
    for name in _SECRET_OPTIONS:
        remember_secret(options.get(name))
    return dict(options)


def new_numeric_etag() -> int:
    """A fresh etag: a uniformly random number in 1..2**63-1.

    A counter (old + 1) is fresh only within one item's life: a row deleted by cleanup and
    inserted again, or a cluster deleted and initialized again, would restart it, and a
    silo still holding a token from the old life could then win a write it should lose.
    A random 63-bit etag never depends on history; two draws collide with probability
    2**-63, far below any other failure in the system.
    """
    return secrets.randbelow(_MAX_ETAG) + 1


def _next_version(version: TableVersion) -> TableVersion:
    """The version item a write based on ``version`` leaves: its number, with a fresh etag."""
    return TableVersion(version.version, str(new_numeric_etag()))


def parse_etag(etag: str) -> int | None:
    """The number an etag string stands for, or None if we can never have issued it."""
    if not etag.isascii() or not etag.isdigit() or len(etag) > 19:
        return None
    value = int(etag)
    return value if 0 < value <= _MAX_ETAG else None


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: throttling, 5xx, network trouble, transaction conflicts."""
    if isinstance(exc, _VersionMovedError):
        return True
    if isinstance(exc, (BotoConnectionError, HTTPClientError)):
        return True
    if not isinstance(exc, ClientError):
        return False
    if error_code(exc) in _THROTTLED or int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)) >= 500:
        return True
    return bool(_RETRYABLE_CANCELLATIONS & {code for code, _ in cancellation_reasons(exc)})


def is_denied(exc: ClientError) -> bool:
    """Refused credentials or a missing IAM permission (by code, or an HTTP 403 whatever its body)."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return error_code(exc) in _DENIED or int(status) == 403


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def cancellation_reasons(exc: ClientError) -> list[tuple[str, Item | None]]:
    """``(code, old item or None)`` per transaction part, in request order."""
    reasons: list[Any] = list(exc.response.get("CancellationReasons", []))
    return [(str(reason.get("Code", "None")), reason.get("Item")) for reason in reasons]


class _VersionMovedError(Exception):
    """The version changed while a read was paging: the rows may be torn, so read again."""


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


class DynamoDbMembershipTable(MembershipTable):
    """A cluster's membership in one DynamoDB table shared by many clusters.

    The boto3 client is created once and shared by every thread using this handle
    (clients are thread-safe; the session that made it is never used again).
    """

    max_rows_per_update = MAX_TRANSACT_ITEMS - 1
    """``update_rows`` is one ``TransactWriteItems``: a ``Put`` per row plus the version item."""

    def __init__(self, settings: DynamoDbSettings, cluster_id: str) -> None:
        super().__init__(cluster_id)
        self.settings = settings
        session = boto3.session.Session(
            aws_access_key_id=settings.aws_access_key_id,
            aws_secret_access_key=settings.aws_secret_access_key,
            aws_session_token=settings.aws_session_token,
            region_name=settings.region,
        )
        if session.region_name is None:
            raise InvalidTableUriError(
                f"no AWS region for DynamoDB table {settings.table_name!r}: add ?region=REGION to the URI "
                "or set AWS_REGION (or a region in your AWS profile)"
            )
        self.region = session.region_name
        self._client: DynamoDBClient = session.client(
            "dynamodb",
            region_name=self.region,
            endpoint_url=settings.endpoint_url,
            config=Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
            ),
        )

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> DynamoDbMembershipTable:
        return cls(parse_uri(uri, **options), cluster_id)

    def __repr__(self) -> str:
        where = f", endpoint_url={self.settings.endpoint_url!r}" if self.settings.endpoint_url else ""
        table = f"{self.settings.table_name!r}, region={self.region!r}{where}"
        return f"DynamoDbMembershipTable({table}, cluster_id={self.cluster_id!r})"

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """Run ``operation`` under the retry policy; map what is left to TableUnavailableError."""
        retrying = Retrying(
            stop=self._should_stop,
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        try:
            return retrying(operation)
        except _VersionMovedError as exc:
            raise TableUnavailableError(
                f"{what} on DynamoDB table {self.settings.table_name!r}: the version kept changing while reading; "
                "writes are too frequent to take a consistent snapshot, try again"
            ) from exc
        except ClientError as exc:
            if not is_denied(exc):
                raise self._unavailable(what, exc) from exc
            raise AccessDeniedError(
                f"{what} on DynamoDB table {self.settings.table_name!r} was refused ({error_code(exc) or 'HTTP 403'}): "
                "check the AWS credentials, and that their IAM policy allows the actions in docs/dynamodb.md "
                "on this table"
            ) from exc
        except BotoCoreError as exc:
            raise self._unavailable(what, exc) from exc

    def _unavailable(self, what: str, exc: BotoCoreError | ClientError) -> TableUnavailableError:
        hint = ""
        if isinstance(exc, ClientError) and error_code(exc) == "ResourceNotFoundException":
            hint = "; the table does not exist: call initialize() to create it (or run `silo table init URI`)"
        return TableUnavailableError(f"{what} on DynamoDB table {self.settings.table_name!r} failed: {exc}{hint}")

    def _should_stop(self, state: RetryCallState) -> bool:
        """Stop when the next try would start after ``retry_time``, or after ``max_attempts`` unless
        a read was merely fenced off.

        A fenced read found no fault, only a writer in its way: it keeps trying for the whole
        time budget, so a busy cluster does not starve its readers. No try starts after the
        budget, so a call ends within ``retry_time`` plus one request's timeouts.
        """
        if (state.seconds_since_start or 0.0) + state.upcoming_sleep >= self.settings.retry_time:
            return True
        failure = state.outcome.exception() if state.outcome else None
        return state.attempt_number >= self.settings.max_attempts and not isinstance(failure, _VersionMovedError)

    def _key(self, silo: str) -> dict[str, Any]:
        return {HASH_KEY: {"S": self.cluster_id}, RANGE_KEY: {"S": silo}}

    def _where(self, silo: object) -> str:
        return f"(cluster_id={self.cluster_id!r}, silo={silo!r}) in DynamoDB table {self.settings.table_name!r}"

    def _version_from_item(self, item: Item | None) -> TableVersion:
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
                f"version item {self._where(VERSION_KEY)} cannot be parsed ({exc!r}): it needs numeric 'version' "
                "and 'etag' attributes. Repair or delete it by hand; nothing was changed"
            ) from exc

    def _row_from_item(self, item: Item) -> tuple[MembershipEntry, str] | MalformedRow:
        """The row an item holds and its etag, or how the item is malformed."""
        silo = item.get(RANGE_KEY, {}).get("S")
        key = f"item {self._where(silo)}"
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

    def _row_item(self, entry: MembershipEntry, etag: int) -> dict[str, Any]:
        document = entry_to_document(entry)
        silo = document.pop("address")
        item = {name: _serializer.serialize(value) for name, value in document.items()}
        return {**item, **self._key(silo), ETAG: {"N": str(etag)}}

    # --- schema ---------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        self._ensure_table()
        if try_init_version:
            self._put_if_absent(
                {**self._key(VERSION_KEY), "version": {"N": "0"}, ETAG: {"N": str(new_numeric_etag())}},
            )

    def _describe(self) -> Mapping[str, Any] | None:
        def describe() -> Mapping[str, Any] | None:
            try:
                return self._client.describe_table(TableName=self.settings.table_name)["Table"]
            except ClientError as exc:
                if error_code(exc) == "ResourceNotFoundException":
                    return None
                raise

        return self._call("DescribeTable", describe)

    def _ensure_table(self) -> None:
        """Create the table (on demand) if missing and wait while it is being created."""
        table = self._describe()
        if table is None:
            try:
                self._create_table()
            except AccessDeniedError as exc:
                raise AccessDeniedError(
                    f"DynamoDB table {self.settings.table_name!r} does not exist in {self.region}, and these "
                    f"credentials may not create it; {SCHEMA_MISSING_FIX}"
                ) from exc.__cause__
            table = self._describe()
        deadline = time.monotonic() + self.settings.table_wait_time
        while table is None or table.get("TableStatus") == "CREATING":
            if time.monotonic() > deadline:
                raise TableUnavailableError(
                    f"DynamoDB table {self.settings.table_name!r} is still being created after "
                    f"{self.settings.table_wait_time}s; try initialize() again later"
                )
            time.sleep(0.5)
            table = self._describe()
        if table.get("TableStatus") not in _USABLE_TABLE_STATES:
            raise TableUnavailableError(
                f"DynamoDB table {self.settings.table_name!r} is {table.get('TableStatus')}, not usable; "
                "wait for it to become ACTIVE or name another table"
            )
        self._check_key_schema(table)

    def _create_table(self) -> None:
        def create() -> None:
            try:
                self._client.create_table(
                    TableName=self.settings.table_name,
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

        self._call("CreateTable", create)

    def _check_key_schema(self, table: Mapping[str, Any]) -> None:
        keys = {(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])}
        types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
        if (
            keys != {(HASH_KEY, "HASH"), (RANGE_KEY, "RANGE")}
            or types.get(HASH_KEY) != "S"
            or types.get(RANGE_KEY) != "S"
        ):
            raise InvalidTableUriError(
                f"DynamoDB table {self.settings.table_name!r} exists with another key schema ({sorted(keys)}); "
                f"a membership table needs hash key {HASH_KEY!r} (S) and range key {RANGE_KEY!r} (S): "
                "name another table in the URI"
            )

    def _put_if_absent(self, item: Item) -> None:
        def put() -> None:
            try:
                self._client.put_item(
                    TableName=self.settings.table_name,
                    Item=item,
                    ConditionExpression="attribute_not_exists(#silo)",
                    ExpressionAttributeNames={"#silo": RANGE_KEY},
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

        self._call("PutItem (version)", put)

    # --- reads ----------------------------------------------------------------------------

    def _get_version(self) -> TableVersion:
        response = self._client.get_item(
            TableName=self.settings.table_name, Key=self._key(VERSION_KEY), ConsistentRead=True
        )
        return self._version_from_item(response.get("Item"))

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

    def _snapshot(self, items: list[Item], version: TableVersion) -> MembershipTableData:
        read = [self._row_from_item(item) for item in items if item.get(RANGE_KEY, {}).get("S") != VERSION_KEY]
        return MembershipTableData.from_parsed(read, version)

    def read_all(self) -> MembershipTableData:
        def fenced_read() -> MembershipTableData:
            # Query pages are not one snapshot; the version item brackets them. Every write
            # changes the version etag, so an unchanged etag means no write committed meanwhile.
            before = self._get_version()
            items = list(self._query_items())
            after = self._get_version()
            if after != before:
                raise _VersionMovedError
            return self._snapshot(items, after)

        return self._call("read_all", fenced_read)

    def read_version(self) -> TableVersion:
        return self._call("GetItem (version)", self._get_version)

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        def transact_get() -> MembershipTableData:
            response = self._client.transact_get_items(
                TransactItems=[
                    {"Get": {"TableName": self.settings.table_name, "Key": self._key(VERSION_KEY)}},
                    {"Get": {"TableName": self.settings.table_name, "Key": self._key(str(silo_address))}},
                ]
            )
            version_item, row_item = (part.get("Item") for part in response["Responses"])
            return self._snapshot([row_item] if row_item else [], self._version_from_item(version_item))

        return self._call("read_row", transact_get)

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
        version_item = {
            **self._key(VERSION_KEY),
            "version": {"N": str(written.version)},
            ETAG: {"N": written.etag},
        }
        request: dict[str, Any] = {
            # The token makes a retry after a lost response idempotent for 10 minutes, so a
            # committed write is never reported as a lost race.
            "ClientRequestToken": uuid.uuid4().hex,
            "TransactItems": [
                {
                    "Put": {
                        "TableName": table,
                        "Item": version_item,
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

        return self._call("TransactWriteItems", transact)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        version_etag = parse_etag(version.etag)
        if version_etag is None:
            return None
        written, row_etag = _next_version(version), new_numeric_etag()
        row = self._row_put(self._row_item(entry, row_etag), "attribute_not_exists(#silo)", {"#silo": RANGE_KEY})
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
            written, new_etags = _next_version(version), [new_numeric_etag() for _ in entries]
            reasons = self._transact_write(
                written,
                version_etag,
                [
                    self._row_put(
                        self._row_item(entry, new_etag),
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
            raise MalformedRowError(f"membership row {self._where(str(entry.silo_address))}: {exc}") from exc

    # --- blind writes ---------------------------------------------------------------------

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        alive = format_time(ensure_utc(when, "IAmAlive time"))

        def heartbeat() -> None:
            try:
                self._client.update_item(
                    TableName=self.settings.table_name,
                    Key=self._key(str(silo_address)),
                    UpdateExpression="SET #alive = :alive",
                    ConditionExpression="attribute_exists(#silo) AND #alive < :alive",
                    ExpressionAttributeNames={"#alive": I_AM_ALIVE, "#silo": RANGE_KEY},
                    ExpressionAttributeValues={":alive": {"S": alive}},
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":  # absent row or newer heartbeat
                    raise

        self._call("UpdateItem (IAmAlive)", heartbeat)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        cutoff = format_time(before)
        items = self._call("Query", lambda: list(self._query_items()))
        defunct = [
            (entry, etag)
            for entry, etag in self._snapshot(items, UNINITIALIZED_VERSION).rows
            if entry.status is SiloStatus.DEAD and entry.last_activity < before
        ]
        return sum(self._delete_if_unchanged(entry, etag, cutoff) for entry, etag in defunct)

    def _delete_if_unchanged(self, entry: MembershipEntry, etag: str, cutoff: str) -> bool:
        """Delete a defunct row unless it was rewritten or heartbeat past the cutoff meanwhile."""

        def delete() -> bool:
            try:
                self._client.delete_item(
                    TableName=self.settings.table_name,
                    Key=self._key(str(entry.silo_address)),
                    ConditionExpression="#etag = :etag AND #alive < :cutoff",
                    ExpressionAttributeNames={"#etag": ETAG, "#alive": I_AM_ALIVE},
                    ExpressionAttributeValues={":etag": {"N": etag}, ":cutoff": {"S": cutoff}},
                )
                return True
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise

        return self._call("DeleteItem (cleanup)", delete)

    def delete_cluster_entries(self) -> None:
        def delete(silo: str) -> None:
            self._client.delete_item(TableName=self.settings.table_name, Key=self._key(silo))

        # The version item goes first: from then on no write of this cluster can commit.
        self._call("DeleteItem (version)", lambda: delete(VERSION_KEY))
        items = self._call("Query", lambda: list(self._query_items()))
        for item in items:
            self._call("DeleteItem", functools.partial(delete, item[RANGE_KEY]["S"]))

    def close(self) -> None:
        self._client.close()
