from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from membership_tables.history import (
    HistoryRecord,
    JsonLinesSink,
    ListSink,
    MalformedHistoryError,
    Operation,
    RecordingTable,
    load_history,
    record_from_json,
    record_to_json,
    replay,
)
from membership_tables.memory import InMemoryMembershipTable
from silo.membership.history_check import assert_history_ok, check_history

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
A = SiloAddress("10.0.0.1", 11111, 1)
B = SiloAddress("10.0.0.2", 11111, 1)
C = SiloAddress("10.0.0.3", 11111, 1)
D = SiloAddress("10.0.0.4", 11111, 1)
A2 = SiloAddress("10.0.0.1", 11111, 2)
"""A restart of A: same endpoint, newer generation."""


def row(
    silo: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, voters: Sequence[SiloAddress] = ()
) -> MembershipEntry:
    return MembershipEntry(
        silo_address=silo,
        status=status,
        start_time=T0,
        i_am_alive_time=T0,
        silo_name=f"silo-{silo.host}",
        suspect_times=tuple((voter, T0 + timedelta(seconds=i)) for i, voter in enumerate(voters)),
    )


def rec(
    version: int,
    writer: SiloAddress | str,
    entry: MembershipEntry,
    operation: Operation = "update",
    at: float | None = None,
) -> HistoryRecord:
    """A record; ``at`` is seconds after T0 (default: the version, so time follows versions)."""
    when = T0 + timedelta(seconds=version if at is None else at)
    return HistoryRecord(version, str(writer), operation, entry, "", when)


def cluster_forms() -> list[HistoryRecord]:
    """v1-v6: A, B and C join (insert Joining) and become Active, each writing its own row."""
    joins = [rec(i + 1, silo, row(silo, SiloStatus.JOINING), "insert") for i, silo in enumerate((A, B, C))]
    return [*joins, *(rec(i + 4, silo, row(silo)) for i, silo in enumerate((A, B, C)))]


def c_killed_by_a_and_b() -> list[HistoryRecord]:
    """v7: A suspects C; v8: B adds its vote and declares C Dead (the killer votes last)."""
    return [rec(7, A, row(C, voters=[A])), rec(8, B, row(C, SiloStatus.DEAD, voters=[A, B]))]


HEALTHY = [*cluster_forms(), *c_killed_by_a_and_b()]


def check(records: Sequence[HistoryRecord], **options: Any) -> list[str]:
    return check_history(records, **{"min_voters": 2, **options})


# --- check_history: one table per invariant -----------------------------------------


@pytest.mark.parametrize(
    ("records", "options", "expected"),
    [
        pytest.param([], {}, [], id="empty history"),
        pytest.param(cluster_forms(), {}, [], id="silos join and become active"),
        pytest.param(HEALTHY, {}, [], id="death by quorum"),
        pytest.param(HEALTHY, {"protected": {A, B}}, [], id="the killers are protected, the victim is not"),
        pytest.param(list(reversed(HEALTHY)), {}, [], id="records in any order"),
        pytest.param([rec(40 + r.version, r.writer, r.entry) for r in HEALTHY], {}, [], id="recording starts late"),
        pytest.param(
            [*cluster_forms(), rec(7, A, row(A, SiloStatus.SHUTTING_DOWN)), rec(8, A, row(A, SiloStatus.DEAD))],
            {"protected": {A}, "min_voters": 5},
            [],
            id="graceful shutdown needs no votes",
        ),
        pytest.param(
            [*cluster_forms(), rec(7, A2, row(A, SiloStatus.DEAD)), rec(8, A2, row(A2, SiloStatus.JOINING), "insert")],
            {},
            [],
            id="a restart declares its predecessor dead",
        ),
        pytest.param(
            [*cluster_forms(), rec(7, A2, row(A, SiloStatus.DEAD))],
            {"successor_may_declare_dead": False, "protected": {A}},
            ["(c) death needs a quorum: 10.0.0.1:11111@2 declared 10.0.0.1:11111@1 Dead at v7 with 0", "(c)", "(d)"],
            id="predecessor kill checked when asked",
        ),
    ],
)
def test_valid_histories_and_exemptions(
    records: list[HistoryRecord], options: dict[str, Any], expected: list[str]
) -> None:
    assert_fragments(check(records, **options), expected)


@pytest.mark.parametrize(
    ("records", "options", "expected"),
    [
        pytest.param(
            [*cluster_forms(), rec(7, A, row(C, voters=[A])), rec(7, B, row(C, voters=[B]))],
            {},
            ["(a) one winner per version: version 7 was won 2 times: v7 update by 10.0.0.1:11111@1"],
            id="two writers win one version",
        ),
        pytest.param(
            [*cluster_forms(), rec(7, A, row(C, voters=[A]), at=7), rec(7, A, row(C, voters=[A]), at=8)],
            {},
            ["(a) one winner per version: version 7 was won 2 times", "(e) each writer moves forward"],
            id="one writer wins one version twice",
        ),
        pytest.param(
            [r for r in HEALTHY if r.version != 5],
            {},
            ["(a) no gaps: version 5 missing between v4 and v6"],
            id="one version missing",
        ),
        pytest.param(
            [r for r in HEALTHY if r.version not in (3, 4, 5)],
            {},
            ["(a) no gaps: versions 3..5 missing between v2 and v6"],
            id="a run of versions missing",
        ),
        pytest.param(
            [r for r in HEALTHY if r.version not in (3, 5)],
            {},
            ["version 3 missing between v2 and v4", "version 5 missing between v4 and v6"],
            id="every gap reported",
        ),
        pytest.param(
            [r for r in HEALTHY if r.version != 5], {"require_contiguous": False}, [], id="gaps allowed when asked"
        ),
    ],
)
def test_a_one_winner_per_version_and_no_gaps(
    records: list[HistoryRecord], options: dict[str, Any], expected: list[str]
) -> None:
    assert_fragments(check(records, **options), expected)


@pytest.mark.parametrize(
    ("later", "expected"),
    [
        pytest.param(
            rec(9, C, row(C)),
            [
                "(b) Dead is terminal: 10.0.0.3:11111@1 wrote 10.0.0.3:11111@1 at v9 (changed status, suspect_times) "
                "after it was written Dead at v8 by 10.0.0.2:11111@1; row before: 10.0.0.3:11111@1 DEAD, votes: "
                "10.0.0.1:11111@1 at 2026-01-02T03:04:05.000000+00:00, 10.0.0.2:11111@1 at"
            ],
            id="the dead silo comes back",
        ),
        pytest.param(
            rec(9, A, row(C, SiloStatus.DEAD, voters=[A, B])),
            ["(b) Dead is terminal: 10.0.0.1:11111@1 wrote 10.0.0.3:11111@1 at v9 (rewrote it unchanged)"],
            id="the dead row rewritten unchanged",
        ),
        pytest.param(
            rec(9, A, row(C, SiloStatus.DEAD, voters=[A, B, D])),
            ["(b) Dead is terminal: 10.0.0.1:11111@1 wrote 10.0.0.3:11111@1 at v9 (changed suspect_times)"],
            id="votes added to a dead row",
        ),
        pytest.param(
            rec(9, C, row(C, SiloStatus.JOINING), "insert"),
            ["(b) Dead is terminal: 10.0.0.3:11111@1 wrote 10.0.0.3:11111@1 at v9 (changed status, suspect_times)"],
            id="the dead row re-inserted after cleanup",
        ),
        pytest.param(rec(9, A, row(D, SiloStatus.JOINING), "insert"), [], id="other rows may still change"),
    ],
)
def test_b_dead_is_terminal(later: HistoryRecord, expected: list[str]) -> None:
    assert_fragments(check([*HEALTHY, later]), expected)


@pytest.mark.parametrize(
    ("death", "min_voters", "expected"),
    [
        pytest.param(rec(8, B, row(C, SiloStatus.DEAD, voters=[A, B])), 2, [], id="quorum of two"),
        pytest.param(rec(8, B, row(C, SiloStatus.DEAD, voters=[B])), 1, [], id="quorum of one"),
        pytest.param(
            rec(8, B, row(C, SiloStatus.DEAD, voters=[B])),
            2,
            [
                "(c) death needs a quorum: 10.0.0.2:11111@1 declared 10.0.0.3:11111@1 Dead at v8 with 1 distinct "
                "voter(s) (10.0.0.2:11111@1), fewer than 2; row before: 10.0.0.3:11111@1 ACTIVE, votes: "
                "10.0.0.1:11111@1 at 2026-01-02T03:04:05.000000+00:00; written: 10.0.0.3:11111@1 DEAD, votes: "
                "10.0.0.2:11111@1 at"
            ],
            id="one voter short",
        ),
        pytest.param(
            rec(8, B, row(C, SiloStatus.DEAD, voters=[B, B, B])),
            2,
            ["(c) death needs a quorum: 10.0.0.2:11111@1 declared 10.0.0.3:11111@1 Dead at v8 with 1 distinct"],
            id="repeated votes count once",
        ),
        pytest.param(
            rec(8, B, row(C, SiloStatus.DEAD, voters=[A, D])),
            2,
            ["(c) death needs a quorum: 10.0.0.2:11111@1 declared 10.0.0.3:11111@1 Dead at v8 without being one"],
            id="killer not among the voters",
        ),
        pytest.param(
            rec(8, B, row(C, SiloStatus.DEAD)),
            2,
            ["with 0 distinct voter(s) (none), fewer than 2", "without being one of its voters"],
            id="no votes at all",
        ),
        pytest.param(
            rec(8, "operator", row(C, SiloStatus.DEAD, voters=[A, B])),
            2,
            ["(c) death needs a quorum: operator declared 10.0.0.3:11111@1 Dead at v8 without being one"],
            id="writer that is no silo address",
        ),
        pytest.param(
            rec(8, B, row(C, SiloStatus.DEAD, voters=[A, B]), "insert"),
            3,
            ["with 2 distinct voter(s) (10.0.0.1:11111@1, 10.0.0.2:11111@1), fewer than 3"],
            id="inserted dead",
        ),
    ],
)
def test_c_death_needs_a_quorum(death: HistoryRecord, min_voters: int, expected: list[str]) -> None:
    records = [*cluster_forms(), rec(7, A, row(C, voters=[A])), death]
    assert_fragments(check(records, min_voters=min_voters), expected)


@pytest.mark.parametrize(
    ("records", "protected", "expected"),
    [
        pytest.param(HEALTHY, set(), [], id="nobody protected"),
        pytest.param(HEALTHY, {A, B, D}, [], id="victim not protected"),
        pytest.param(
            HEALTHY,
            {C},
            [
                "(d) protected silos survive: 10.0.0.2:11111@1 declared protected silo 10.0.0.3:11111@1 Dead at v8; "
                "row before: 10.0.0.3:11111@1 ACTIVE"
            ],
            id="protected victim, even with a quorum",
        ),
        pytest.param(
            [*cluster_forms(), rec(7, C, row(C, SiloStatus.DEAD))], {C}, [], id="protected silo leaving by itself"
        ),
        pytest.param(
            [*cluster_forms(), rec(7, A, row(C, SiloStatus.DEAD, voters=[A]))],
            {C},
            ["(c) death needs a quorum", "(d) protected silos survive"],
            id="every broken invariant reported",
        ),
    ],
)
def test_d_protected_silos_survive(
    records: list[HistoryRecord], protected: set[SiloAddress], expected: list[str]
) -> None:
    assert_fragments(check(records, protected=protected), expected)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        pytest.param({}, [], id="times follow versions"),
        pytest.param({7: 20.0, 8: 20.0}, [], id="equal times cannot be ordered"),
        pytest.param({2: 3.0, 5: 5.0}, [], id="writers interleave"),
        pytest.param(
            {5: 1.5},
            [
                "(e) each writer moves forward: 10.0.0.2:11111@1 wrote v2 at 2026-01-02T03:04:07.000000+00:00, "
                "after v5 at 2026-01-02T03:04:06.500000+00:00: v2 insert by 10.0.0.2:11111@1"
            ],
            id="version went backwards for one writer",
        ),
        pytest.param({1: 30.0}, ["(e) each writer moves forward: 10.0.0.1:11111@1 wrote v1 at"], id="other writer"),
    ],
)
def test_e_each_writer_moves_forward(times: dict[int, float], expected: list[str]) -> None:
    records = [rec(r.version, r.writer, r.entry, r.operation, at=times.get(r.version)) for r in HEALTHY]
    assert_fragments(check(records), expected)


def test_min_voters_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="min_voters"):
        check_history(HEALTHY, min_voters=-1)


def test_assert_history_ok_lists_every_violation() -> None:
    assert_history_ok(HEALTHY, min_voters=2, protected={A, B})
    broken = [r for r in HEALTHY if r.version != 3]
    with pytest.raises(AssertionError) as raised:
        assert_history_ok(broken, min_voters=3, protected={C})
    message = str(raised.value)
    assert message.startswith("3 membership history violation(s):\n  - (a) no gaps: version 3 missing")
    assert "\n  - (c) death needs a quorum" in message
    assert "\n  - (d) protected silos survive" in message


def test_replay_rebuilds_the_rows_in_version_order() -> None:
    assert replay([]) == {}
    final = replay(list(reversed(HEALTHY)))
    assert final == {A: row(A), B: row(B), C: row(C, SiloStatus.DEAD, voters=[A, B])}
    assert replay(cluster_forms()[:4]) == {A: row(A), B: row(B, SiloStatus.JOINING), C: row(C, SiloStatus.JOINING)}


def assert_fragments(violations: list[str], expected: list[str]) -> None:
    assert len(violations) == len(expected), violations
    for violation, fragment in zip(violations, expected, strict=True):
        assert fragment in violation, violations


# --- serialization ------------------------------------------------------------------


def test_record_round_trips_through_json() -> None:
    entry = row(C, SiloStatus.DEAD, voters=[A, B]).replace(properties={"zone": "ü-1"}, proxy_port=30000)
    record = HistoryRecord(8, str(B), "update", entry, "etag-1", T0.astimezone(timezone(timedelta(hours=2))))
    line = record_to_json(record)
    assert "\n" not in line
    assert '"status":"DEAD"' in line  # the codec's row document
    assert '"recorded_at":"2026-01-02T03:04:05.000000+00:00"' in line
    assert record_from_json(line) == record
    assert record_from_json(line.encode()) == record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"operation": "delete"}, "operation must be 'insert', 'update' or 'update_rows'"),
        ({"version": "7"}, "version must be a non-negative int"),
        ({"writer": ""}, "writer must be a non-empty str"),
        ({"recorded_at": "2026-01-02T03:04:05"}, "naive"),
        ({"entry": {"status": "ZOMBIE"}}, "entry cannot be parsed: unknown status 'ZOMBIE'"),
    ],
)
def test_malformed_records_say_what_is_wrong(change: dict[str, Any], message: str) -> None:
    document = {**json.loads(record_to_json(HEALTHY[-1])), **change}
    with pytest.raises(MalformedHistoryError, match="where-7") as raised:
        record_from_json(json.dumps(document), "where-7")
    assert message in str(raised.value)


def test_json_lines_round_trip_survives_a_killed_writer(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    by_writer = {A: [r for r in HEALTHY if r.writer == str(A)], B: [r for r in HEALTHY if r.writer != str(A)]}
    for writer, records in by_writer.items():
        with JsonLinesSink(directory / f"{writer.host}.jsonl") as sink:
            for record in records:
                sink.append(record)
    (directory / "notes.txt").write_text("not history\n")
    assert load_history(directory) == HEALTHY

    # Reopening appends; a killed writer leaves half a line at the end of its file.
    a_file = directory / f"{A.host}.jsonl"
    extra = rec(9, A, row(D), "insert")
    with JsonLinesSink(a_file) as sink:
        sink.append(extra)
    with a_file.open("ab") as file:
        file.write(record_to_json(rec(10, A, row(D, SiloStatus.ACTIVE)))[:-20].encode())
    assert load_history(directory) == [*HEALTHY, extra]
    assert load_history([a_file, directory / f"{B.host}.jsonl"]) == [*HEALTHY, extra]
    assert load_history(str(a_file)) == by_writer[A] + [extra]

    # A new sink on that file cuts the fragment off, so its own lines stay readable.
    last = rec(10, A, row(D, SiloStatus.ACTIVE))
    with JsonLinesSink(a_file) as sink:
        sink.append(last)
    assert load_history(directory) == [*HEALTHY, extra, last]
    assert a_file.read_bytes().endswith(b"\n")
    assert_history_ok(load_history(directory), min_voters=2, protected={A, B, D})


def test_a_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(record_to_json(HEALTHY[0]))
    assert load_history(path) == [HEALTHY[0]]


def test_damage_before_the_last_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = [record_to_json(HEALTHY[0]), record_to_json(HEALTHY[1])[:30], record_to_json(HEALTHY[2])]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedHistoryError, match=r"a\.jsonl:2 is not valid JSON"):
        load_history(tmp_path)
    path.write_text("\n".join(lines[:2]) + "\n")  # complete (newline-terminated) yet unparseable
    with pytest.raises(MalformedHistoryError, match=r"a\.jsonl:2"):
        load_history(tmp_path)


def test_sink_is_safe_across_threads(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    records = [rec(v, A, row(A)) for v in range(1, 201)]
    with JsonLinesSink(path) as sink:

        def append_all(part: list[HistoryRecord]) -> None:
            for record in part:
                sink.append(record)

        threads = [threading.Thread(target=append_all, args=(records[i::4],)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert load_history(path) == records


# --- RecordingTable ------------------------------------------------------------------


class CountingTable(MembershipTable):
    """Delegates to ``inner`` and logs every call; ``fail_writes`` makes writes raise instead."""

    def __init__(self, inner: MembershipTable) -> None:
        super().__init__(inner.cluster_id)
        self.inner = inner
        self.max_rows_per_update = inner.max_rows_per_update
        self.calls: list[str] = []
        self.fail_writes = False

    def _write(self) -> None:
        if self.fail_writes:
            raise TableUnavailableError("injected: store unreachable")

    def initialize(self, try_init_version: bool = True) -> None:
        self.calls.append("initialize")
        self.inner.initialize(try_init_version)

    def read_all(self) -> MembershipTableData:
        self.calls.append("read_all")
        return self.inner.read_all()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        self.calls.append("read_row")
        return self.inner.read_row(silo_address)

    def read_version(self) -> TableVersion:
        self.calls.append("read_version")
        return self.inner.read_version()

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        self.calls.append("insert_row")
        self._write()
        return self.inner.insert_row(entry, version)

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        self.calls.append("update_row")
        self._write()
        return self.inner.update_row(entry, etag, version)

    def update_rows(self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion) -> bool:
        self.calls.append("update_rows")
        self._write()
        return self.inner.update_rows(updates, version)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        self.calls.append("insert_row_with_etags")
        self._write()
        return self.inner.insert_row_with_etags(entry, version)

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        self.calls.append("insert_row_at_next_version")
        self._write()
        return self.inner.insert_row_at_next_version(entry)

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        self.calls.append("update_row_at_next_version")
        self._write()
        return self.inner.update_row_at_next_version(entry, etag)

    def update_rows_with_etags(
        self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion
    ) -> CommittedWrite | None:
        self.calls.append("update_rows_with_etags")
        self._write()
        return self.inner.update_rows_with_etags(updates, version)

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self.calls.append("update_i_am_alive")
        self.inner.update_i_am_alive(silo_address, when)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        self.calls.append("cleanup_defunct_entries")
        return self.inner.cleanup_defunct_entries(before)

    def delete_cluster_entries(self) -> None:
        self.calls.append("delete_cluster_entries")
        self.inner.delete_cluster_entries()

    def close(self) -> None:
        self.calls.append("close")
        self.inner.close()


@pytest.fixture
def store() -> Iterator[str]:
    name = f"history-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    InMemoryMembershipTable.reset(name)


def test_recording_table_records_only_successful_versioned_writes(store: str) -> None:
    counting = CountingTable(open_table(store, "c"))
    sink = ListSink()
    table = RecordingTable(counting, str(A), sink)
    assert table.cluster_id == "c"

    assert not table.insert_row(row(A, SiloStatus.JOINING), TableVersion(1, "")), "no version row yet"
    table.initialize()
    read = table.read_all()
    before_insert = datetime.now(UTC)
    assert table.insert_row(row(A, SiloStatus.JOINING), read.version.next())
    assert not table.insert_row(row(A, SiloStatus.JOINING), read.version.next()), "stale version"
    read = table.read_row(A)
    etag = read.rows[0][1]
    assert not table.update_row(row(A), "not-the-etag", read.version.next())
    assert not table.update_row(row(B), etag, read.version.next()), "no such row"
    assert table.update_row(row(A), etag, read.version.next())
    table.update_i_am_alive(A, T0 + timedelta(hours=1))
    assert table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 0
    counting.fail_writes = True
    read = table.read_all()
    with pytest.raises(TableUnavailableError):
        table.update_row(row(A, SiloStatus.SHUTTING_DOWN), read.rows[0][1], read.version.next())
    counting.fail_writes = False
    table.delete_cluster_entries()
    table.close()

    assert counting.calls == [
        "insert_row",
        "initialize",
        "read_all",
        "insert_row",
        "insert_row",
        "read_row",
        "update_row",
        "update_row",
        "update_row",
        "update_i_am_alive",
        "cleanup_defunct_entries",
        "read_all",
        "update_row",
        "delete_cluster_entries",
        "close",
    ], "exactly the calls made, nothing added"
    assert [(r.version, r.writer, r.operation, r.entry, r.etag) for r in sink.records] == [
        (1, str(A), "insert", row(A, SiloStatus.JOINING), ""),
        (2, str(A), "update", row(A), ""),
    ]
    assert before_insert <= sink.records[0].recorded_at <= sink.records[1].recorded_at <= datetime.now(UTC)
    assert_history_ok(sink.records, min_voters=2)


def test_a_lost_race_is_not_recorded(store: str) -> None:
    sink = ListSink()
    first, second = (RecordingTable(open_table(store, "c"), str(w), sink) for w in (A, B))
    first.initialize()
    assert first.insert_row(row(C), first.read_all().version.next())
    read = first.read_row(C)
    (entry, etag), version = read.rows[0], read.version.next()
    assert first.update_row(entry.replace(suspect_times=((A, T0),)), etag, version)
    assert not second.update_row(entry.replace(suspect_times=((B, T0),)), etag, version)
    assert [(r.version, r.writer) for r in sink.records] == [(1, str(A)), (2, str(A))]
    assert_history_ok(sink.records, min_voters=2)


def test_the_with_etags_writes_are_recorded_and_return_the_inner_result(store: str) -> None:
    counting = CountingTable(open_table(store, "c"))
    sink = ListSink()
    table = RecordingTable(counting, str(A), sink)
    table.initialize()
    start = table.read_all().version
    inserted = table.insert_row_with_etags(row(A, SiloStatus.JOINING), start.next())
    assert inserted is not None
    assert table.insert_row_with_etags(row(B), start.next()) is None, "stale version: not recorded"
    updated = table.update_rows_with_etags([(row(A), inserted.rows[0][1])], inserted.version.next())
    assert updated is not None
    assert table.update_rows_with_etags([(row(A), inserted.rows[0][1])], updated.version.next()) is None
    assert updated.version == counting.inner.read_all().version, "the inner write's result, unchanged"
    assert counting.calls[-4:] == ["insert_row_with_etags", "insert_row_with_etags"] + ["update_rows_with_etags"] * 2
    assert [(r.version, r.operation, r.entry) for r in sink.records] == [
        (1, "insert", row(A, SiloStatus.JOINING)),
        (2, "update_rows", row(A)),
    ]
    assert sink.records[1].batch


def test_an_insert_at_the_next_version_is_recorded_at_the_version_it_set(store: str) -> None:
    counting = CountingTable(open_table(store, "c"))
    sink = ListSink()
    table = RecordingTable(counting, str(A), sink)
    table.initialize()
    assert table.insert_row_at_next_version(row(A, SiloStatus.JOINING)) is not None
    inserted = table.insert_row_at_next_version(row(B))
    assert inserted is not None
    assert table.insert_row_at_next_version(row(B)) is None, "the row exists: not recorded"
    assert inserted.version == counting.inner.read_all().version, "the inner write's result, unchanged"
    assert counting.calls[-3:] == ["insert_row_at_next_version"] * 3
    assert [(r.version, r.operation, r.entry) for r in sink.records] == [
        (1, "insert", row(A, SiloStatus.JOINING)),
        (2, "insert", row(B)),
    ]


def test_an_update_at_the_next_version_is_recorded_at_the_version_it_set(store: str) -> None:
    counting = CountingTable(open_table(store, "c"))
    sink = ListSink()
    table = RecordingTable(counting, str(A), sink)
    table.initialize()
    inserted = table.insert_row_at_next_version(row(A, SiloStatus.JOINING))
    assert inserted is not None
    updated = table.update_row_at_next_version(row(A), inserted.rows[0][1])
    assert updated is not None
    assert table.update_row_at_next_version(row(A), inserted.rows[0][1]) is None, "a stale etag: not recorded"
    assert updated.version == counting.inner.read_all().version, "the inner write's result, unchanged"
    assert counting.calls[-2:] == ["update_row_at_next_version"] * 2
    assert [(r.version, r.operation, r.entry) for r in sink.records] == [
        (1, "insert", row(A, SiloStatus.JOINING)),
        (2, "update", row(A)),
    ]


def test_a_cluster_run_recorded_per_writer_passes_the_checks(store: str, tmp_path: Path) -> None:
    sinks = {silo: JsonLinesSink(tmp_path / f"{silo}.jsonl") for silo in (A, B, C)}
    tables = {silo: RecordingTable(open_table(store, "c"), str(silo), sinks[silo]) for silo in (A, B, C)}

    def write(writer: SiloAddress, target: SiloAddress, change: dict[str, Any]) -> None:
        read = tables[writer].read_row(target)
        entry, etag = read.rows[0]
        assert tables[writer].update_row(entry.replace(**change), etag, read.version.next())

    for silo, table in tables.items():
        table.initialize()
        assert table.insert_row(row(silo, SiloStatus.JOINING), table.read_all().version.next())
        table.update_i_am_alive(silo, T0 + timedelta(seconds=1))
        write(silo, silo, {"status": SiloStatus.ACTIVE})
    write(A, C, {"suspect_times": ((A, T0),)})
    write(B, C, {"status": SiloStatus.DEAD, "suspect_times": ((A, T0), (B, T0))})
    write(A, A, {"status": SiloStatus.SHUTTING_DOWN})
    for sink in sinks.values():
        sink.close()

    history = load_history(tmp_path)
    assert [r.version for r in history] == list(range(1, 10))
    assert_history_ok(history, min_voters=2, protected={A, B})
    assert check_history(history, min_voters=2, protected={C}) != []
    stored = {entry.silo_address: entry for entry in tables[A].read_all().entries}
    assert replay(history) == stored


def test_concurrent_writers_sharing_one_name_keep_the_per_writer_order(store: str) -> None:
    """Threads of one process share the writer name; their records must still pass (a) and (e)."""
    sink = ListSink()
    setup = RecordingTable(open_table(store, "c"), str(A), sink)
    setup.initialize()
    assert setup.insert_row(row(A), setup.read_all().version.next())
    stop = threading.Event()

    def vote(voter: SiloAddress) -> None:
        table = RecordingTable(open_table(store, "c"), str(A), sink)
        while not stop.is_set():
            read = table.read_row(A)
            entry, etag = read.rows[0]
            table.update_row(entry.replace(suspect_times=((voter, datetime.now(UTC)),)), etag, read.version.next())

    threads = [threading.Thread(target=vote, args=(voter,)) for voter in (A, B, C, D)]
    for thread in threads:
        thread.start()
    while len(sink.records) < 300:
        stop.wait(0.01)
    stop.set()
    for thread in threads:
        thread.join()
    assert [r.version for r in sorted(sink.records, key=lambda r: r.version)] == list(range(1, len(sink.records) + 1))
    assert_history_ok(sink.records, min_voters=2)


class PausingTable(CountingTable):
    """Holds each ``update_row`` after it committed until ``release`` is set."""

    def __init__(self, inner: MembershipTable) -> None:
        super().__init__(inner)
        self.committed = threading.Event()
        self.release = threading.Event()

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        written = super().update_row(entry, etag, version)
        self.committed.set()
        assert self.release.wait(10)
        return written


def test_a_write_recorded_late_still_orders_by_when_it_was_issued(store: str) -> None:
    """A thread slow to return from its write records it after a later write by the same silo."""
    sink = ListSink()
    fast = RecordingTable(open_table(store, "c"), str(A), sink)
    pausing = PausingTable(open_table(store, "c"))
    slow = RecordingTable(pausing, str(A), sink)
    fast.initialize()
    assert fast.insert_row(row(A), fast.read_all().version.next())

    def slow_write() -> None:
        read = slow.read_row(A)
        assert slow.update_row(row(A, voters=[B]), read.rows[0][1], read.version.next())

    thread = threading.Thread(target=slow_write)
    thread.start()
    assert pausing.committed.wait(10)
    read = fast.read_row(A)
    assert fast.update_row(row(A, voters=[B, C]), read.rows[0][1], read.version.next())
    pausing.release.set()
    thread.join()

    assert [r.version for r in sink.records] == [1, 3, 2], "v3 was recorded before v2"
    assert_history_ok(sink.records, min_voters=2)


# --- update_rows: one write, several rows ----------------------------------------------


def batch(version: int, writer: SiloAddress, *entries: MembershipEntry, batch_id: str = "b1") -> list[HistoryRecord]:
    """The records one ``update_rows`` leaves: one per row, sharing a batch id, a version and a time."""
    when = T0 + timedelta(seconds=version)
    return [HistoryRecord(version, str(writer), "update_rows", entry, "", when, batch_id) for entry in entries]


RACK_LOST = [
    *cluster_forms(),
    rec(7, D, row(D, SiloStatus.JOINING), "insert"),
    rec(8, D, row(D)),
    rec(9, A, row(C, voters=[A])),
    rec(10, A, row(D, voters=[A])),
    *batch(11, B, row(C, SiloStatus.DEAD, voters=[A, B]), row(D, SiloStatus.DEAD, voters=[A, B])),
    rec(12, A, row(A, voters=[B])),
]
"""C and D fail together: B casts the last vote on both and declares both Dead in one version."""


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(RACK_LOST, [], id="two deaths in one version"),
        pytest.param(list(reversed(RACK_LOST)), [], id="in any order"),
        pytest.param(
            [
                *cluster_forms(),
                *batch(7, B, row(A, SiloStatus.DEAD, voters=[A, B]), row(C, SiloStatus.DEAD, voters=[B])),
            ],
            ["(c) death needs a quorum: 10.0.0.2:11111@1 declared 10.0.0.3:11111@1 Dead at v7 with 1 distinct voter"],
            id="each row of a batch needs its voters",
        ),
        pytest.param(
            [*RACK_LOST, *batch(13, A, row(C, SiloStatus.DEAD, voters=[A, B]), row(A), batch_id="b2")],
            ["(b) Dead is terminal: 10.0.0.1:11111@1 wrote 10.0.0.3:11111@1 at v13"],
            id="a batch may not touch a Dead row",
        ),
        pytest.param(
            [*cluster_forms(), *batch(7, A, row(A), row(B)), *batch(7, B, row(C), batch_id="b2")],
            ["(a) one winner per version: version 7 was won 2 times"],
            id="two batches at one version",
        ),
        pytest.param(
            [*cluster_forms(), *batch(7, A, row(A), row(B)), rec(7, C, row(C))],
            ["(a) one winner per version: version 7 was won 2 times"],
            id="a batch and an update at one version",
        ),
        pytest.param(
            [*cluster_forms(), *batch(7, A, row(A)), *batch(8, A, row(B))],
            ["(a) one update_rows is one write: batch b1 by 10.0.0.1:11111@1 must carry one version"],
            id="one batch id at two versions",
        ),
        pytest.param(
            [*cluster_forms(), *batch(7, A, row(B), row(B, voters=[A]))],
            ["(a) one update_rows is one write: batch b1 by 10.0.0.1:11111@1 must carry one version and name each"],
            id="one batch naming a silo twice",
        ),
    ],
)
def test_update_rows_is_one_write_of_several_rows(records: list[HistoryRecord], expected: list[str]) -> None:
    violations = check(records)
    assert len(violations) == len(expected), violations
    for violation, start in zip(violations, expected, strict=True):
        assert violation.startswith(start), violation


def test_a_batch_counts_once_in_its_writers_order() -> None:
    assert check([*cluster_forms(), *batch(7, A, row(A), row(B), row(C)), rec(8, A, row(A, voters=[B]))]) == []


@pytest.mark.parametrize(
    ("operation", "batch_id", "message"),
    [
        ("update_rows", "", "batch must be a non-empty str for 'update_rows'"),
        ("update", "b1", "batch must be a non-empty str for 'update_rows' and '' otherwise"),
        ("insert", "b1", "batch must be a non-empty str for 'update_rows' and '' otherwise"),
    ],
)
def test_a_batch_id_goes_with_update_rows_only(operation: Operation, batch_id: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HistoryRecord(1, str(A), operation, row(A), "", T0, batch_id)


def test_a_batch_round_trips_through_json() -> None:
    record = batch(7, A, row(B, SiloStatus.DEAD, voters=[A, C]))[0]
    line = record_to_json(record)
    assert json.loads(line)["batch"] == "b1"
    assert record_from_json(line) == record
    assert "batch" not in json.loads(record_to_json(rec(1, A, row(A)))), "other records keep their old shape"


def test_recording_table_records_one_update_rows_as_one_batch(store: str) -> None:
    counting = CountingTable(open_table(store, "c"))
    sink = ListSink()
    table = RecordingTable(counting, str(A), sink)
    assert table.max_rows_per_update == counting.inner.max_rows_per_update
    table.initialize()
    for silo in (B, C):
        assert table.insert_row(row(silo), table.read_version().next())
    read = table.read_all()
    etags = {entry.silo_address: etag for entry, etag in read.rows}
    dead = [(row(silo, SiloStatus.DEAD, voters=[A, D]), etags[silo]) for silo in (B, C)]
    assert not table.update_rows(dead, TableVersion(read.version.version + 1, "stale")), "a lost race"
    assert table.update_rows(dead, read.version.next())
    counting.fail_writes = True
    with pytest.raises(TableUnavailableError):
        table.update_rows(dead, table.read_version().next())

    assert counting.calls[-5:] == ["read_all", "update_rows", "update_rows", "read_version", "update_rows"]
    written = sink.records[2:]
    assert [(r.version, r.operation, r.entry) for r in written] == [(3, "update_rows", entry) for entry, _ in dead]
    assert written[0].batch
    assert written[0].batch == written[1].batch
    assert written[0].recorded_at == written[1].recorded_at
    assert_history_ok(sink.records, min_voters=2)
