"""Which versioned writes a death took: a log of the table's writes, kept by PostgreSQL triggers.

``install`` adds two ``AFTER`` triggers to a benchmark's PostgreSQL database: one logs every
update of the version row (the version it wrote), the other every row a write inserts or
changes (its silo, status and number of votes), each with the writing transaction's id and the
server's clock. A canonical write is one transaction (one statement on PostgreSQL), so rows and
version group by transaction into the writes the silos made, in order; a write that loses its
race rolls back and leaves nothing. Heartbeats (``update_i_am_alive``: no new etag, no version)
are not logged.

``removal`` then says, for one killed silo, which writes from the kill to its Dead row touched
its row (each suspicion vote, then the Dead write: the versions its removal took) and how many
versions the whole table moved meanwhile; ``removals`` does it for silos killed together, and
counts the versions that carried their Dead rows (several deaths in one version, or one each).

Installed only for the kill trials, after a scale run's join and steady window, so that those
are measured without it. Trigger statements are not top-level statements, so they do not count
in ``pg_stat_statements`` (its default ``track = top``): the statement counts are the silos' alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

LOG_TABLE = "bench_write_log"

INSTALL = (
    f"""CREATE TABLE IF NOT EXISTS {LOG_TABLE} (
        id bigserial PRIMARY KEY,
        txid bigint NOT NULL DEFAULT txid_current(),
        at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
        version bigint,
        silo text,
        status text,
        votes integer)""",
    f"""CREATE OR REPLACE FUNCTION bench_log_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {LOG_TABLE} (version) VALUES (NEW.version);
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION bench_log_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' AND NEW.etag = OLD.etag THEN
            RETURN NULL;  -- a heartbeat: no version, no new etag
        END IF;
        INSERT INTO {LOG_TABLE} (silo, status, votes) VALUES (
            NEW.address || ':' || NEW.port || '@' || NEW.generation,
            NEW.status,
            json_array_length(NEW.suspect_times::json));
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE TRIGGER bench_log_version AFTER UPDATE ON silo_membership_version
        FOR EACH ROW EXECUTE FUNCTION bench_log_version()""",
    """CREATE OR REPLACE TRIGGER bench_log_row AFTER INSERT OR UPDATE ON silo_membership
        FOR EACH ROW EXECUTE FUNCTION bench_log_row()""",
)
"""The log table and its triggers (IPv4 hosts: the silo is written as ``SiloAddress`` prints it)."""


class Connection(Protocol):
    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


@dataclass(frozen=True)
class RowWritten:
    """A row as one write left it: whose, its status, and how many suspicion votes it holds."""

    silo: str
    status: str
    votes: int


@dataclass(frozen=True)
class LoggedWrite:
    """One committed write: the version it wrote (None: no version bump) and the rows it wrote."""

    at: float
    """Server clock, Unix seconds (the benchmark's ``wall()`` on the same machine)."""
    version: int | None
    rows: tuple[RowWritten, ...]

    def row_of(self, silo: str) -> RowWritten | None:
        return next((row for row in self.rows if row.silo == silo), None)


def install(connection: Connection) -> None:
    """Create the log and its triggers in the connection's database (as a superuser)."""
    for statement in INSTALL:
        connection.execute(statement.encode())


def writes_since(connection: Connection, since: float) -> list[LoggedWrite]:
    """The committed writes logged from ``since`` (Unix seconds) on, in commit order of their first entry."""
    query = f"SELECT txid, at, version, silo, status, votes FROM {LOG_TABLE} WHERE at >= %s ORDER BY id"
    entries = connection.execute(query.encode(), (since,)).fetchall()
    writes = []
    for _, group in itertools.groupby(entries, key=lambda entry: entry[0]):
        lines = list(group)
        versions = [int(line[2]) for line in lines if line[2] is not None]
        rows = tuple(RowWritten(str(line[3]), str(line[4]), int(line[5])) for line in lines if line[3] is not None)
        writes.append(LoggedWrite(float(lines[0][1]), versions[-1] if versions else None, rows))
    return writes


def _dead_write(writes: Sequence[LoggedWrite], victim: str) -> int | None:
    """Index of the write that wrote ``victim`` Dead, if any."""
    return next(
        (i for i, write in enumerate(writes) if (row := write.row_of(victim)) is not None and row.status == "DEAD"),
        None,
    )


def _described(write: LoggedWrite, row: RowWritten, killed_at: float) -> dict[str, Any]:
    """One write of a victim's row: when (after the kill), its version, the row's status and votes,
    and how many rows the write carried."""
    return {
        "after_s": write.at - killed_at,
        "version": write.version,
        "status": row.status,
        "votes": row.votes,
        "rows": len(write.rows),
    }


def removal(writes: Sequence[LoggedWrite], victim: str, killed_at: float) -> dict[str, Any]:
    """From the kill (``writes`` since ``killed_at``) to ``victim``'s Dead row: the writes of its
    row (``versions``: votes and the Dead write, each a version), and all versions written in
    that span (``span_versions``, the Dead write's included); ``dead`` False if it is not Dead."""
    end = _dead_write(writes, victim)
    span = [write for write in writes[: (len(writes) if end is None else end + 1)] if write.at >= killed_at]
    own = [(write, row) for write in span if (row := write.row_of(victim)) is not None]
    return {
        "victim": victim,
        "dead": end is not None,
        "versions": len(own),
        "span_versions": sum(1 for write in span if write.version is not None),
        "dead_version": writes[end].version if end is not None else None,
        "writes": [_described(write, row, killed_at) for write, row in own],
    }


def removals(writes: Sequence[LoggedWrite], victims: Sequence[str], killed_at: float) -> dict[str, Any]:
    """``removal`` of each of ``victims`` killed together at ``killed_at``, and over all of them:
    the versions from the kill to the last Dead row, the versions that touched any victim, and
    how many versions carried their Dead rows (fewer than the victims: deaths written together)."""
    each = [removal(writes, victim, killed_at) for victim in victims]
    ends = [_dead_write(writes, victim) for victim in victims]
    last = max((end for end in ends if end is not None), default=len(writes) - 1)
    span = [write for write in writes[: last + 1] if write.at >= killed_at]
    wanted = set(victims)
    return {
        "victims": each,
        "all_dead": all(end is not None for end in ends),
        "span_versions": sum(1 for write in span if write.version is not None),
        "victim_versions": sum(1 for write in span if any(row.silo in wanted for row in write.rows)),
        "dead_write_versions": len({writes[end].version for end in ends if end is not None}),
        "versions_per_removal": sorted(entry["versions"] for entry in each),
    }
