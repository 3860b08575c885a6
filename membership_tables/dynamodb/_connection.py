"""The boto3 client of one table handle and the one retry policy every call goes through.

Throttling, 5xx, network errors and transaction conflicts are retried (botocore's own retries
are off) within ``retry_time`` and ``max_attempts``; what is left becomes
``TableUnavailableError``, and refused credentials or a missing IAM permission
``AccessDeniedError`` (never retried).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.model import OperationModel
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from membership_tables.dynamodb._items import Item
from membership_tables.dynamodb._settings import DynamoDbSettings
from membership_tables.errors import AccessDeniedError, InvalidTableUriError, ReadOnlyTableError, TableUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

T = TypeVar("T")

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
_RETRYABLE_CANCELLATIONS = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}


class _VersionMovedError(Exception):
    """The version changed while a read was paging: the rows may be torn, so read again."""


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


READ_OPERATIONS = frozenset({"DescribeTable", "GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
"""The DynamoDB operations that change nothing: all a read-only client sends."""


def send_only_reads(client: DynamoDBClient, table_name: str) -> None:
    """Make ``client`` refuse, before anything is sent, every operation outside ``READ_OPERATIONS``.

    A guard of the client, not of DynamoDB: what DynamoDB itself enforces is the IAM policy of
    the credentials (give a read-only command one that allows only reads, docs/dynamodb.md).
    """

    def refuse_writes(model: OperationModel, **_: Any) -> None:
        if model.name not in READ_OPERATIONS:
            raise ReadOnlyTableError(
                f"{model.name} is a write, and this handle of DynamoDB table {table_name!r} was opened read-only; "
                "nothing was sent: open it without read_only to write"
            )

    client.meta.events.register("before-call.dynamodb", refuse_writes)


class DynamoDbConnection:
    """The client (created once, shared by every thread of the handle: clients are thread-safe;
    the session that made it is never used again) and the retry policy of its calls."""

    def __init__(self, settings: DynamoDbSettings) -> None:
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
        self.region: str = session.region_name
        self.client: DynamoDBClient = session.client(
            "dynamodb",
            region_name=self.region,
            endpoint_url=settings.endpoint_url,
            config=Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
            ),
        )
        if settings.read_only:
            send_only_reads(self.client, settings.table_name)

    def call(self, what: str, operation: Callable[[], T]) -> T:
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

    def close(self) -> None:
        self.client.close()
