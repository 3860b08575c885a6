"""Mapping between ``MembershipEntry`` and a ``silo_membership`` row."""

from __future__ import annotations

import functools
import itertools
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any, cast

from membership_tables.codec import votes_from_json, votes_to_json
from membership_tables.errors import InvalidEntryError
from membership_tables.model import (
    MalformedRow,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)
from membership_tables.sql.schema import MEMBERSHIP_TABLE, time_from_db
from membership_tables.sql.statements import ROW_COLUMNS


def key_of(silo_address: SiloAddress) -> dict[str, Any]:
    """The primary-key columns of a silo, without the cluster id."""
    return {"address": silo_address.host, "port": silo_address.port, "generation": silo_address.generation}


_JSON = json.JSONEncoder(ensure_ascii=False)  # built once: json.dumps(..., **options) builds one per call
_JSON_SORTED = json.JSONEncoder(ensure_ascii=False, sort_keys=True)

_MAX_TEXT = 255
_MAX_INT = 2**31 - 1


def _check_fits(entry: MembershipEntry) -> None:
    """Refuse values the columns cannot hold, before any statement runs."""
    address = entry.silo_address
    texts = (
        ("host", address.host),
        ("silo_name", entry.silo_name),
        ("host_name", entry.host_name),
        ("role_name", entry.role_name),
    )
    for name, text in texts:
        if len(text) > _MAX_TEXT:
            raise InvalidEntryError(f"{name} is {len(text)} characters long; the SQL table holds at most {_MAX_TEXT}")
    for name, zone in (("update_zone", entry.update_zone), ("fault_zone", entry.fault_zone)):
        if zone > _MAX_INT:
            raise InvalidEntryError(f"{name} must be at most {_MAX_INT} in the SQL table, got {zone}")
    if address.generation >= 2**63:
        raise InvalidEntryError(f"generation must be below 2**63 in the SQL table, got {address.generation}")


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
        "suspect_times": _JSON.encode(votes_to_json(entry)) if entry.suspect_times else "[]",
        "properties": _properties_json(tuple(entry.properties.items())),
    }


@functools.lru_cache(maxsize=1024)
def _properties_json(items: tuple[tuple[str, str], ...]) -> str:
    """The ``properties`` column of a row with these properties, sorted by key.

    A silo's properties stay the same from one write of its row to the next, so the cache
    nearly always answers, in a third of the encoder's time (a conditional write on SQLite
    takes ~20 us in the driver; ``benchmarks.tables``).
    """
    return _JSON_SORTED.encode(dict(items))


def row_name(row: Mapping[Any, Any]) -> str:
    """How errors and ``MalformedRow.key`` name a row: the table and its key columns."""
    key = ", ".join(f"{name}={row.get(name)!r}" for name in ("cluster_id", "address", "port", "generation"))
    return f"{MEMBERSHIP_TABLE} row ({key})"


def _json(row: Mapping[Any, Any], column: str) -> Any:
    try:
        return json.loads(row[column])
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise InvalidEntryError(f"{column} is not valid JSON ({exc}): {row[column]!r}") from exc


def row_to_entry(row: Mapping[Any, Any]) -> MembershipEntry:
    """Parse a row; ``InvalidEntryError`` says what is wrong with it."""
    status = row["status"]
    if not isinstance(status, str) or status not in SiloStatus.__members__:
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


Row = tuple[Any, ...]
"""A ``silo_membership`` row as the driver returns it: the values of ``ROW_COLUMNS``."""
Parsed = tuple[MembershipEntry, str]
"""A row's entry and etag."""

_ETAG = ROW_COLUMNS.index("etag")
_ALIVE = len(ROW_COLUMNS) - 1
assert ROW_COLUMNS[_ALIVE] == "i_am_alive_time", "RowParser keys rows by every column but the last, the heartbeat"
_TIMES = tuple(index for index, name in enumerate(ROW_COLUMNS) if name in ("start_time", "i_am_alive_time"))
Known = tuple[Parsed, Any]
"""A parsed row and the heartbeat it was parsed with, as stored."""
RECENT_ROWS = 20_000
"""Rows parsed by reads of changes since the last full read that a parser keeps at most (a join
storm writes two per silo)."""


class _Read:
    """One full read: its version, the rows as fetched, their ``(entry, etag)`` in that order,
    the positions of those in address order, and the snapshot."""

    def __init__(self, version: TableVersion, rows: list[Row], parsed: list[Parsed], order: list[int] | None) -> None:
        self.version = version
        self.rows = rows
        self.parsed = parsed
        if order is None:
            order = sorted(range(len(parsed)), key=lambda i: parsed[i][0].silo_address.sort_key)
        self.order = order
        self.data = MembershipTableData.of_sorted(tuple(map(parsed.__getitem__, self.order)), version)
        self._by_key: dict[Row, Known] | None = None

    def known(self, key: Row) -> Known | None:
        """The parsed row whose stored values but the heartbeat are ``key``, if any."""
        if self._by_key is None:  # built on first use; threads that race build the same dict
            self._by_key = {old[:_ALIVE]: (pair, old[_ALIVE]) for old, pair in zip(self.rows, self.parsed, strict=True)}
        return self._by_key.get(key)


class RowParser:
    """Turns rows as the driver returns them (``ROW_COLUMNS``) into snapshots, reusing the last full read.

    Parsing and validating a row (JSON, times, the checks of ``MembershipEntry``) and sorting
    the rows cost more than fetching them, and between two reads of a table most rows are
    unchanged or only have a new heartbeat. So the latest full read is kept, and the next one
    compares its rows with it position by position (in C): a row equal to the one at the same
    position keeps its entry, one whose stored values but the heartbeat match a row read last
    time gets a copy with the new time (``MembershipEntry.with_i_am_alive_time``), any other
    row is parsed and validated in full, and if every position still holds the same silo the
    previous address order is reused instead of sorting. Rows parsed by reads of changes are
    kept until the next full read (``RECENT_ROWS`` at most), for the next read of changes and
    that full read: in a join storm every silo reads the same new rows, and the silos of one
    process (``benchmarks.silo_host``) share a handle, so each row is parsed once there. Rows
    are compared by all their stored values, so a row edited by hand is parsed afresh. A malformed row is left out of
    the snapshot's rows and reported in its ``malformed``; it is never kept, so it is parsed
    (and reported) again on every read until it is repaired or deleted. A handle's threads
    may share a parser: each full read replaces the kept one whole.
    """

    def __init__(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id
        self._last = _Read(TableVersion(0, ""), [], [], None)
        self._recent: dict[Row, Known] = {}
        """Rows parsed since the last full read, by stored values but the heartbeat."""

    def table_data(self, version: TableVersion, rows: Sequence[Row], *, full: bool) -> MembershipTableData:
        """The snapshot of ``rows`` at ``version``; ``full`` (every row of the cluster) is kept."""
        last = self._last
        if not full:
            return MembershipTableData.from_parsed((self._parse(row, last) for row in rows), version)
        rows = list(rows)
        if version == last.version and rows == last.rows:  # nothing changed: one comparison in C
            return last.data
        parsed: list[Parsed | MalformedRow] = list(last.parsed[: len(rows)])
        changed = list(itertools.compress(range(len(parsed)), map(operator.ne, rows, last.rows)))
        same_silos = len(rows) == len(last.rows)
        for position in changed:
            row, before = rows[position], last.rows[position]
            if row[:_ALIVE] == before[:_ALIVE]:  # the heartbeat alone moved
                parsed[position] = self._with_heartbeat(last.parsed[position], row)
            else:
                parsed[position] = self._parse(row, last)
            now = parsed[position]
            same_silos = (
                same_silos
                and not isinstance(now, MalformedRow)
                and now[0].silo_address == last.parsed[position][0].silo_address
            )
        parsed.extend(self._parse(row, last) for row in rows[len(parsed) :])
        if any(isinstance(pair, MalformedRow) for pair in parsed):
            good = [index for index, pair in enumerate(parsed) if not isinstance(pair, MalformedRow)]
            self._last = _Read(version, [rows[i] for i in good], [cast(Parsed, parsed[i]) for i in good], None)
            self._recent = {}
            return MembershipTableData.from_parsed(parsed, version)
        read = self._last = _Read(version, rows, cast(list[Parsed], parsed), last.order if same_silos else None)
        self._recent = {}  # the full read holds them now (a row parsed meanwhile is parsed again)
        return read.data

    def _parse(self, row: Row, last: _Read) -> Parsed | MalformedRow:
        key = row[:_ALIVE]
        known = last.known(key) or self._recent.get(key)
        if known is not None:
            pair, heartbeat = known
            return pair if row[_ALIVE] == heartbeat else self._with_heartbeat(pair, row)
        values = self._named(row)
        for index in _TIMES:
            values[ROW_COLUMNS[index]] = time_from_db(row[index])
        try:
            if not isinstance(row[_ETAG], str):
                raise InvalidEntryError(f"etag must be a str, got {row[_ETAG]!r}")
            parsed = row_to_entry(values), row[_ETAG]
        except InvalidEntryError as exc:
            return MalformedRow(row_name(values), str(exc))
        if len(self._recent) < RECENT_ROWS:
            self._recent[key] = (parsed, row[_ALIVE])
        return parsed

    def _with_heartbeat(self, known: Parsed, row: Row) -> Parsed | MalformedRow:
        """``known`` (parsed from a row equal to ``row`` but for the heartbeat) with ``row``'s heartbeat."""
        try:
            return known[0].with_i_am_alive_time(time_from_db(row[_ALIVE])), known[1]
        except InvalidEntryError as exc:
            return MalformedRow(row_name(self._named(row)), str(exc))

    def _named(self, row: Row) -> dict[str, Any]:
        return {"cluster_id": self._cluster_id, **dict(zip(ROW_COLUMNS, row, strict=True))}
