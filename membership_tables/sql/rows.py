"""Mapping between ``MembershipEntry`` and a ``silo_membership`` row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from membership_tables.codec import votes_from_json, votes_to_json
from membership_tables.errors import InvalidEntryError, MalformedRowError
from membership_tables.model import MembershipEntry, SiloAddress, SiloStatus, Vote
from membership_tables.sql.schema import MEMBERSHIP_TABLE, time_from_db
from membership_tables.sql.statements import ROW_COLUMNS


def key_of(silo_address: SiloAddress) -> dict[str, Any]:
    """The primary-key columns of a silo, without the cluster id."""
    return {"address": silo_address.host, "port": silo_address.port, "generation": silo_address.generation}


_MAX_TEXT = 255
_MAX_INT = 2**31 - 1


def _check_fits(entry: MembershipEntry) -> None:
    """Refuse values the columns cannot hold, before any statement runs."""
    texts = {"host": entry.silo_address.host, "silo_name": entry.silo_name, "host_name": entry.host_name}
    for name, text in {**texts, "role_name": entry.role_name}.items():
        if len(text) > _MAX_TEXT:
            raise InvalidEntryError(f"{name} is {len(text)} characters long; the SQL table holds at most {_MAX_TEXT}")
    for name in ("update_zone", "fault_zone"):
        if getattr(entry, name) > _MAX_INT:
            raise InvalidEntryError(f"{name} must be at most {_MAX_INT} in the SQL table, got {getattr(entry, name)}")
    if entry.silo_address.generation >= 2**63:
        raise InvalidEntryError(f"generation must be below 2**63 in the SQL table, got {entry.silo_address.generation}")


def entry_to_values(entry: MembershipEntry) -> dict[str, Any]:
    """Every column of ``entry``'s row except the key (``cluster_id`` and ``key_of``) and ``etag``."""
    _check_fits(entry)
    return {
        "silo_name": entry.silo_name,
        "host_name": entry.host_name,
        "status": entry.status.name,
        "proxy_port": entry.proxy_port,
        "role_name": entry.role_name,
        "update_zone": entry.update_zone,
        "fault_zone": entry.fault_zone,
        "start_time": entry.start_time,
        "i_am_alive_time": entry.i_am_alive_time,
        "suspect_times": json.dumps(votes_to_json(entry), ensure_ascii=False),
        "properties": json.dumps(dict(entry.properties), ensure_ascii=False, sort_keys=True),
    }


def _row_name(row: Mapping[Any, Any]) -> str:
    key = ", ".join(f"{name}={row.get(name)!r}" for name in ("cluster_id", "address", "port", "generation"))
    return f"{MEMBERSHIP_TABLE} row ({key})"


def _json(row: Mapping[Any, Any], column: str) -> Any:
    try:
        return json.loads(row[column])
    except (TypeError, ValueError) as exc:
        raise InvalidEntryError(f"{column} is not valid JSON ({exc}): {row[column]!r}") from exc


def parse_votes(row: Mapping[Any, Any]) -> tuple[Vote, ...]:
    """The suspicion votes of a row; ``MalformedRowError`` if they cannot be parsed."""
    try:
        return votes_from_json(_json(row, "suspect_times"))
    except InvalidEntryError as exc:
        raise _malformed(row, exc) from exc


def _malformed(row: Mapping[Any, Any], exc: Exception) -> MalformedRowError:
    return MalformedRowError(
        f"{_row_name(row)} cannot be parsed: {exc}. Repair or delete it by hand; nothing was changed"
    )


def row_to_entry(row: Mapping[Any, Any]) -> MembershipEntry:
    """Parse a row; ``MalformedRowError`` names the row and what is wrong with it."""
    try:
        status = row["status"]
        if status not in SiloStatus.__members__:
            raise InvalidEntryError(f"unknown status {status!r}")
        return MembershipEntry(
            silo_address=SiloAddress(row["address"], row["port"], row["generation"]),
            status=SiloStatus[status],
            silo_name=row["silo_name"],
            host_name=row["host_name"],
            role_name=row["role_name"],
            proxy_port=row["proxy_port"],
            update_zone=row["update_zone"],
            fault_zone=row["fault_zone"],
            start_time=row["start_time"],
            i_am_alive_time=row["i_am_alive_time"],
            suspect_times=votes_from_json(_json(row, "suspect_times")),
            properties=_json(row, "properties"),
        )
    except InvalidEntryError as exc:
        raise _malformed(row, exc) from exc


_ETAG = ROW_COLUMNS.index("etag")
_ALIVE = len(ROW_COLUMNS) - 1
assert ROW_COLUMNS[_ALIVE] == "i_am_alive_time", "RowParser keys rows by every column but the last, the heartbeat"
_TIMES = tuple(index for index, name in enumerate(ROW_COLUMNS) if name in ("start_time", "i_am_alive_time"))


class RowParser:
    """Parses rows as the driver returns them (``ROW_COLUMNS``), remembering the last full read.

    Parsing and validating a row (JSON, times, the checks of ``MembershipEntry``) costs far
    more than fetching it, and between two reads of a table most rows are unchanged or only
    have a new heartbeat. So each row of the latest ``parse(..., remember=True)`` is kept,
    keyed by all its values but the heartbeat: a row read again with the same values gives
    back the same (immutable) entry, one whose heartbeat alone moved gets a copy with the new
    time (``MembershipEntry.with_i_am_alive_time``), and anything else is parsed in full. It
    is a cache of a pure function of the stored values, so a row edited by hand is parsed
    afresh, and a malformed row, never cached, is reported on every read. It holds at most
    the rows of one read; a handle's threads may share it.
    """

    def __init__(self, dialect: str) -> None:
        self._dialect = dialect
        self._known: dict[tuple[Any, ...], tuple[MembershipEntry, Any]] = {}

    def parse(self, rows: list[tuple[Any, ...]], *, remember: bool) -> tuple[tuple[MembershipEntry, str], ...]:
        """``(entry, etag)`` of each row; ``remember`` (a read of the whole cluster) keeps them."""
        known = self._known
        kept: dict[tuple[Any, ...], tuple[MembershipEntry, Any]] = {}
        parsed = []
        for row in rows:
            key = row[:_ALIVE]
            alive = row[_ALIVE]
            hit = known.get(key)
            if hit is None:
                entry = self._parse(row)
            elif hit[1] == alive:
                entry = hit[0]
            else:
                entry = self._with_heartbeat(hit[0], row)
            parsed.append((entry, row[_ETAG]))
            if remember:
                kept[key] = (entry, alive)
        if remember:
            self._known = kept
        return tuple(parsed)

    def _parse(self, row: tuple[Any, ...]) -> MembershipEntry:
        values = dict(zip(ROW_COLUMNS, row, strict=True))
        for index in _TIMES:
            values[ROW_COLUMNS[index]] = time_from_db(row[index])
        return row_to_entry(values)

    def _with_heartbeat(self, entry: MembershipEntry, row: tuple[Any, ...]) -> MembershipEntry:
        try:
            return entry.with_i_am_alive_time(time_from_db(row[_ALIVE]))
        except InvalidEntryError as exc:
            raise _malformed(dict(zip(ROW_COLUMNS, row, strict=True)), exc) from exc
