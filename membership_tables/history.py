"""A record of every versioned membership write, to check the protocol's invariants on afterwards.

Multi-process and chaos tests cannot prove much by looking at the final table: a silo
wrongly declared Dead and a silo that came back from Dead both leave plausible rows.
Instead, every silo wraps its table in a ``RecordingTable``, which appends one
``HistoryRecord`` per row of each *successful* ``insert_row``/``update_row``/``update_rows``
(the table version the write set, who wrote it, and the row it wrote) to a ``HistorySink``, typically one
``JsonLinesSink`` file per writer process. After the run, ``load_history`` merges the
files into one list ordered by version, on which ``silo.membership.history_check`` checks the
membership protocol's invariants (the rules of quorum and voters belong to the protocol, not to
the tables).

Only versioned writes are history. Heartbeats (``update_i_am_alive``), cleanup and
deletes change no version, are not recorded, and ``replay`` does not reflect them.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self, get_args

from membership_tables.codec import entry_from_document, entry_to_document, format_time, parse_time
from membership_tables.contract import MembershipTable, RowUpdate
from membership_tables.errors import InvalidEntryError, MalformedRowError, MembershipTableError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    SiloAddress,
    TableVersion,
    ensure_utc,
)
from membership_tables.wrapped import WrappedTable

__all__ = [
    "HistoryRecord",
    "HistorySink",
    "JsonLinesSink",
    "ListSink",
    "MalformedHistoryError",
    "Operation",
    "RecordingTable",
    "describe_entry",
    "in_version_order",
    "load_history",
    "record_from_json",
    "record_to_json",
    "replay",
]

logger = logging.getLogger(__name__)

Operation = Literal["insert", "update", "update_rows"]
"""The versioned write a record stands for."""

StrPath = str | os.PathLike[str]


class MalformedHistoryError(MembershipTableError, ValueError):
    """A history line cannot be parsed; the message names the file and line."""


# --- the record --------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRecord:
    """One successful versioned write: the version it set, who wrote what, and when."""

    version: int
    """The table version the write produced (``TableVersion.version`` passed to the write)."""
    writer: str
    """Who wrote it, normally ``str(silo_address)`` of the writing silo."""
    operation: Operation
    entry: MembershipEntry
    """The row as written. The store may keep a newer IAmAlive time (heartbeats are not history)."""
    etag: str
    """The row's new etag if known, else ``""`` (``RecordingTable`` does not know it)."""
    recorded_at: datetime
    """UTC wall time of the write (``RecordingTable``: just before it was issued)."""
    batch: str = ""
    """For ``update_rows``: an id shared by the records of that one write (one per row), else ``""``."""

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise InvalidEntryError(f"history version must be a non-negative int, got {self.version!r}")
        if not isinstance(self.writer, str) or not self.writer:
            raise InvalidEntryError(f"history writer must be a non-empty str, got {self.writer!r}")
        if self.operation not in get_args(Operation):
            raise InvalidEntryError(
                f"history operation must be 'insert', 'update' or 'update_rows', got {self.operation!r}"
            )
        if not isinstance(self.batch, str) or bool(self.batch) != (self.operation == "update_rows"):
            raise InvalidEntryError(
                f"history batch must be a non-empty str for 'update_rows' and '' otherwise, got {self.batch!r} "
                f"for {self.operation!r}"
            )
        if not isinstance(self.entry, MembershipEntry):
            raise InvalidEntryError(f"history entry must be a MembershipEntry, got {self.entry!r}")
        if not isinstance(self.etag, str):
            raise InvalidEntryError(f"history etag must be a str, got {self.etag!r}")
        object.__setattr__(self, "recorded_at", ensure_utc(self.recorded_at, "recorded_at"))

    @property
    def silo(self) -> SiloAddress:
        """The silo whose row was written."""
        return self.entry.silo_address

    def describe(self) -> str:
        """One line for people: ``v7 update by A at T: B DEAD, votes: ...``."""
        return (
            f"v{self.version} {self.operation} by {self.writer} at {format_time(self.recorded_at)}: "
            f"{describe_entry(self.entry)}"
        )


def record_to_json(record: HistoryRecord) -> str:
    """The record as one line of compact JSON (no newline); the row uses the codec's document."""
    document: dict[str, Any] = {
        "version": record.version,
        "writer": record.writer,
        "operation": record.operation,
        "etag": record.etag,
        "recorded_at": format_time(record.recorded_at),
        "entry": entry_to_document(record.entry),
    }
    if record.batch:
        document["batch"] = record.batch
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def record_from_json(text: str | bytes, where: str = "history line") -> HistoryRecord:
    """Parse a line written by ``record_to_json``; ``where`` names it in errors."""
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedHistoryError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise MalformedHistoryError(f"{where}: expected a JSON object, got {type(document).__name__}")
    # HistoryRecord validates the plain fields, the codec the row.
    version: Any = document.get("version")
    writer: Any = document.get("writer")
    operation: Any = document.get("operation")
    try:
        return HistoryRecord(
            version=version,
            writer=writer,
            operation=operation,
            entry=entry_from_document(document.get("entry"), where),
            etag=document.get("etag", ""),
            recorded_at=parse_time(document.get("recorded_at"), "recorded_at"),
            batch=document.get("batch", ""),
        )
    except MalformedRowError as exc:  # the codec's wording is about rows in a store; keep its cause
        raise MalformedHistoryError(f"{where}: its entry cannot be parsed: {exc.__cause__ or exc}") from exc
    except InvalidEntryError as exc:
        raise MalformedHistoryError(f"{where} is not a history record: {exc}") from exc


# --- sinks -------------------------------------------------------------------------


class HistorySink(Protocol):
    """Where a ``RecordingTable`` puts its records; must be safe to call from several threads."""

    def append(self, record: HistoryRecord) -> None: ...


class ListSink:
    """Keeps records in memory (``records``), for in-process tests."""

    def __init__(self) -> None:
        self.records: list[HistoryRecord] = []
        self._lock = threading.Lock()

    def append(self, record: HistoryRecord) -> None:
        with self._lock:
            self.records.append(record)


class JsonLinesSink:
    """Appends one JSON line per record to ``path`` and flushes it at once.

    Meant as one file per writer process (e.g. ``history/<silo>.jsonl``): a killed
    process loses at most the line it was writing. Opening appends to an existing file;
    if that file ends in a partial line (its previous writer was killed mid-write), the
    fragment is cut off first so the new lines stay parseable. Thread-safe.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_partial_last_line(self.path)
        self._file = self.path.open("ab")
        self._lock = threading.Lock()

    def append(self, record: HistoryRecord) -> None:
        line = record_to_json(record).encode() + b"\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _drop_partial_last_line(path: Path) -> None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if not data or data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    logger.warning("history file %s ends in a partial line (%d bytes); cutting it off", path, len(data) - keep)
    with path.open("r+b") as file:
        file.truncate(keep)


def load_history(paths_or_dir: StrPath | Iterable[StrPath]) -> list[HistoryRecord]:
    """Read history files, sorted by version (ties by time, then writer).

    Takes a directory (every ``*.jsonl`` file directly in it), a file, or several of
    either. The last line of a file may be cut short (its writer was killed mid-write)
    and is then skipped; any other unparseable line raises ``MalformedHistoryError``.
    """
    sources = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        files.extend(sorted(path.glob("*.jsonl")) if path.is_dir() else [path])
    records: list[HistoryRecord] = []
    for path in files:
        records.extend(_read_file(path))
    return in_version_order(records)


def _read_file(path: Path) -> Iterator[HistoryRecord]:
    data = path.read_bytes()
    lines = data.split(b"\n")
    # A file written completely ends in "\n", so its last split piece is empty; a
    # non-empty last piece is a line whose writer died before finishing it.
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            yield record_from_json(line, where)
        except MalformedHistoryError:
            if number == len(lines):
                logger.warning("skipping the truncated last line of %s (%d bytes)", path, len(line))
                continue
            raise


# --- the decorator -----------------------------------------------------------------


class RecordingTable(WrappedTable):
    """A ``MembershipTable`` that records its successful versioned writes.

    Every call goes to ``inner`` unchanged, and nothing else touches the store: after an
    ``insert_row``/``update_row`` that returns ``True`` (or an ``insert_row_with_etags`` or
    ``insert_row_at_next_version`` that returns a ``CommittedWrite``) it appends one record
    to ``sink``, after an ``update_rows`` or ``update_rows_with_etags`` that succeeds one per
    row (sharing a batch id). Writes
    that lose (``False``, ``None``) or raise (their outcome is unknown) are not recorded, nor are
    heartbeats, cleanup and deletes, which change no version. If the sink raises, the error
    propagates although the write happened. ``close()`` closes ``inner`` but not the sink,
    which may be shared.
    """

    def __init__(self, inner: MembershipTable, writer: str, sink: HistorySink) -> None:
        super().__init__(inner)
        self.writer = writer
        self.sink = sink

    def _record(self, operation: Operation, entry: MembershipEntry, version: TableVersion, at: datetime) -> None:
        self.sink.append(HistoryRecord(version.version, self.writer, operation, entry, "", at))

    def initialize(self, try_init_version: bool = True) -> None:
        self.inner.initialize(try_init_version)

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        # Timestamped before the call: a writer's later write can only start after its
        # earlier one committed, so per-writer times order like versions even when
        # several threads share this handle.
        issued = datetime.now(UTC)
        written = self.inner.insert_row(entry, version)
        if written:
            self._record("insert", entry, version, issued)
        return written

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        issued = datetime.now(UTC)
        written = self.inner.insert_row_with_etags(entry, version)
        if written is not None:
            self._record("insert", entry, version, issued)
        return written

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        issued = datetime.now(UTC)
        written = self.inner.insert_row_at_next_version(entry)
        if written is not None:
            self._record("insert", entry, written.version, issued)
        return written

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        issued = datetime.now(UTC)
        written = self.inner.update_row_at_next_version(entry, etag)
        if written is not None:
            self._record("update", entry, written.version, issued)
        return written

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        issued = datetime.now(UTC)
        written = self.inner.update_row(entry, etag, version)
        if written:
            self._record("update", entry, version, issued)
        return written

    def update_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> bool:
        issued = datetime.now(UTC)
        written = self.inner.update_rows(updates, version)
        if written:
            self._record_batch(updates, version, issued)
        return written

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        issued = datetime.now(UTC)
        written = self.inner.update_rows_with_etags(updates, version)
        if written is not None:
            self._record_batch(updates, version, issued)
        return written

    def _record_batch(self, updates: Sequence[RowUpdate], version: TableVersion, at: datetime) -> None:
        batch = uuid.uuid4().hex
        for entry, _ in updates:
            self.sink.append(HistoryRecord(version.version, self.writer, "update_rows", entry, "", at, batch))

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self.inner.update_i_am_alive(silo_address, when)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        return self.inner.cleanup_defunct_entries(before)

    def delete_cluster_entries(self) -> None:
        self.inner.delete_cluster_entries()


# --- replay ------------------------------------------------------------------------


def in_version_order(records: Iterable[HistoryRecord]) -> list[HistoryRecord]:
    """``records`` sorted by version (then by when and by whom they were recorded)."""
    return sorted(records, key=lambda record: (record.version, record.recorded_at, record.writer))


def replay(records: Iterable[HistoryRecord]) -> dict[SiloAddress, MembershipEntry]:
    """The rows as the recorded writes left them, applied in version order.

    Rows removed by cleanup or deletes are still there (those are not history), and the
    IAmAlive times are those written, not later heartbeats.
    """
    return {record.silo: record.entry for record in in_version_order(records)}


def describe_entry(entry: MembershipEntry | None) -> str:
    """One line for a row: its silo, status and votes."""
    if entry is None:
        return "no row"
    votes = ", ".join(f"{voter} at {format_time(when)}" for voter, when in entry.suspect_times)
    return f"{entry.silo_address} {entry.status.name}, " + (f"votes: {votes}" if votes else "no votes")
