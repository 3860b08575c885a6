"""A record of every versioned membership write, and a checker for the protocol's invariants.

Multi-process and chaos tests cannot prove much by looking at the final table: a silo
wrongly declared Dead and a silo that came back from Dead both leave plausible rows.
Instead, every silo wraps its table in a ``RecordingTable``, which appends one
``HistoryRecord`` per row of each *successful* ``insert_row``/``update_row``/``update_rows``
(the table version the write set, who wrote it, and the row it wrote) to a ``HistorySink``, typically one
``JsonLinesSink`` file per writer process. After the run, ``load_history`` merges the
files into one list ordered by version, and ``check_history``/``assert_history_ok``
prove that the whole run kept these invariants:

(a) **One winner per version**, and no gaps. The version row is the table's
    optimistic-concurrency token: if two writers both won version ``v`` the store let a
    stale write through and the total order of membership changes is broken. One
    ``update_rows`` is one write that changes several rows: its records share a ``batch``
    id, name each silo once and carry one version. With
    ``require_contiguous`` the versions must also form a gap-free run, which proves that
    every versioned write of the run was recorded (a gap is a write by someone who did
    not record, a record lost with a killed process, or a write whose outcome the writer
    never learned because the store failed).
(b) **Dead is terminal.** Once a silo's row is written Dead, no later write touches that
    row: a Dead silo never comes back, and nobody resurrects or rewrites it (a restart is
    a new generation, hence a new row).
(c) **Death needs a quorum.** A row written Dead by anyone but the silo itself carries at
    least ``min_voters`` distinct suspicion voters, and the writer is one of them. This
    protects healthy silos from a single confused (e.g. partitioned) prober. A silo
    writing itself Dead (graceful shutdown, abandoned join) needs no votes; neither,
    by default, does a newer generation of the same endpoint declaring its crashed
    predecessor Dead when it joins (the endpoint being reused proves the old process is
    gone; ``successor_may_declare_dead=False`` checks those too).
(d) **Protected silos survive.** No silo in ``protected`` (the majority side of a
    partition, or every silo the test never faulted) is written Dead by another silo:
    this is the "no false deaths" property that quorum and vote expiry exist for.
(e) **Each writer moves forward.** A writer's successful writes, in the order it issued
    them, set increasing versions: the table never appeared to go backwards to it.

Only versioned writes are history. Heartbeats (``update_i_am_alive``), cleanup and
deletes change no version, are not recorded, and ``replay`` does not reflect them.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
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
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    ensure_utc,
)

__all__ = [
    "HistoryRecord",
    "HistorySink",
    "JsonLinesSink",
    "ListSink",
    "MalformedHistoryError",
    "Operation",
    "RecordingTable",
    "assert_history_ok",
    "check_history",
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
            f"{_describe_entry(self.entry)}"
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
    return _in_version_order(records)


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


class RecordingTable(MembershipTable):
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
        super().__init__(inner.cluster_id)
        self.inner = inner
        self.writer = writer
        self.sink = sink
        self.max_rows_per_update = inner.max_rows_per_update

    def _record(self, operation: Operation, entry: MembershipEntry, version: TableVersion, at: datetime) -> None:
        self.sink.append(HistoryRecord(version.version, self.writer, operation, entry, "", at))

    def initialize(self, try_init_version: bool = True) -> None:
        self.inner.initialize(try_init_version)

    def read_all(self) -> MembershipTableData:
        return self.inner.read_all()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self.inner.read_row(silo_address)

    def read_version(self) -> TableVersion:
        return self.inner.read_version()

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

    def close(self) -> None:
        self.inner.close()


# --- replay and checks ---------------------------------------------------------------


def _in_version_order(records: Iterable[HistoryRecord]) -> list[HistoryRecord]:
    return sorted(records, key=lambda record: (record.version, record.recorded_at, record.writer))


def _replay_steps(
    ordered: Iterable[HistoryRecord],
) -> Iterator[tuple[HistoryRecord, MembershipEntry | None]]:
    """Each record (in the given order) with the row of its silo just before it."""
    rows: dict[SiloAddress, MembershipEntry] = {}
    for record in ordered:
        yield record, rows.get(record.silo)
        rows[record.silo] = record.entry


def replay(records: Iterable[HistoryRecord]) -> dict[SiloAddress, MembershipEntry]:
    """The rows as the recorded writes left them, applied in version order.

    Rows removed by cleanup or deletes are still there (those are not history), and the
    IAmAlive times are those written, not later heartbeats.
    """
    return {record.silo: record.entry for record in _in_version_order(records)}


def _describe_entry(entry: MembershipEntry | None) -> str:
    if entry is None:
        return "no row"
    votes = ", ".join(f"{voter} at {format_time(when)}" for voter, when in entry.suspect_times)
    return f"{entry.silo_address} {entry.status.name}, " + (f"votes: {votes}" if votes else "no votes")


def _row_before(entry: MembershipEntry | None) -> str:
    return f"row before: {_describe_entry(entry)}" if entry else "row before: none recorded"


def _changed_fields(before: MembershipEntry, after: MembershipEntry) -> str:
    old, new = entry_to_document(before), entry_to_document(after)
    changed = [key for key in new if old.get(key) != new[key]]
    return f"changed {', '.join(changed)}" if changed else "rewrote it unchanged"


def _writer_address(writer: str) -> SiloAddress | None:
    try:
        return SiloAddress.parse(writer)
    except InvalidEntryError:
        return None


def _is_self(writer: str, silo: SiloAddress) -> bool:
    address = _writer_address(writer)
    return address == silo if address is not None else writer == str(silo)


def _is_successor(writer: str, silo: SiloAddress) -> bool:
    address = _writer_address(writer)
    return address is not None and silo.is_predecessor_of(address)


def _is_voter(writer: str, entry: MembershipEntry) -> bool:
    address = _writer_address(writer)
    voters = {voter for voter, _ in entry.suspect_times}
    return address in voters if address is not None else writer in {str(voter) for voter in voters}


def _writes(records: Iterable[HistoryRecord]) -> list[list[HistoryRecord]]:
    """The records grouped into writes: one ``update_rows`` (one batch) is one write, any other record one."""
    writes: list[list[HistoryRecord]] = []
    batches: dict[str, list[HistoryRecord]] = {}
    for record in records:
        if not record.batch:
            writes.append([record])
        elif record.batch in batches:
            batches[record.batch].append(record)
        else:
            batches[record.batch] = [record]
            writes.append(batches[record.batch])
    return writes


def _batch_violations(ordered: list[HistoryRecord]) -> list[str]:
    violations: list[str] = []
    for write in _writes(ordered):
        versions = sorted({record.version for record in write})
        silos = [record.silo for record in write]
        if len(versions) > 1 or len(set(silos)) < len(silos):
            listed = "; ".join(record.describe() for record in write)
            violations.append(
                f"(a) one update_rows is one write: batch {write[0].batch} by {write[0].writer} must carry one "
                f"version and name each silo once, it carries versions {versions} and silos "
                f"{', '.join(map(str, silos))}: {listed}"
            )
    return violations


def _version_violations(ordered: list[HistoryRecord], require_contiguous: bool) -> list[str]:
    violations = _batch_violations(ordered)
    by_version: dict[int, list[list[HistoryRecord]]] = defaultdict(list)
    for write in _writes(ordered):
        by_version[write[0].version].append(write)
    for version, winners in by_version.items():
        if len(winners) > 1:
            listed = "; ".join(record.describe() for write in winners for record in write)
            violations.append(f"(a) one winner per version: version {version} was won {len(winners)} times: {listed}")
    if require_contiguous:
        versions = sorted(by_version)
        for lower, upper in itertools.pairwise(versions):
            if upper > lower + 1:
                missing = f"version {lower + 1}" if upper == lower + 2 else f"versions {lower + 1}..{upper - 1}"
                violations.append(
                    f"(a) no gaps: {missing} missing between v{lower} and v{upper} "
                    "(a write nobody recorded, a record lost with a killed process, or a write of unknown outcome)"
                )
    return violations


def _writer_order_violations(records: list[HistoryRecord]) -> list[str]:
    violations: list[str] = []
    by_writer: dict[str, list[HistoryRecord]] = defaultdict(list)
    for write in _writes(records):
        by_writer[write[0].writer].append(write[0])  # one update_rows is one write: its first row stands for it
    for writer, own in sorted(by_writer.items()):
        own.sort(key=lambda record: (record.recorded_at, record.version))
        for earlier, later in itertools.pairwise(own):
            if later.version <= earlier.version:
                violations.append(
                    f"(e) each writer moves forward: {writer} wrote v{later.version} at "
                    f"{format_time(later.recorded_at)}, after v{earlier.version} at "
                    f"{format_time(earlier.recorded_at)}: {later.describe()}"
                )
    return violations


def check_history(
    records: Iterable[HistoryRecord],
    *,
    min_voters: int,
    protected: Collection[SiloAddress] = (),
    require_contiguous: bool = True,
    successor_may_declare_dead: bool = True,
) -> list[str]:
    """Every violation of the invariants (see the module docstring), for people; empty = ok.

    ``min_voters`` is the smallest death quorum the run could legitimately use. Records
    may come in any order (e.g. several ``load_history`` results concatenated); they are
    checked in version order, and messages show the replayed row before the write.
    """
    if isinstance(min_voters, bool) or not isinstance(min_voters, int) or min_voters < 0:
        raise ValueError(f"min_voters must be a non-negative int, got {min_voters!r}")
    ordered = _in_version_order(records)
    protected = frozenset(protected)
    violations = _version_violations(ordered, require_contiguous)
    dead_at: dict[SiloAddress, HistoryRecord] = {}
    for record, before in _replay_steps(ordered):
        entry, silo = record.entry, record.silo
        killed = dead_at.get(silo)
        if killed is not None and record.version > killed.version:
            change = _changed_fields(before, entry) if before is not None else "re-created it"
            violations.append(
                f"(b) Dead is terminal: {record.writer} wrote {silo} at v{record.version} ({change}) "
                f"after it was written Dead at v{killed.version} by {killed.writer}; "
                f"{_row_before(before)}; written: {_describe_entry(entry)}"
            )
        if entry.status is not SiloStatus.DEAD:
            continue
        dead_at.setdefault(silo, record)
        if _is_self(record.writer, silo) or (successor_may_declare_dead and _is_successor(record.writer, silo)):
            continue
        voters = sorted({voter for voter, _ in entry.suspect_times})
        context = f"{_row_before(before)}; written: {_describe_entry(entry)}"
        if len(voters) < min_voters:
            violations.append(
                f"(c) death needs a quorum: {record.writer} declared {silo} Dead at v{record.version} with "
                f"{len(voters)} distinct voter(s) ({', '.join(map(str, voters)) or 'none'}), "
                f"fewer than {min_voters}; {context}"
            )
        if not _is_voter(record.writer, entry):
            violations.append(
                f"(c) death needs a quorum: {record.writer} declared {silo} Dead at v{record.version} "
                f"without being one of its voters; {context}"
            )
        if silo in protected:
            violations.append(
                f"(d) protected silos survive: {record.writer} declared protected silo {silo} Dead "
                f"at v{record.version}; {context}"
            )
    violations.extend(_writer_order_violations(ordered))
    return violations


def assert_history_ok(
    records: Iterable[HistoryRecord],
    *,
    min_voters: int,
    protected: Collection[SiloAddress] = (),
    require_contiguous: bool = True,
    successor_may_declare_dead: bool = True,
) -> None:
    """Raise ``AssertionError`` listing every violation ``check_history`` finds."""
    violations = check_history(
        records,
        min_voters=min_voters,
        protected=protected,
        require_contiguous=require_contiguous,
        successor_may_declare_dead=successor_may_declare_dead,
    )
    if violations:
        listed = "\n".join(f"  - {violation}" for violation in violations)
        raise AssertionError(f"{len(violations)} membership history violation(s):\n{listed}")
