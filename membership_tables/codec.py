"""JSON encoding of rows, shared by the document stores (ZooKeeper, Consul, DynamoDB).

The document is meant to be read by people inspecting the store by hand: addresses as
``host:port@generation``, status by name, times as ISO-8601 UTC strings.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import MembershipEntry, SiloAddress, SiloStatus, ensure_utc

SCHEMA_VERSION = 1


def new_etag() -> str:
    """A fresh, never-before-seen etag: 128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


def format_time(when: datetime) -> str:
    """ISO-8601 in UTC with microseconds, e.g. ``2026-11-22T00:15:21.123456+00:00``."""
    return ensure_utc(when, "time").isoformat(timespec="microseconds")


def parse_time(text: object, what: str) -> datetime:
    if not isinstance(text, str):
        raise InvalidEntryError(f"{what} must be an ISO-8601 string, got {text!r}")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidEntryError(f"{what} is not an ISO-8601 time: {text!r}") from exc
    return ensure_utc(parsed, what)


def votes_to_json(entry: MembershipEntry) -> list[dict[str, str]]:
    """Suspicion votes as ``[{"by": "host:port@gen", "at": ISO}]``, oldest first as stored."""
    return [{"by": str(voter), "at": format_time(when)} for voter, when in entry.suspect_times]


def votes_from_json(value: object) -> tuple[tuple[SiloAddress, datetime], ...]:
    if not isinstance(value, list):
        raise InvalidEntryError(f"suspect_times must be a list, got {value!r}")
    votes = []
    for vote in value:
        if not isinstance(vote, Mapping):
            raise InvalidEntryError(f"a suspicion vote must be an object with 'by' and 'at', got {vote!r}")
        votes.append((SiloAddress.parse(str(vote.get("by", ""))), parse_time(vote.get("at"), "suspicion vote time")))
    return tuple(votes)


def entry_to_document(entry: MembershipEntry) -> dict[str, Any]:
    """The row as a JSON-ready dict (canonical fields and the IAmAlive time)."""
    return {
        "schema": SCHEMA_VERSION,
        "address": str(entry.silo_address),
        "status": entry.status.name,
        "silo_name": entry.silo_name,
        "host_name": entry.host_name,
        "role_name": entry.role_name,
        "proxy_port": entry.proxy_port,
        "update_zone": entry.update_zone,
        "fault_zone": entry.fault_zone,
        "start_time": format_time(entry.start_time),
        "i_am_alive_time": format_time(entry.i_am_alive_time),
        "suspect_times": votes_to_json(entry),
        "properties": dict(entry.properties),
    }


def document_to_entry(document: object) -> MembershipEntry:
    """Parse a row document; ``InvalidEntryError`` says what is wrong with it."""
    if not isinstance(document, Mapping):
        raise InvalidEntryError(f"expected a JSON object, got {type(document).__name__}")
    status_name = document.get("status")
    if not isinstance(status_name, str) or status_name not in SiloStatus.__members__:
        raise InvalidEntryError(f"unknown status {status_name!r}")
    return MembershipEntry(
        silo_address=SiloAddress.parse(str(document.get("address", ""))),
        status=SiloStatus[status_name],
        silo_name=document.get("silo_name", ""),
        host_name=document.get("host_name", ""),
        role_name=document.get("role_name", ""),
        proxy_port=document.get("proxy_port", 0),
        update_zone=document.get("update_zone", 0),
        fault_zone=document.get("fault_zone", 0),
        start_time=parse_time(document.get("start_time"), "start_time"),
        i_am_alive_time=parse_time(document.get("i_am_alive_time"), "i_am_alive_time"),
        suspect_times=votes_from_json(document.get("suspect_times", [])),
        properties=document.get("properties", {}),
    )


def entry_from_document(document: object, where: str) -> MembershipEntry:
    """Parse a row document; ``where`` names the row in the ``MalformedRowError``."""
    try:
        return document_to_entry(document)
    except InvalidEntryError as exc:
        raise MalformedRowError(
            f"membership row {where} cannot be parsed: {exc}. Repair or delete it by hand; nothing was changed"
        ) from exc


def dumps(entry: MembershipEntry) -> bytes:
    """The row document as compact UTF-8 JSON bytes."""
    return json.dumps(entry_to_document(entry), separators=(",", ":"), ensure_ascii=False).encode()


def bytes_to_entry(data: bytes | str) -> MembershipEntry:
    """Parse bytes written by ``dumps``; ``InvalidEntryError`` says what is wrong with them."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise InvalidEntryError(f"not valid JSON ({exc})") from exc
    return document_to_entry(document)


def loads(data: bytes | str, where: str) -> MembershipEntry:
    """Parse bytes written by ``dumps``; a malformed row raises ``MalformedRowError`` naming ``where``."""
    try:
        return bytes_to_entry(data)
    except InvalidEntryError as exc:
        raise MalformedRowError(
            f"membership row {where} cannot be parsed: {exc}. Repair or delete it by hand; nothing was changed"
        ) from exc
