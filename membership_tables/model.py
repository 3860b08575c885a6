"""The membership data model: immutable values shared by every backend and the runtime.

All types are frozen. Datetimes are always timezone-aware; values given in another
timezone are normalised to UTC so rows compare equal whatever store they came from.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from membership_tables.errors import InvalidClusterIdError, InvalidEntryError

_ADDRESS_RE = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\[\]\s]+)):(?P<port>\d+)@(?P<gen>\d+)$")
_CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_PORT = 65535


def validate_cluster_id(cluster_id: object) -> str:
    """Return ``cluster_id`` if every backend can store it, else raise a clear error.

    A cluster id is 1-128 characters of letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter or digit: it becomes part of ZooKeeper paths, Consul keys
    and SQL/DynamoDB keys, so the same id must be valid everywhere.
    """
    if not isinstance(cluster_id, str):
        raise InvalidClusterIdError(
            f"cluster id must be a str, got {type(cluster_id).__name__} {cluster_id!r}; "
            "pass the cluster's name, e.g. 'prod-cluster'"
        )
    if not _CLUSTER_ID_RE.match(cluster_id):
        raise InvalidClusterIdError(
            f"invalid cluster id {cluster_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return cluster_id


def ensure_utc(value: object, what: str) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive datetimes are refused.

    A naive datetime is ambiguous (local time? UTC?) and silos on different hosts would
    disagree about vote expiry, so the model refuses it instead of guessing.
    """
    if not isinstance(value, datetime):
        raise InvalidEntryError(f"{what} must be a datetime, got {type(value).__name__} {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidEntryError(
            f"{what} is a naive datetime ({value.isoformat()}); "
            "pass a timezone-aware one, e.g. datetime.now(timezone.utc)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00+01:00, which is before datetime.min in UTC
        raise InvalidEntryError(f"{what} ({value.isoformat()}) is out of range in UTC") from exc


@functools.total_ordering
@dataclass(frozen=True)
class SiloAddress:
    """Identity of one silo process: ``host:port@generation``.

    ``generation`` is the process start time (epoch milliseconds by convention), so a
    restarted process on the same endpoint is a new identity whose generation is larger
    than its predecessor's.
    """

    host: str
    port: int
    generation: int
    sort_key: tuple[str, int, int] = field(init=False, repr=False, compare=False)
    """``(host, port, generation)``: addresses sort by it (``sorted(..., key=...)`` compares it in C).
    The dataclass's generated ordering built two tuples per comparison, 5% of a 2,000-silo
    host's samples in full reads and view changes."""
    _hash: int = field(init=False, repr=False, compare=False)
    """``hash(sort_key)``, computed once: addresses key every dict and set of a silo's view, and a
    1,000-silo join storm hashed them millions of times a second. Never pickled
    (``__reduce__``): ``str`` hashes differ between processes."""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host or any(c in self.host for c in "@ \t\n"):
            raise InvalidEntryError(f"silo host must be a non-empty name without '@' or spaces, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port <= MAX_PORT:
            raise InvalidEntryError(f"silo port must be an int in 1..{MAX_PORT}, got {self.port!r}")
        if isinstance(self.generation, bool) or not isinstance(self.generation, int) or self.generation < 0:
            raise InvalidEntryError(f"silo generation must be a non-negative int, got {self.generation!r}")
        key = (self.host, self.port, self.generation)
        object.__setattr__(self, "sort_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SiloAddress):
            return NotImplemented
        return self.sort_key < other.sort_key

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, SiloAddress):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.generation == other.generation
            and self.port == other.port
            and self.host == other.host
        )

    def __reduce__(self) -> tuple[type[SiloAddress], tuple[str, int, int]]:
        return (self.__class__, (self.host, self.port, self.generation))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}@{self.generation}"

    @property
    def endpoint(self) -> str:
        """``host:port``, the gRPC target of this silo (IPv6 hosts in brackets)."""
        return str(self).rsplit("@", 1)[0]

    @classmethod
    def parse(cls, text: str) -> SiloAddress:
        """Parse ``host:port@generation`` (IPv6 hosts in brackets: ``[::1]:11111@17``)."""
        match = _ADDRESS_RE.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidEntryError(
                f"cannot parse silo address {text!r}: expected 'host:port@generation', "
                "e.g. '10.0.0.5:11111@1700000000000'"
            )
        host = match.group("v6") or match.group("host")
        return cls(host, int(match.group("port")), int(match.group("gen")))

    def is_predecessor_of(self, other: SiloAddress) -> bool:
        """True if ``other`` is a later incarnation of the same endpoint."""
        return self.host == other.host and self.port == other.port and self.generation < other.generation


class SiloStatus(enum.IntEnum):
    """Lifecycle state of a silo. ``DEAD`` is terminal: a dead silo never comes back."""

    NONE = 0
    CREATED = 1
    JOINING = 2
    ACTIVE = 3
    SHUTTING_DOWN = 4
    STOPPING = 5
    DEAD = 6

    @property
    def is_terminating(self) -> bool:
        return self in (SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING, SiloStatus.DEAD)


Vote = tuple[SiloAddress, datetime]
"""A suspicion vote: who suspected the silo, and when (UTC)."""


def _freeze_properties(value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidEntryError(f"properties must be a mapping of str to str, got {type(value).__name__}")
    frozen: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidEntryError(f"properties must map str to str, got {key!r}: {item!r}")
        frozen[key] = item
    return MappingProxyType(frozen)


def _freeze_votes(value: object) -> tuple[Vote, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidEntryError(f"suspect_times must be a sequence of (SiloAddress, datetime), got {value!r}")
    votes: list[Vote] = []
    for vote in value:
        if not (isinstance(vote, tuple) and len(vote) == 2 and isinstance(vote[0], SiloAddress)):
            raise InvalidEntryError(f"each suspicion vote must be (SiloAddress, datetime), got {vote!r}")
        votes.append((vote[0], ensure_utc(vote[1], f"suspicion vote time of {vote[0]}")))
    return tuple(votes)


@dataclass(frozen=True)
class MembershipEntry:
    """One silo's row in the membership table.

    Everything but ``i_am_alive_time`` is canonical: it changes only through a
    versioned ``update_row``. ``i_am_alive_time`` is the silo's heartbeat, written by a
    blind ``update_i_am_alive`` that neither bumps the version nor the row etag.
    """

    silo_address: SiloAddress
    status: SiloStatus
    start_time: datetime
    i_am_alive_time: datetime
    host_name: str = ""
    silo_name: str = ""
    role_name: str = ""
    proxy_port: int = 0
    """Gateway (client) port; 0 means the silo is not a gateway."""
    update_zone: int = 0
    fault_zone: int = 0
    suspect_times: tuple[Vote, ...] = ()
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.silo_address, SiloAddress):
            raise InvalidEntryError(f"silo_address must be a SiloAddress, got {self.silo_address!r}")
        try:
            status = SiloStatus(self.status)
        except ValueError as exc:
            raise InvalidEntryError(f"unknown silo status {self.status!r}; use a SiloStatus member") from exc
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "start_time", ensure_utc(self.start_time, "start_time"))
        object.__setattr__(self, "i_am_alive_time", ensure_utc(self.i_am_alive_time, "i_am_alive_time"))
        for name in ("host_name", "silo_name", "role_name"):
            if not isinstance(getattr(self, name), str):
                raise InvalidEntryError(f"{name} must be a str, got {getattr(self, name)!r}")
        for name in ("proxy_port", "update_zone", "fault_zone"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidEntryError(f"{name} must be a non-negative int, got {value!r}")
        if self.proxy_port > MAX_PORT:
            raise InvalidEntryError(f"proxy_port must be at most {MAX_PORT}, got {self.proxy_port}")
        object.__setattr__(self, "suspect_times", _freeze_votes(self.suspect_times))
        object.__setattr__(self, "properties", _freeze_properties(self.properties))

    def __getstate__(self) -> dict[str, object]:
        # The read-only properties view cannot be pickled; ship a plain dict instead.
        return {**self.__dict__, "properties": dict(self.properties)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, properties=_freeze_properties(state["properties"]))

    def replace(self, **changes: object) -> MembershipEntry:
        """A copy with ``changes`` applied (validated like a new entry)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_i_am_alive_time(self, when: object) -> MembershipEntry:
        """A copy with another heartbeat time: only ``when`` is validated, the rest already was.

        What a store needs when it reads back a row it parsed before whose heartbeat alone
        moved (the commonest change); ``replace`` would validate every field again.
        """
        copy = object.__new__(MembershipEntry)
        copy.__dict__.update(self.__dict__, i_am_alive_time=ensure_utc(when, "i_am_alive_time"))
        return copy

    @property
    def last_activity(self) -> datetime:
        """Latest of start time, IAmAlive time and vote times: what cleanup ages rows by."""
        return max([self.start_time, self.i_am_alive_time, *(when for _, when in self.suspect_times)])


@dataclass(frozen=True, order=True)
class TableVersion:
    """The table's version: a number that every write bumps by one, and an opaque etag.

    A write names the version it read (its etag) and the number it will set
    (``read.version.next()``); it succeeds only if nobody wrote since.
    """

    version: int
    etag: str

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise InvalidEntryError(f"table version must be a non-negative int, got {self.version!r}")
        if not isinstance(self.etag, str):
            raise InvalidEntryError(f"table version etag must be a str, got {self.etag!r}")

    def next(self) -> TableVersion:
        """The version a write based on this read sets: same etag, number + 1."""
        return TableVersion(self.version + 1, self.etag)


@dataclass(frozen=True)
class CommittedWrite:
    """What a successful canonical write left in the store.

    The writer can build the next snapshot from it without reading the table again, and
    gossip the change with the etags a ``read_all`` right after the write returns.
    """

    version: TableVersion
    """The version row after the write: the number written and its new etag."""
    rows: tuple[tuple[MembershipEntry, str], ...]
    """Each written row as given, with its new row etag, in the order given.

    The entry is the one the caller wrote: the stored IAmAlive time may be newer (it never
    goes backwards), and only full reads show heartbeats.
    """


def _row_address(row: tuple[MembershipEntry, str]) -> tuple[str, int, int]:
    return row[0].silo_address.sort_key


@dataclass(frozen=True, order=True)
class MalformedRow:
    """A stored row that a read could not parse, and so left out of ``MembershipTableData.rows``.

    ``key`` names the row the way its store does (a SQL key, a znode path, a Consul key, a
    DynamoDB key), so an admin can find it; ``reason`` says what is wrong with it. A
    corrupted or hostile row must not stop every silo's reads (and with them failure
    detection): the stores skip it and report it here instead.
    """

    key: str
    reason: str

    def __post_init__(self) -> None:
        for name in ("key", "reason"):
            if not isinstance(getattr(self, name), str):
                raise InvalidEntryError(f"MalformedRow.{name} must be a str, got {getattr(self, name)!r}")

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}"


@dataclass(frozen=True)
class MembershipTableData:
    """One atomic read: rows with their etags, the version they belong to, and the rows it skipped.

    ``malformed`` lists the stored rows of the read that could not be parsed (sorted by key):
    they are in no ``rows`` entry, and a reader acts as if they were absent.
    """

    rows: tuple[tuple[MembershipEntry, str], ...]
    version: TableVersion
    malformed: tuple[MalformedRow, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(sorted(self.rows, key=_row_address)))
        object.__setattr__(self, "malformed", tuple(sorted(self.malformed)))

    @classmethod
    def of_sorted(
        cls,
        rows: tuple[tuple[MembershipEntry, str], ...],
        version: TableVersion,
        malformed: tuple[MalformedRow, ...] = (),
    ) -> MembershipTableData:
        """A snapshot of ``rows`` that are sorted by address already, without sorting them again.

        For a store that knows the order from its previous read (sorting compares addresses
        in Python, a tenth of the cost of fetching a row from SQLite).
        """
        data = object.__new__(cls)
        data.__dict__.update(rows=rows, version=version, malformed=tuple(sorted(malformed)))
        return data

    @classmethod
    def from_parsed(
        cls, parsed: Iterable[tuple[MembershipEntry, str] | MalformedRow], version: TableVersion
    ) -> MembershipTableData:
        """A snapshot of what a store's read parsed: the well-formed rows, reporting the malformed ones."""
        rows: list[tuple[MembershipEntry, str]] = []
        malformed: list[MalformedRow] = []
        for row in parsed:
            if isinstance(row, MalformedRow):
                malformed.append(row)
            else:
                rows.append(row)
        return cls(tuple(rows), version, tuple(malformed))

    def index_from(self, base: MembershipTableData, changed: Iterable[tuple[MembershipEntry, str]]) -> None:
        """Seed this read's row index (``get``) from ``base``'s, if built, with the ``changed`` rows
        put in: for a read that differs from ``base`` only in those (a delta applied to a view),
        a copy of a dict instead of hashing every address again (a silo of 2,000 did that for
        every change gossiped to it)."""
        index: dict[SiloAddress, tuple[MembershipEntry, str]] | None = base.__dict__.get("_index")
        if index is None:
            return
        index = dict(index)
        for row in changed:
            index[row[0].silo_address] = row
        self.__dict__["_index"] = index

    def get(self, silo_address: SiloAddress) -> tuple[MembershipEntry, str] | None:
        """The row of ``silo_address`` and its etag, or ``None`` if absent.

        By an index built on the first call (a silo looks rows up many times a second: a linear
        scan of a thousand rows per lookup was a large share of a big cluster's CPU).
        """
        index: dict[SiloAddress, tuple[MembershipEntry, str]] | None = self.__dict__.get("_index")
        if index is None:
            index = {}
            for row in self.rows:
                index.setdefault(row[0].silo_address, row)
            self.__dict__["_index"] = index  # a cache beside the frozen fields (not one of them)
        return index.get(silo_address)

    @functools.cached_property
    def entries(self) -> tuple[MembershipEntry, ...]:
        return tuple(entry for entry, _ in self.rows)
