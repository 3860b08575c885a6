"""The membership protocol's invariants, checked on a recorded history of versioned writes.

Every silo run with ``--history-file`` wraps its table in a ``membership_tables.history.RecordingTable``;
``load_history`` merges the files, and ``check_history``/``assert_history_ok`` prove that the
whole run kept these invariants:

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
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator

from membership_tables import InvalidEntryError, MembershipEntry, SiloAddress, SiloStatus
from membership_tables.codec import entry_to_document, format_time
from membership_tables.history import HistoryRecord, describe_entry, in_version_order

__all__ = ["assert_history_ok", "check_history"]


def _replay_steps(
    ordered: Iterable[HistoryRecord],
) -> Iterator[tuple[HistoryRecord, MembershipEntry | None]]:
    """Each record (in the given order) with the row of its silo just before it."""
    rows: dict[SiloAddress, MembershipEntry] = {}
    for record in ordered:
        yield record, rows.get(record.silo)
        rows[record.silo] = record.entry


def _row_before(entry: MembershipEntry | None) -> str:
    return f"row before: {describe_entry(entry)}" if entry else "row before: none recorded"


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
    ordered = in_version_order(records)
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
                f"{_row_before(before)}; written: {describe_entry(entry)}"
            )
        if entry.status is not SiloStatus.DEAD:
            continue
        dead_at.setdefault(silo, record)
        if _is_self(record.writer, silo) or (successor_may_declare_dead and _is_successor(record.writer, silo)):
            continue
        voters = sorted({voter for voter, _ in entry.suspect_times})
        context = f"{_row_before(before)}; written: {describe_entry(entry)}"
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
