"""Property-based checks of a backend's conditional writes, shipped like the conformance checks.

The checks of ``membership_tables.testing.checks`` each try one rule on one hand-written
scenario. This module lets hypothesis write the scenarios: random programs of
``insert_row_with_etags``, ``insert_row_at_next_version``, ``update_row``,
``update_row_at_next_version``, ``update_rows``, ``update_rows_with_etags`` (the
read-modify-writes of several rows), ``update_i_am_alive``,
``read_all``/``read_row``/``read_version``, read-modify-writes (of one row or several),
cleanups and re-creations of the cluster, passing current, stale or
never-issued row and version tokens, some steps issued **concurrently** from several
threads (one handle each) against the real backend. A reference model of the contract
replays every step, and each step must be explained by it. The model is an in-memory table
of its own rather than ``InMemoryMembershipTable``: the search for an order needs cheap
copies of it, and an etag a write issued is a placeholder until a read reveals it (then it
must be new); the memory backend is itself one of the backends checked against the model.

* **conditional writes are linearizable**: some order of the step's operations, consistent
  with each thread's program order and with real time (an operation that returned before
  another started comes first), has every conditional write succeed exactly when its
  etags matched at its point in that order, every read return the state at its point,
  and every cleanup remove what it reported;
* **the state is the replay of exactly the successful writes**: after every step a read
  returns the reference's rows and version;
* **versions move by exactly one per successful write** (an ``update_rows`` of several rows
  too), and every write gives each row it writes and the version **fresh** etags: a read
  never reveals an etag that row (or the version row) carried before, not even across a
  cleanup or a re-created cluster;
* **a ``*_with_etags`` write says what it left**: its ``CommittedWrite`` holds the version
  set and the rows as given, in order, with fresh etags that later reads must return.

A write that raised ``TableUnavailableError`` has an unknown outcome: either is accepted.
Reads inside concurrent steps are compared without their IAmAlive times (a heartbeat is
reflected "as of some moment during the read"); reads between steps compare every field.

Run it against a backend like the conformance checks (hypothesis must be installed)::

    from membership_tables.testing.properties import check_linearizable_writes
    check_linearizable_writes(lambda cluster_id: open_table(uri, cluster_id), name="my-store")

Each program starts on an emptied cluster (one cluster per run, ``delete_cluster_entries``
before each program: opening handles is slow on some stores). The budget and the example
database come from the active hypothesis settings profile (or pass ``settings=``); ``name``
keeps one backend's stored examples apart from another's. ``removals=False`` leaves out
cleanups and re-created clusters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Literal, Protocol, TypeVar

from hypothesis import HealthCheck, given, note
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate
from membership_tables.errors import TableUnavailableError
from membership_tables.model import (
    CommittedWrite,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
)
from membership_tables.testing.checks import T0, ConformanceError, OpenCluster, make_entry, new_cluster_id

__all__ = [
    "PROPERTIES",
    "Linearization",
    "PropertyCheck",
    "check_linearizable_writes",
    "linearizable_writes_programs",
    "linearize",
    "run_properties",
]

_T = TypeVar("_T")

SLOTS = 3
"""Silos a program writes (few, so inserts and updates collide)."""
THREADS = 3
"""Concurrent clients at most, one handle each."""
BOGUS_ETAG = "never-issued-etag"
"""A token no backend issues (not a number either, so no store can mistake it for one)."""


def slot_address(slot: int) -> SiloAddress:
    return make_entry(2001 + slot).silo_address


# --- the program: what hypothesis generates ------------------------------------------------


@dataclass(frozen=True)
class Token:
    """Which token a write passes: the latest one read, an older one, or one never issued."""

    kind: Literal["current", "stale", "bogus"]
    age: int = 0
    """For ``stale``: how many reads further back than the one before the latest (at most the first read)."""

    def __repr__(self) -> str:
        return self.kind if self.kind != "stale" else f"stale({self.age})"


@dataclass(frozen=True)
class RowSpec:
    """The row a write stores (whatever the row held before: writes are blind)."""

    slot: int
    status: SiloStatus
    name: int
    votes: int
    alive: int
    """IAmAlive: seconds after T0."""

    def entry(self) -> MembershipEntry:
        voters = [slot_address((self.slot + 1 + i) % SLOTS) for i in range(self.votes)]
        return make_entry(
            2001 + self.slot,
            status=self.status,
            silo_name=f"name-{self.name}",
            i_am_alive_time=T0 + timedelta(seconds=self.alive),
            suspect_times=tuple((voter, T0 + timedelta(minutes=i)) for i, voter in enumerate(voters)),
        )

    def __repr__(self) -> str:
        return f"row{self.slot}({self.status.name}, name-{self.name}, votes={self.votes}, alive=+{self.alive}s)"


@dataclass(frozen=True)
class Insert:
    row: RowSpec
    version: Token


@dataclass(frozen=True)
class InsertAtNextVersion:
    """``insert_row_at_next_version``: no version token to go stale."""

    row: RowSpec


@dataclass(frozen=True)
class UpdateAtNextVersion:
    """``update_row_at_next_version``: the row's etag token only."""

    row: RowSpec
    etag: Token


@dataclass(frozen=True)
class Update:
    row: RowSpec
    etag: Token
    version: Token


@dataclass(frozen=True)
class ReadModifyWrite:
    """``read_row`` then ``update_row`` with exactly the tokens that read returned."""

    row: RowSpec


@dataclass(frozen=True)
class UpdateRows:
    """``update_rows`` of rows of distinct slots, each with its own etag token, and a version token."""

    rows: tuple[tuple[RowSpec, Token], ...]
    version: Token


@dataclass(frozen=True)
class ReadModifyWriteRows:
    """``read_all`` then ``update_rows`` with exactly the tokens that read returned, of those of
    these rows that the read found (all of them, to lose, if it found none)."""

    rows: tuple[RowSpec, ...]


@dataclass(frozen=True)
class ReadVersion:
    pass


@dataclass(frozen=True)
class Heartbeat:
    slot: int
    seconds: int


@dataclass(frozen=True)
class ReadAll:
    pass


@dataclass(frozen=True)
class ReadRow:
    slot: int


@dataclass(frozen=True)
class Cleanup:
    """``cleanup_defunct_entries(T0 + days)``: 0 removes nothing old enough, 1 every Dead row."""

    days: int


@dataclass(frozen=True)
class Recreate:
    """``delete_cluster_entries()`` then ``initialize()``: the cluster starts again at version 0."""


Op = (
    Insert
    | Update
    | ReadModifyWrite
    | Heartbeat
    | ReadAll
    | ReadRow
    | Cleanup
    | Recreate
    | UpdateRows
    | ReadModifyWriteRows
    | ReadVersion
    | InsertAtNextVersion
    | UpdateAtNextVersion
)
Step = tuple[tuple[Op, ...], ...]
"""One tuple of operations per thread; a single thread with a single operation is a plain call."""


def _tokens() -> st.SearchStrategy[Token]:
    current = st.just(Token("current"))
    return st.one_of(
        current, current, current, st.builds(Token, st.just("stale"), st.integers(0, 3)), st.just(Token("bogus"))
    )


def _rows() -> st.SearchStrategy[RowSpec]:
    statuses = st.sampled_from([SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD])
    return st.builds(
        RowSpec,
        slot=st.integers(0, SLOTS - 1),
        status=statuses,
        name=st.integers(0, 2),
        votes=st.integers(0, 2),
        alive=st.integers(0, 4),
    )


def _ops(*, concurrent: bool, removals: bool) -> st.SearchStrategy[Op]:
    """Updates and read-modify-writes weigh double; cleanups and re-creations are rare and never concurrent."""
    slots = st.integers(0, SLOTS - 1)
    update = st.builds(Update, _rows(), _tokens(), _tokens())
    read_modify_write = st.builds(ReadModifyWrite, _rows())
    branches: list[st.SearchStrategy[Op]] = [
        st.builds(Insert, _rows(), _tokens()),
        update,
        update,
        read_modify_write,
        read_modify_write,
        st.builds(Heartbeat, slots, st.integers(0, 6)),
        st.just(ReadAll()),
        st.builds(ReadRow, slots),
    ]
    if removals and not concurrent:
        branches += [st.builds(Cleanup, st.integers(0, 1)), st.just(Recreate())]
    # Appended last, so the stored examples of the programs above still decode to the same programs.
    distinct_rows = st.lists(_rows(), min_size=1, max_size=SLOTS, unique_by=lambda row: row.slot).map(tuple)
    update_rows = st.builds(
        UpdateRows,
        st.lists(st.tuples(_rows(), _tokens()), min_size=1, max_size=SLOTS, unique_by=lambda pair: pair[0].slot).map(
            tuple
        ),
        _tokens(),
    )
    read_modify_write_rows = st.builds(ReadModifyWriteRows, distinct_rows)
    branches += [update_rows, update_rows, read_modify_write_rows, read_modify_write_rows, st.just(ReadVersion())]
    branches += [st.builds(InsertAtNextVersion, _rows()), st.builds(UpdateAtNextVersion, _rows(), _tokens())]
    return st.sampled_from(branches).flatmap(_itself)  # one_of would favour the first branch


def _itself(strategy: st.SearchStrategy[_T]) -> st.SearchStrategy[_T]:
    return strategy


PREFIX: Step = (
    (Insert(RowSpec(0, SiloStatus.ACTIVE, 0, 0, 0), Token("current")),),
    (Insert(RowSpec(1, SiloStatus.ACTIVE, 0, 0, 0), Token("current")),),
)
"""Every program starts by inserting rows 0 and 1 one after the other (row 2 is left to races)."""


def linearizable_writes_programs(*, removals: bool = True, max_steps: int = 12) -> st.SearchStrategy[list[Step]]:
    """Programs of sequential and concurrent steps (2-3 threads of 1-2 operations each), after ``PREFIX``."""
    single = _ops(concurrent=False, removals=removals).map(lambda op: ((op,),))
    thread = st.lists(_ops(concurrent=True, removals=removals), min_size=1, max_size=2).map(tuple)
    concurrent = st.lists(thread, min_size=2, max_size=THREADS).map(tuple)
    steps = st.sampled_from([single, concurrent, concurrent]).flatmap(_itself)  # two in three concurrent
    return st.lists(steps, min_size=3, max_size=max_steps)


# --- the reference model ---------------------------------------------------------------------


@dataclass(frozen=True)
class Fresh:
    """An etag a successful write just issued: unknown until a read reveals it, and new."""

    serial: int

    def __repr__(self) -> str:
        return f"<fresh etag #{self.serial}>"


Etag = str | Fresh
VERSION_KEY = "the version row"


@dataclass(frozen=True)
class Model:
    """The contract's table: rows, version, and every etag each row and the version ever carried."""

    version: tuple[int, Etag] | None = None
    """``None``: the cluster's version row does not exist."""
    rows: Mapping[SiloAddress, tuple[MembershipEntry, Etag]] = field(default_factory=dict)
    seen: Mapping[str, frozenset[str]] = field(default_factory=dict)
    serial: int = 0

    def fresh(self) -> tuple[Fresh, Model]:
        return Fresh(self.serial), replace(self, serial=self.serial + 1)

    def version_matches(self, version: TableVersion) -> bool:
        return self.version is not None and self.version[1] == version.etag

    def describe(self) -> str:
        version = "no version row" if self.version is None else f"version {self.version[0]} etag {self.version[1]!r}"
        rows = "; ".join(
            f"{entry.silo_address} {entry.status.name} {entry.silo_name} alive={entry.i_am_alive_time:%H:%M:%S} "
            f"votes={len(entry.suspect_times)} etag={etag!r}"
            for entry, etag in (self.rows[address] for address in sorted(self.rows))
        )
        return f"{version}; rows: {rows or 'none'}"

    def bind(self, key: str, expected: Etag, actual: str) -> tuple[Model | None, str]:
        """Check a revealed etag against the model; a fresh one must be new for ``key``."""
        if isinstance(expected, str):
            if actual == expected:
                return self, ""
            return None, f"{key} carries etag {actual!r}, the reference {expected!r} (no write changed it since)"
        if not actual or actual in self.seen.get(key, frozenset()):
            return None, (
                f"{key} was written, so it must carry a fresh etag, but it carries {actual!r}, "
                f"which it carried before (etags of {key} seen so far: {sorted(self.seen.get(key, ()))})"
            )
        seen = {**self.seen, key: self.seen.get(key, frozenset()) | {actual}}
        return replace(self, seen=seen), ""

    def with_version(self, etag: str) -> Model:
        assert self.version is not None
        return replace(self, version=(self.version[0], etag))

    def with_row_etag(self, address: SiloAddress, etag: str) -> Model:
        return replace(self, rows={**self.rows, address: (self.rows[address][0], etag)})


def _same_entry(expected: MembershipEntry, actual: MembershipEntry, exact_alive: bool) -> bool:
    if exact_alive:
        return expected == actual
    return expected.replace(i_am_alive_time=T0) == actual.replace(i_am_alive_time=T0)


def _differences(expected: MembershipEntry, actual: MembershipEntry) -> str:
    names = [
        item.name for item in fields(MembershipEntry) if getattr(expected, item.name) != getattr(actual, item.name)
    ]
    return "; ".join(f"{name} reads {getattr(actual, name)}, expected {getattr(expected, name)}" for name in names)


def _observe(
    model: Model, data: MembershipTableData, only: SiloAddress | None, exact_alive: bool
) -> tuple[Model | None, str]:
    """Match a read (``read_all``, or ``read_row(only)``) against the model, learning fresh etags."""
    if model.version is None:
        if data.version != UNINITIALIZED_VERSION or data.rows:
            return (
                None,
                f"the cluster has no version row, yet the read returned {data.version} and {len(data.rows)} row(s)",
            )
        return model, ""
    if data.version.version != model.version[0]:
        return None, (
            f"the read says version {data.version.version}, the reference {model.version[0]} "
            "(versions move by exactly one per successful write)"
        )
    current, why = model.bind(VERSION_KEY, model.version[1], data.version.etag)
    if current is None:
        return None, why
    if isinstance(model.version[1], Fresh):
        current = current.with_version(data.version.etag)
    expected = {a: row for a, row in model.rows.items() if only is None or a == only}
    actual = {entry.silo_address: (entry, etag) for entry, etag in data.rows}
    if set(actual) != set(expected):
        return None, f"the read returned rows {sorted(map(str, actual))}, the reference {sorted(map(str, expected))}"
    for address, (entry, etag) in actual.items():
        model_entry, model_etag = expected[address]
        if not _same_entry(model_entry, entry, exact_alive):
            return None, f"row {address} differs from the reference: {_differences(model_entry, entry)}"
        bound, why = current.bind(f"row {address}", model_etag, etag)
        if bound is None:
            return None, why
        current = bound.with_row_etag(address, etag) if isinstance(model_etag, Fresh) else bound
    return current, ""


# --- executed operations ---------------------------------------------------------------------

Kind = Literal[
    "read_all",
    "read_row",
    "read_version",
    "insert",
    "insert_next",
    "update",
    "update_next",
    "update_rows",
    "heartbeat",
    "cleanup",
    "delete",
    "initialize",
]
WRITES: frozenset[Kind] = frozenset({"insert", "insert_next", "update", "update_next", "update_rows", "heartbeat"})
"""Calls whose outcome is unknown when they raise ``TableUnavailableError``."""


@dataclass
class Event:
    """One call made against the backend, what it returned, and when (``time.monotonic``)."""

    thread: int
    kind: Kind
    address: SiloAddress | None = None
    entry: MembershipEntry | None = None
    etag: str = ""
    updates: tuple[RowUpdate, ...] = ()
    """For ``update_rows``: the rows and their etags."""
    version: TableVersion | None = None
    when: datetime | None = None
    result: object = None
    error: BaseException | None = None
    start: float = 0.0
    end: float = 0.0
    exact: bool = True
    """Reads only: compare IAmAlive times too (False inside concurrent steps)."""
    with_etags: bool = False
    """Writes only: called as ``insert_row_with_etags``/``update_rows_with_etags``, so ``result`` is a
    ``CommittedWrite`` or ``None``, and the etags it returns are learnt like those of a read."""

    @property
    def call(self) -> str:
        """The method this event called."""
        if self.kind in ("insert_next", "update_next"):
            return f"{self.kind.removesuffix('_next')}_row_at_next_version"
        name = {"insert": "insert_row", "update": "update_row"}.get(self.kind, self.kind)
        return f"{name}_with_etags" if self.with_etags else name

    def _succeeded(self) -> object:
        """The write's outcome as ``True``/``False`` (anything else: the backend returned nonsense)."""
        if not self.with_etags:
            return self.result
        if self.result is None:
            return False
        return True if isinstance(self.result, CommittedWrite) else self.result

    def describe(self, since: float | None = None) -> str:
        """One line for people; with ``since``, when the call ran, in ms after that moment."""
        if self.kind in ("insert", "insert_next", "update", "update_next"):
            assert self.entry is not None
            what = (
                f"{self.call}({self.entry.silo_address} {self.entry.status.name} {self.entry.silo_name} "
                f"alive={self.entry.i_am_alive_time:%H:%M:%S} votes={len(self.entry.suspect_times)}, "
                + (f"etag={self.etag!r}, " if self.kind in ("update", "update_next") else "")
                + ("" if self.kind.endswith("_next") else f"version={self.version}")
                + ")"
            )
        elif self.kind == "update_rows":
            rows = "; ".join(
                f"{entry.silo_address} {entry.status.name} {entry.silo_name} alive={entry.i_am_alive_time:%H:%M:%S} "
                f"votes={len(entry.suspect_times)} etag={etag!r}"
                for entry, etag in self.updates
            )
            what = f"{self.call}([{rows}], version={self.version})"
        elif self.kind == "heartbeat":
            what = f"update_i_am_alive({self.address}, {self.when:%H:%M:%S})"
        elif self.kind == "read_row":
            what = f"read_row({self.address})"
        elif self.kind == "cleanup":
            what = f"cleanup_defunct_entries({self.when:%Y-%m-%d %H:%M:%S})"
        else:
            what = f"{self.kind}()"
        outcome = f"raised {self.error!r}" if self.error is not None else f"-> {_describe_result(self.result)}"
        timing = "" if since is None else f" [{1000 * (self.start - since):.1f}..{1000 * (self.end - since):.1f} ms]"
        return f"thread {self.thread}{timing}: {what} {outcome}"

    def apply(self, model: Model) -> tuple[list[Model], str]:
        """The models this call can leave behind if it took effect on ``model`` (none: impossible)."""
        if self.error is not None:
            if self.kind in WRITES:  # unknown outcome: either is fine
                done, _ = self._effect(model)
                return [model, *done], ""
            return [model], ""  # a failed read says nothing
        return self._effect(model)

    def _effect(self, model: Model) -> tuple[list[Model], str]:
        if self.kind in ("read_all", "read_row"):
            assert isinstance(self.result, MembershipTableData)
            only = self.address if self.kind == "read_row" else None
            seen, why = _observe(model, self.result, only, self.exact)
            return ([seen] if seen is not None else []), why
        if self.kind == "read_version":
            assert isinstance(self.result, TableVersion)
            seen, why = _observe_version(model, self.result)
            return ([seen] if seen is not None else []), why
        if self.kind in ("insert", "insert_next"):
            return self._insert(model)
        if self.kind in ("update", "update_next"):
            return self._update(model)
        if self.kind == "update_rows":
            return self._update_rows(model)
        if self.kind == "heartbeat":
            return [_heartbeat(model, self.address, self.when)], ""
        if self.kind == "cleanup":
            return self._cleanup(model)
        if self.kind == "delete":
            return [replace(model, version=None, rows={})], ""
        if model.version is not None:  # initialize
            return [model], ""
        etag, model = model.fresh()
        return [replace(model, version=(0, etag))], ""

    def _commit(self, model: Model, *entries: MembershipEntry) -> tuple[list[Model], str]:
        """The model after this write stored ``entries``, with the etags it returned (if any) learnt."""
        assert model.version is not None
        number = model.version[0] + 1 if self.version is None else self.version.version
        rows = dict(model.rows)
        for entry in entries:
            row_etag, model = model.fresh()
            rows[entry.silo_address] = (entry, row_etag)
        version_etag, model = model.fresh()
        model = replace(model, rows=rows, version=(number, version_etag))
        if not isinstance(self.result, CommittedWrite):
            return [model], ""
        given = (self.entry,) if self.entry is not None else tuple(entry for entry, _ in self.updates)
        learnt, why = _learn_committed(model, self.result, given)
        return ([learnt] if learnt is not None else []), why

    def _insert(self, model: Model) -> tuple[list[Model], str]:
        """``insert_row_with_etags``, or ``insert_row_at_next_version`` (no version token: ``self.version`` is None)."""
        assert self.entry is not None
        if self.version is not None and not model.version_matches(self.version):
            expected, why = False, f"its version etag {self.version.etag!r} is not the current one"
        elif model.version is None:
            expected, why = False, "the cluster has no version row"
        elif self.entry.silo_address in model.rows:
            expected, why = False, f"row {self.entry.silo_address} exists"
        elif self.version is None:
            expected, why = True, "the row is absent"
        else:
            expected, why = True, "its version etag is current and the row is absent"
        if expected and self.version is not None and not _is_next(self.version, model):
            return [], _reused_version(self.version, model)
        if self._succeeded() is not expected:
            return [], f"{self.call} returned {self.result}, but {why}"
        return self._commit(model, self.entry) if expected else ([model], "")

    def _update(self, model: Model) -> tuple[list[Model], str]:
        """``update_row``, or ``update_row_at_next_version`` (no version token: ``self.version`` is None)."""
        assert self.entry is not None
        current = model.rows.get(self.entry.silo_address)
        if self.version is not None and not model.version_matches(self.version):
            expected, why = False, f"its version etag {self.version.etag!r} is not the current one"
        elif model.version is None:
            expected, why = False, "the cluster has no version row"
        elif current is None:
            expected, why = False, f"row {self.entry.silo_address} does not exist"
        elif current[1] != self.etag:
            expected, why = False, f"its row etag {self.etag!r} is not the row's current one ({current[1]!r})"
        else:
            expected, why = True, "its row and version etags are current"
        if expected and self.version is not None and not _is_next(self.version, model):
            return [], _reused_version(self.version, model)
        if self._succeeded() is not expected:
            return [], f"{self.call} returned {self.result}, but {why}"
        if not expected:
            return [model], ""
        assert current is not None
        alive = max(current[0].i_am_alive_time, self.entry.i_am_alive_time)
        return self._commit(model, self.entry.replace(i_am_alive_time=alive))

    def _update_rows(self, model: Model) -> tuple[list[Model], str]:
        assert self.version is not None
        current = [model.rows.get(entry.silo_address) for entry, _ in self.updates]
        expected, why = True, "its version etag and every row etag are current"
        if not model.version_matches(self.version):
            expected, why = False, f"its version etag {self.version.etag!r} is not the current one"
        for (entry, etag), row in zip(self.updates, current, strict=True):
            if not expected:
                break
            if row is None:
                expected, why = False, f"row {entry.silo_address} does not exist"
            elif row[1] != etag:
                expected, why = (
                    False,
                    f"row {entry.silo_address}'s etag {etag!r} is not the current one ({row[1]!r})",
                )
        if expected and not _is_next(self.version, model):
            return [], _reused_version(self.version, model)
        if self._succeeded() is not expected:
            return [], f"{self.call} returned {self.result}, but {why}"
        if not expected:
            return [model], ""
        written = []
        for (entry, _), row in zip(self.updates, current, strict=True):
            assert row is not None
            written.append(entry.replace(i_am_alive_time=max(row[0].i_am_alive_time, entry.i_am_alive_time)))
        return self._commit(model, *written)

    def _cleanup(self, model: Model) -> tuple[list[Model], str]:
        assert self.when is not None
        defunct = [
            address
            for address, (entry, _) in model.rows.items()
            if entry.status is SiloStatus.DEAD and entry.last_activity < self.when
        ]
        if self.result != len(defunct):
            return [], f"cleanup reported {self.result} removed rows, the reference removes {len(defunct)}"
        return [replace(model, rows={a: row for a, row in model.rows.items() if a not in defunct})], ""


def _learn_committed(
    model: Model, written: CommittedWrite, given: tuple[MembershipEntry, ...]
) -> tuple[Model | None, str]:
    """Match what a ``*_with_etags`` write returned against the model just after it, learning its
    fresh etags (they must be new, and later reads must return them)."""
    assert model.version is not None
    if written.version.version != model.version[0]:
        return None, f"the write returned version {written.version.version}, the reference {model.version[0]}"
    returned = tuple(entry for entry, _ in written.rows)
    if returned != given:
        return None, f"the write returned the rows {returned}, but was given {given} (as given, in that order)"
    learnt, why = model.bind(VERSION_KEY, model.version[1], written.version.etag)
    if learnt is None:
        return None, why
    learnt = learnt.with_version(written.version.etag)
    for entry, etag in written.rows:
        address = entry.silo_address
        bound, why = learnt.bind(f"row {address}", learnt.rows[address][1], etag)
        if bound is None:
            return None, why
        learnt = bound.with_row_etag(address, etag)
    return learnt, ""


def _observe_version(model: Model, version: TableVersion) -> tuple[Model | None, str]:
    """Match a ``read_version`` against the model, learning a fresh version etag."""
    if model.version is None:
        if version != UNINITIALIZED_VERSION:
            return None, f"the cluster has no version row, yet read_version returned {version}"
        return model, ""
    if version.version != model.version[0]:
        return None, f"read_version says version {version.version}, the reference {model.version[0]}"
    current, why = model.bind(VERSION_KEY, model.version[1], version.etag)
    if current is None:
        return None, why
    return (current.with_version(version.etag) if isinstance(model.version[1], Fresh) else current), ""


def _is_next(version: TableVersion, model: Model) -> bool:
    return model.version is not None and version.version == model.version[0] + 1


def _reused_version(version: TableVersion, model: Model) -> str:
    assert model.version is not None
    return (
        f"the version etag {version.etag!r} was read at version {version.version - 1}, but the table is at "
        f"version {model.version[0]} with the same etag: an etag was reused"
    )


def _heartbeat(model: Model, address: SiloAddress | None, when: datetime | None) -> Model:
    assert address is not None
    assert when is not None
    current = model.rows.get(address)
    if current is None or when <= current[0].i_am_alive_time:
        return model
    return replace(model, rows={**model.rows, address: (current[0].replace(i_am_alive_time=when), current[1])})


def _describe_result(result: object) -> str:
    if isinstance(result, MembershipTableData):
        rows = ", ".join(
            f"{entry.silo_address} {entry.status.name} {entry.silo_name} alive={entry.i_am_alive_time:%H:%M:%S} "
            f"etag={etag!r}"
            for entry, etag in result.rows
        )
        return f"v{result.version.version} etag {result.version.etag!r} [{rows}]"
    if isinstance(result, CommittedWrite):
        rows = ", ".join(f"{entry.silo_address} etag={etag!r}" for entry, etag in result.rows)
        return f"committed v{result.version.version} etag {result.version.etag!r} [{rows}]"
    return repr(result)


@dataclass
class Linearization:
    """The outcome of ``linearize``: the model after the events, or why no order explains them."""

    model: Model | None
    why: str = ""
    """For a failure: the call that could not be explained in the longest order tried, and why."""


def linearize(model: Model, threads: Sequence[Sequence[Event]]) -> Linearization:
    """Find an order of the events (each thread's in program order, respecting real time) that
    the model explains; return the model after it, or the deepest reason none does."""
    total = sum(len(events) for events in threads)
    deepest: list[tuple[int, str]] = [(-1, "")]

    def search(current: Model, positions: tuple[int, ...], order: tuple[Event, ...]) -> Model | None:
        if len(order) == total:
            return current
        pending = [event for events, at in zip(threads, positions, strict=True) for event in events[at:]]
        first_end = min(event.end for event in pending)
        for index, (events, at) in enumerate(zip(threads, positions, strict=True)):
            if at == len(events):
                continue
            event = events[at]
            if event.start > first_end:
                continue  # another pending call returned before this one started: it goes first
            outcomes, why = event.apply(current)
            if not outcomes and len(order) > deepest[0][0]:
                after = "; ".join(f"thread {done.thread} {done.kind}" for done in order) or "nothing"
                deepest[0] = (len(order), f"after {after}: thread {event.thread} {event.kind}: {why}")
            advanced = (*positions[:index], at + 1, *positions[index + 1 :])
            for outcome in outcomes:
                found = search(outcome, advanced, (*order, event))
                if found is not None:
                    return found
        return None

    found = search(model, tuple(0 for _ in threads), ())
    return Linearization(found, "" if found is not None else deepest[0][1])


# --- running a program against a backend --------------------------------------------------------


class _Reads:
    """Every snapshot read so far, to pick current and stale tokens from."""

    def __init__(self) -> None:
        self.all: list[MembershipTableData] = []
        self.versions: list[TableVersion] = []
        """The version of every read, ``read_version`` included."""

    def add(self, result: object) -> None:
        if isinstance(result, MembershipTableData):
            self.all.append(result)
            self.versions.append(result.version)
        elif isinstance(result, TableVersion):
            self.versions.append(result)

    def _pick(self, reads: Sequence[_T], token: Token) -> _T | None:
        if not reads:
            return None
        if token.kind == "current":
            return reads[-1]
        return reads[max(0, len(reads) - 2 - token.age)]

    def version(self, token: Token) -> TableVersion:
        latest = self.versions[-1] if self.versions else UNINITIALIZED_VERSION
        picked = self._pick(self.versions, token)
        if token.kind == "bogus" or picked is None:
            return TableVersion(latest.version + 1, BOGUS_ETAG)
        return picked.next()

    def etag(self, address: SiloAddress, token: Token) -> str:
        with_row = [data for data in self.all if data.get(address) is not None]
        picked = self._pick(with_row, token)
        if token.kind == "bogus" or picked is None:
            return BOGUS_ETAG
        row = picked.get(address)
        assert row is not None
        return row[1]


def _timed(event: Event, call: Callable[[], object]) -> Event:
    event.start = time.monotonic()
    try:
        event.result = call()
    except TableUnavailableError as exc:
        event.error = exc
    event.end = time.monotonic()
    return event


def _run_op(table: MembershipTable, thread: int, op: Op, reads: _Reads, exact: bool) -> list[Event]:
    """Run one operation (tokens resolved from ``reads`` beforehand, except a read-modify-write's)."""
    if isinstance(op, ReadAll):
        return [_timed(Event(thread, "read_all", exact=exact), table.read_all)]
    if isinstance(op, ReadRow):
        address = slot_address(op.slot)
        return [_timed(Event(thread, "read_row", address=address, exact=exact), lambda: table.read_row(address))]
    if isinstance(op, ReadVersion):
        return [_timed(Event(thread, "read_version"), table.read_version)]
    if isinstance(op, UpdateRows):
        version = reads.version(op.version)
        updates = tuple((row.entry(), reads.etag(slot_address(row.slot), token)) for row, token in op.rows)
        event = Event(thread, "update_rows", updates=updates, version=version)
        return [_timed(event, lambda: table.update_rows(updates, version))]
    if isinstance(op, ReadModifyWriteRows):
        read = _timed(Event(thread, "read_all", exact=exact), table.read_all)
        if not isinstance(read.result, MembershipTableData):
            return [read]
        data = read.result
        present = [row for row in op.rows if data.get(slot_address(row.slot)) is not None] or op.rows
        updates = tuple(
            (row.entry(), found[1] if (found := data.get(slot_address(row.slot))) else BOGUS_ETAG) for row in present
        )
        event = Event(thread, "update_rows", updates=updates, version=data.version.next(), with_etags=True)
        return [read, _timed(event, lambda: table.update_rows_with_etags(updates, data.version.next()))]
    if isinstance(op, Heartbeat):
        address, when = slot_address(op.slot), T0 + timedelta(seconds=op.seconds)
        event = Event(thread, "heartbeat", address=address, when=when)
        return [_timed(event, lambda: table.update_i_am_alive(address, when))]
    if isinstance(op, Insert):
        entry, version = op.row.entry(), reads.version(op.version)
        event = Event(thread, "insert", entry=entry, version=version, with_etags=True)
        return [_timed(event, lambda: table.insert_row_with_etags(entry, version))]
    if isinstance(op, InsertAtNextVersion):
        entry = op.row.entry()
        event = Event(thread, "insert_next", entry=entry, with_etags=True)
        return [_timed(event, lambda: table.insert_row_at_next_version(entry))]
    if isinstance(op, UpdateAtNextVersion):
        entry = op.row.entry()
        etag = reads.etag(entry.silo_address, op.etag)
        event = Event(thread, "update_next", entry=entry, etag=etag, with_etags=True)
        return [_timed(event, lambda: table.update_row_at_next_version(entry, etag))]
    if isinstance(op, Update):
        entry, version = op.row.entry(), reads.version(op.version)
        etag = reads.etag(entry.silo_address, op.etag)
        event = Event(thread, "update", entry=entry, etag=etag, version=version)
        return [_timed(event, lambda: table.update_row(entry, etag, version))]
    if isinstance(op, ReadModifyWrite):
        entry = op.row.entry()
        read = _timed(
            Event(thread, "read_row", address=entry.silo_address, exact=exact),
            lambda: table.read_row(entry.silo_address),
        )
        if not isinstance(read.result, MembershipTableData):
            return [read]
        row = read.result.get(entry.silo_address)
        etag, version = (row[1] if row else BOGUS_ETAG), read.result.version.next()
        event = Event(thread, "update", entry=entry, etag=etag, version=version)
        return [read, _timed(event, lambda: table.update_row(entry, etag, version))]
    if isinstance(op, Cleanup):
        before = T0 + timedelta(days=op.days)
        return [_timed(Event(thread, "cleanup", when=before), lambda: table.cleanup_defunct_entries(before))]
    deleted = _timed(Event(thread, "delete"), table.delete_cluster_entries)
    return [deleted, _timed(Event(thread, "initialize"), table.initialize)]


class _Handles:
    """One cluster for a whole property run: an observer handle and one handle per client thread.

    Opening handles is slow on some stores (a boto3 client, a ZooKeeper session), so they
    are opened once and the cluster is emptied (``delete_cluster_entries``) before each program.
    """

    def __init__(self, open_cluster: OpenCluster) -> None:
        self.cluster_id = new_cluster_id()
        self.open_cluster = open_cluster
        self.tables: list[MembershipTable] = []

    def get(self, index: int) -> MembershipTable:
        """Handle ``index``: 0 is the observer's (and the sequential steps'), 1.. the client threads'."""
        while len(self.tables) <= index:
            self.tables.append(self.open_cluster(self.cluster_id))
        return self.tables[index]

    def close(self) -> None:
        for table in self.tables:
            table.close()


class _Cluster:
    """One program's run: its reads, the reference model and a log of every call."""

    def __init__(self, handles: _Handles, pool: ThreadPoolExecutor) -> None:
        self.handles = handles
        self.observer = handles.get(0)
        self.pool = pool
        self.reads = _Reads()
        self.model = Model()
        self.log: list[str] = []

    def start(self) -> None:
        self.observer.initialize(try_init_version=False)  # the store's schema or table, if it has none yet
        self.observer.delete_cluster_entries()  # a previous program's rows and version
        self.check([[_timed(Event(0, "initialize"), self.observer.initialize), self.observe()]], "initialize()")

    def observe(self) -> Event:
        """A full read after the step: it pins down which order of the step's calls happened."""
        return _timed(Event(0, "read_all"), self.observer.read_all)

    def run(self, step: Step) -> None:
        if len(step) == 1:
            events = [event for op in step[0] for event in _run_op(self.observer, 0, op, self.reads, exact=True)]
            self.check([[*events, self.observe()]], f"step {step}, then read_all()")
        else:
            threads = self._concurrently(step)
            self.check([*threads, [self.observe()]], f"concurrent step {step}, then read_all()")

    def _concurrently(self, step: Step) -> list[list[Event]]:
        tables = [self.handles.get(index + 1) for index in range(len(step))]
        barrier = threading.Barrier(len(step))

        def run(index: int) -> list[Event]:
            barrier.wait()
            return [event for op in step[index] for event in _run_op(tables[index], index + 1, op, self.reads, False)]

        return list(self.pool.map(run, range(len(step))))

    def check(self, threads: list[list[Event]], what: str) -> None:
        events = [event for thread in threads for event in thread]
        started = min(event.start for event in events)
        self.log.append(what + "".join(f"\n      {event.describe(started)}" for event in events))
        explained = linearize(self.model, threads)
        for event in events:
            self.reads.add(event.result)
        if explained.model is not None:
            self.model = explained.model
            return
        raise ConformanceError(
            f"{what}: no order of its calls is explained by the contract; {explained.why}"
            + f"\n  reference before the step: {self.model.describe()}"
            + "\n  calls:\n    "
            + "\n    ".join(event.describe(started) for event in events)
            + "\n  program so far:\n    "
            + "\n    ".join(self.log)
        )


class _KeyedDatabase(ExampleDatabase):
    """A view of another example database whose keys carry a prefix (one backend's examples)."""

    def __init__(self, inner: ExampleDatabase, prefix: str) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix.encode() + b"\0"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterator[bytes]:
        yield from self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def check_linearizable_writes(
    open_cluster: OpenCluster,
    *,
    name: str = "",
    settings: hypothesis_settings | None = None,
    removals: bool = True,
) -> None:
    """Run random programs against the backend and check each step against the reference model.

    Raises ``ConformanceError`` (for the smallest program hypothesis finds, unless the profile
    skips shrinking) if the backend breaks the contract. ``settings`` defaults to the active
    hypothesis profile; ``name`` separates this backend's stored examples from other
    backends' in the example database.
    ``removals=False`` leaves out cleanups and re-created clusters (stores that cannot
    delete rows).
    """
    base = settings if settings is not None else hypothesis_settings()
    database = _KeyedDatabase(base.database, name) if base.database is not None and name else base.database
    chosen = hypothesis_settings(
        base,
        database=database,
        deadline=None,
        suppress_health_check=[*base.suppress_health_check, HealthCheck.too_slow, HealthCheck.data_too_large],
    )

    handles = _Handles(open_cluster)
    with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="membership-property") as pool:

        @chosen
        @given(program=linearizable_writes_programs(removals=removals))
        def conditional_writes_are_linearizable(program: list[Step]) -> None:
            cluster = _Cluster(handles, pool)
            try:
                cluster.start()
                for prefix in PREFIX:
                    cluster.run((prefix,))
                for step in program:
                    cluster.run(step)
            except ConformanceError:
                raise  # its message lists the calls
            except Exception:
                note(f"cluster {handles.cluster_id}; calls so far:\n    " + "\n    ".join(cluster.log))
                raise

        try:
            conditional_writes_are_linearizable()
        finally:
            handles.close()


class PropertyCheck(Protocol):
    def __call__(self, open_cluster: OpenCluster, *, name: str = "") -> None: ...


PROPERTIES: tuple[PropertyCheck, ...] = (check_linearizable_writes,)


def run_properties(open_cluster: OpenCluster, *, name: str = "") -> None:
    """Run every property check (budget and example database from the active hypothesis profile)."""
    for check in PROPERTIES:
        check(open_cluster, name=name)
