"""Where the DynamoDB table is and how hard to try: ``DynamoDbSettings`` and the URI parser."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from membership_tables.errors import InvalidTableUriError
from membership_tables.redaction import remember_secret

_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_URI_PARAMETERS = ("region", "endpoint_url")


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
    read_only: bool = False
    """The client sends read operations only (``send_only_reads``); ``from_uri(..., read_only=True)``."""


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
