"""What only the SQL backend promises: a schema people can query, clear errors, many processes."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from multiprocessing import get_context
from pathlib import Path

import pytest
import sqlalchemy as sa

from membership_tables import (
    UNINITIALIZED_VERSION,
    BackendNotInstalledError,
    InvalidEntryError,
    InvalidTableUriError,
    MembershipEntry,
    MembershipTable,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from membership_tables.sql.one_statement import READ_ALL, READ_ROWS_MAX
from membership_tables.sql.rows import RowParser
from membership_tables.sql.schema import time_to_db
from membership_tables.sql.statements import cluster_params
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from testbed.services.process import free_port, wait_until
from testbed.services.sql_server import ThrowawayServer
from tests.membership_tables.conftest import SERVERS
from tests.membership_tables.together import run_together

VOTER = SiloAddress("10.0.0.9", 9999, 5)


@pytest.fixture
def table(url: str) -> Iterator[MembershipTable]:
    with open_table(url, "cluster-a") as handle:
        handle.initialize()
        yield handle


def insert(table: MembershipTable, *entries: MembershipEntry) -> None:
    for entry in entries:
        assert table.insert_row(entry, table.read_all().version.next())


def rows(admin: sa.Engine, sql: str, **params: object) -> list[tuple[object, ...]]:
    with admin.connect() as connection:
        return [tuple(row) for row in connection.execute(sa.text(sql), params)]


def test_a_full_read_returns_the_rows_in_key_order_whatever_order_the_store_keeps(
    table: MembershipTable, admin: sa.Engine
) -> None:
    """``RowParser`` matches a full read with the last one position by position; PostgreSQL keeps
    rows in insertion order, moves a row with every heartbeat, and scans the heap rather than the
    key's index once a cluster's rows are most of the table (as here, with its index scans off)."""
    ports = [1004, 1000, 1003, 1001, 1002]
    insert(table, *(make_entry(port) for port in ports))
    for port in reversed(ports):
        table.update_i_am_alive(make_entry(port).silo_address, T0 + timedelta(seconds=5))
    with admin.connect() as connection:
        for scan in ("indexscan", "indexonlyscan", "bitmapscan") if admin.dialect.name == "postgresql" else ():
            connection.execute(sa.text(f"SET enable_{scan} = off"))
        lines = connection.execute(READ_ALL, cluster_params("cluster-a")).all()
    assert [line.port for line in lines] == sorted(ports)


def test_admins_read_plain_sql(table: MembershipTable, admin: sa.Engine) -> None:
    statuses = [SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING, SiloStatus.DEAD]
    insert(table, *(make_entry(1000 + i, status=status) for i, status in enumerate(statuses)))
    dead = make_entry(1004, status=SiloStatus.DEAD, suspect_times=((VOTER, T0 + timedelta(seconds=1)),))
    read = table.read_all()
    assert table.update_row(dead, read.rows[-1][1], read.version.next())

    live = rows(admin, "SELECT port, status FROM silo_membership_live WHERE cluster_id = 'cluster-a' ORDER BY port")
    assert live == [(1000, "JOINING"), (1001, "ACTIVE"), (1002, "SHUTTING_DOWN"), (1003, "STOPPING")]
    [(votes,)] = rows(admin, "SELECT suspect_times FROM silo_membership WHERE status = 'DEAD'")
    assert json.loads(str(votes)) == [{"by": str(VOTER), "at": "2026-01-02T03:04:06.123456+00:00"}]
    assert rows(admin, "SELECT version FROM silo_membership_version WHERE cluster_id = 'cluster-a'") == [(6,)]
    columns = {column["name"]: column["type"] for column in sa.inspect(admin).get_columns("silo_membership")}
    assert isinstance(columns["i_am_alive_time"], sa.DateTime)
    assert isinstance(columns["start_time"], sa.DateTime)


def test_properties_are_stored_sorted_and_each_change_is_written(table: MembershipTable, admin: sa.Engine) -> None:
    insert(table, make_entry(1000, properties={"zone": "b", "endpoint": "e"}))
    read = table.read_all()
    [(entry, etag)] = read.rows
    assert table.update_row(entry.replace(properties={"endpoint": "e", "zone": "c"}), etag, read.version.next())
    [(text,)] = rows(admin, "SELECT properties FROM silo_membership")
    assert str(text) == '{"endpoint": "e", "zone": "c"}'
    assert dict(table.read_all().rows[0][0].properties) == {"endpoint": "e", "zone": "c"}


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 6, 1, 12, 0, 0, 5, tzinfo=UTC),
        datetime(2026, 6, 1, 14, 0, 0, 5, tzinfo=timezone(timedelta(hours=2))),
    ],
    ids=["utc", "utc+2"],
)
def test_sqlite_stores_a_time_as_utc_text(when: datetime) -> None:
    assert time_to_db(when, "sqlite") == "2026-06-01 12:00:00.000005"


def test_a_check_constraint_refuses_an_unknown_status(table: MembershipTable, admin: sa.Engine) -> None:
    insert(table, make_entry())
    before = table.read_all()
    with pytest.raises(sa.exc.DBAPIError), admin.begin() as connection:
        connection.execute(sa.text("UPDATE silo_membership SET status = 'ZOMBIE'"))
    assert table.read_all() == before


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("suspect_times", "not json", "suspect_times is not valid JSON"),
        ("suspect_times", '[{"by": "nobody", "at": "2026-01-01T00:00:00+00:00"}]', "cannot parse silo address"),
        ("properties", '{"k": 1}', "properties must map str to str"),
    ],
)
def test_a_malformed_row_is_reported_and_left_alone(
    table: MembershipTable, admin: sa.Engine, column: str, value: str, message: str
) -> None:
    entry, other = make_entry(4242, status=SiloStatus.DEAD), make_entry(4343)
    insert(table, entry, other)
    with admin.begin() as connection:
        connection.execute(sa.text(f"UPDATE silo_membership SET {column} = :value WHERE port = 4242"), {"value": value})
    stored = rows(admin, "SELECT * FROM silo_membership")
    where = "silo_membership row (cluster_id='cluster-a', address='10.0.0.1', port=4242, generation=1)"
    for data, entries in ((table.read_all(), (other,)), (table.read_row(entry.silo_address), ())):
        assert data.entries == entries
        (malformed,) = data.malformed
        assert malformed.key == where
        assert message in malformed.reason
    # cleanup looks at the votes of old Dead rows: a row whose votes cannot be parsed is kept
    assert table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 0
    assert rows(admin, "SELECT * FROM silo_membership") == stored


def test_reads_parse_again_every_row_whose_stored_values_changed(table: MembershipTable, admin: sa.Engine) -> None:
    """Reads reuse the entries they parsed before, but never for a row that changed, even by hand."""
    entry = make_entry(4242)
    insert(table, entry, make_entry(4343))
    assert table.read_all().get(entry.silo_address) == table.read_all().get(entry.silo_address)
    with admin.begin() as connection:  # an admin's edit leaves the etag alone
        connection.execute(
            sa.text("UPDATE silo_membership SET silo_name = 'renamed', properties = :p WHERE port = 4242"),
            {"p": '{"k": "v"}'},
        )
    edited = entry.replace(silo_name="renamed", properties={"k": "v"})
    assert table.read_all().get(entry.silo_address) == (edited, table.read_all().rows[0][1])
    table.update_i_am_alive(entry.silo_address, T0 + timedelta(minutes=1))
    later = table.read_all()
    assert later.entries[0] == edited.replace(i_am_alive_time=T0 + timedelta(minutes=1))
    assert table.read_row(entry.silo_address).entries == (later.entries[0],)
    with admin.begin() as connection:
        connection.execute(sa.text("UPDATE silo_membership SET suspect_times = 'not json' WHERE port = 4242"))
    for _ in range(2):  # a malformed row is reported on every read
        (malformed,) = table.read_all().malformed
        assert "port=4242" in malformed.key
        assert "suspect_times is not valid JSON" in malformed.reason
    assert [e.silo_address.port for e in table.read_row(make_entry(4343).silo_address).entries] == [4343]


def test_reads_that_reuse_parsed_rows_match_a_fresh_handle(url: str, table: MembershipTable, admin: sa.Engine) -> None:
    """A few random changes at a time (joins anywhere in the address order, heartbeats,
    updates, hand edits, deletes, a silo replaced by another), made through another handle;
    then the long-lived handle, which reuses what it parsed, must read what a new one does."""
    chance = random.Random(11)
    ports = list(range(1000, 1060))
    chance.shuffle(ports)
    unused = iter(ports[10:])
    with open_table(url, "cluster-a") as writer:
        insert(writer, *(make_entry(port) for port in ports[:10]))
        for step in range(30):
            for _ in range(chance.randint(1, 3)):
                data = writer.read_all()
                entry, etag = chance.choice(data.rows)
                action = chance.choice(["join", "heartbeat", "update", "edit", "delete", "replace"])
                if action in ("join", "replace"):
                    insert(writer, make_entry(next(unused)))
                if action == "heartbeat":
                    writer.update_i_am_alive(entry.silo_address, T0 + timedelta(seconds=step))
                elif action == "update":
                    version = writer.read_all().version.next()
                    assert writer.update_row(entry.replace(role_name=f"r{step}"), etag, version)
                elif action == "edit":
                    with admin.begin() as connection:
                        connection.execute(
                            sa.text("UPDATE silo_membership SET host_name = :name WHERE port = :port"),
                            {"name": f"h{step}", "port": entry.silo_address.port},
                        )
                elif action in ("delete", "replace"):
                    with admin.begin() as connection:
                        connection.execute(
                            sa.text("DELETE FROM silo_membership WHERE port = :port"), {"port": entry.silo_address.port}
                        )
            with open_table(url, "cluster-a") as fresh:
                assert table.read_all() == fresh.read_all(), f"step {step}"
                silo = chance.choice(fresh.read_all().entries).silo_address
                assert table.read_row(silo) == fresh.read_row(silo), f"step {step}"


def stored_row(port: int, alive: str = "2026-01-01 00:00:00.000000", votes: str = "[]") -> tuple[object, ...]:
    """A row of silo 10.0.0.1:``port`` as the SQLite driver returns it (``ROW_COLUMNS``)."""
    start = "2026-01-01 00:00:00.000000"
    return ("10.0.0.1", port, 1, "s", "h", "ACTIVE", 0, "", 0, 0, start, votes, "{}", f"etag-{port}", alive)


def test_the_row_parser_sorts_rows_fetched_in_any_order() -> None:
    """Stores may return rows in any order (PostgreSQL: heap order); the address order of the
    last read is reused only while every position holds the same silo."""
    parser = RowParser("cluster-a")
    row = stored_row

    def bad(port: int, alive: str = "2026-01-01 00:00:00.000000") -> tuple[object, ...]:
        return row(port, alive, votes="not json")

    def ports(rows: list[tuple[object, ...]], version: int) -> list[int]:
        data = parser.table_data(TableVersion(version, f"v{version}"), rows, full=True)
        assert data == RowParser("cluster-a").table_data(data.version, rows, full=True)  # parsed from scratch
        malformed = [-int(row.key.split("port=")[1].split(",")[0]) for row in data.malformed]
        return [entry.silo_address.port for entry in data.entries] + malformed

    assert ports([row(4), row(2), row(3)], 1) == [2, 3, 4]
    assert ports([row(4), row(2, alive="2026-01-01 00:00:05.000000"), row(3)], 2) == [2, 3, 4]
    assert ports([row(1), row(2), row(3)], 3) == [1, 2, 3]  # same count, another silo at position 0
    assert ports([row(3), row(1)], 4) == [1, 3]
    # malformed rows are reported (negative here), never kept: the positions after one shift
    assert ports([row(3), bad(5), row(1)], 5) == [1, 3, -5]
    assert ports([row(3), bad(5, alive="2026-01-01 00:00:09.000000"), row(1)], 6) == [1, 3, -5]
    assert ports([bad(6), row(3), row(1), bad(5)], 7) == [1, 3, -5, -6]
    assert ports([row(3), row(5), row(1)], 8) == [1, 3, 5]  # repaired
    assert ports([row(3), row(5), row(1)], 8) == [1, 3, 5]


def test_rows_parsed_by_a_read_of_changes_are_reused_until_the_next_full_read() -> None:
    """Every silo of a join storm reads the same new rows, and co-hosted silos share the parser."""
    parser = RowParser("cluster-a")
    parser.table_data(TableVersion(1, "v1"), [stored_row(1)], full=True)
    (new,) = parser.table_data(TableVersion(2, "v2"), [stored_row(2)], full=False).entries
    (again,) = parser.table_data(TableVersion(2, "v2"), [stored_row(2)], full=False).entries
    assert again is new  # not parsed twice
    later = "2026-01-01 00:00:07.000000"
    (beat,) = parser.table_data(TableVersion(2, "v2"), [stored_row(2, alive=later)], full=False).entries
    assert beat == new.with_i_am_alive_time(datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC))
    full = parser.table_data(TableVersion(3, "v3"), [stored_row(1), stored_row(2)], full=True)
    assert full.entries[1] is new
    edited = parser.table_data(TableVersion(4, "v4"), [stored_row(2, votes="not json")], full=False)
    assert edited.entries == ()  # other stored values: parsed afresh
    assert len(edited.malformed) == 1


def test_read_rows_reports_a_malformed_row_and_reads_more_silos_than_one_statement_takes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'membership.db'}"
    with open_table(url, "cluster-a") as table:
        table.initialize()
        good, bad = make_entry(1001), make_entry(1002)
        insert(table, good, bad)
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text("UPDATE silo_membership SET suspect_times = 'not json' WHERE port = 1002"))
        engine.dispose()
        some = table.read_rows([good.silo_address, bad.silo_address])
        assert some.entries == table.read_row(good.silo_address).entries
        (malformed,) = some.malformed
        assert "port=1002" in malformed.key
        absent = [make_entry(2000 + index).silo_address for index in range(READ_ROWS_MAX)]
        many = table.read_rows([*absent, good.silo_address])  # one statement takes READ_ROWS_MAX
        assert many.entries == some.entries
        assert many.version == some.version == table.read_version()


@pytest.mark.parametrize("parsed_before", [False, True], ids=["new row", "heartbeat of a known row"])
def test_a_time_sqlite_cannot_parse_is_a_malformed_row(tmp_path: Path, parsed_before: bool) -> None:
    url = f"sqlite:///{tmp_path / 'membership.db'}"
    with open_table(url, "cluster-a") as table:
        table.initialize()
        insert(table, make_entry(4242))
        if parsed_before:  # the next read sees a known row whose heartbeat alone changed
            table.read_all()
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text("UPDATE silo_membership SET i_am_alive_time = 'yesterday'"))
        engine.dispose()
        for _ in range(2):
            data = table.read_all()
            assert data.rows == ()
            (malformed,) = data.malformed
            assert "port=4242" in malformed.key
            assert "i_am_alive_time must be a datetime, got str 'yesterday'" in malformed.reason


def test_a_database_without_the_schema_reads_as_uninitialized(url: str) -> None:
    with open_table(url, "cluster-a") as table:
        assert table.read_all().version == UNINITIALIZED_VERSION
        assert table.read_row(make_entry().silo_address).rows == ()
        assert not table.insert_row(make_entry(), UNINITIALIZED_VERSION.next())
        table.update_i_am_alive(make_entry().silo_address, T0)
        assert table.cleanup_defunct_entries(T0) == 0
        table.delete_cluster_entries()
        table.initialize(try_init_version=False)
        assert table.read_all().version == UNINITIALIZED_VERSION
        table.initialize()
        assert table.read_all().version.version == 0


def test_many_handles_initialize_one_database_at_once(url: str, admin: sa.Engine) -> None:
    handles = [open_table(url, "cluster-a") for _ in range(8)]
    errors = run_together([handle.initialize for handle in handles])
    versions = {handle.read_all().version for handle in handles}
    for handle in handles:
        handle.close()
    assert errors == []
    assert len(versions) == 1
    assert versions.pop().version == 0
    assert rows(admin, "SELECT COUNT(*) FROM silo_membership_version") == [(1,)]


def test_values_the_columns_cannot_hold_are_refused(table: MembershipTable) -> None:
    before = table.read_all()
    with pytest.raises(InvalidEntryError, match="silo_name is 256 characters long"):
        table.insert_row(make_entry(silo_name="x" * 256), before.version.next())
    assert table.read_all() == before


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("sqlite://", "in-memory SQLite database"),
        ("sqlite:///:memory:", "in-memory SQLite database"),
        ("postgresql+psycopg2://u@localhost/db", "unsupported driver 'psycopg2'.*postgresql\\+psycopg://"),
        ("mysql+mysqldb://u@localhost/db", "unsupported driver 'mysqldb'.*mysql\\+pymysql://"),
        ("mysql+pymysql://u:secret@localhost", "names no database"),
        ("postgresql+psycopg://u@localhost:port/db", "cannot parse SQL table URI"),
    ],
)
def test_bad_uris_say_what_to_do(uri: str, message: str) -> None:
    with pytest.raises(InvalidTableUriError, match=message) as caught:
        open_table(uri, "c1")
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg://"),
        ("postgres://u@h/db", "postgresql+psycopg://"),
        ("mysql://u@h/db", "mysql+pymysql://"),
        ("mariadb://u@h/db", "mariadb+pymysql://"),
        ("sqlite:///m.db", "sqlite+pysqlite:///"),
    ],
)
def test_a_uri_without_a_driver_gets_the_supported_one(uri: str, shown: str) -> None:
    with open_table(uri, "c1") as table:
        assert shown in repr(table)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pool": 3}, r"unknown SQL table options \['pool'\]"),
        ({"connect_timeout": "5"}, "must be a non-negative"),
        ({"network_timeout": 0}, "network_timeout must be a positive number"),
        ({"network_timeout": float("inf")}, "network_timeout must be a positive number"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTableUriError, match=message):
        open_table(f"sqlite:///{tmp_path / 'm.db'}", "c1", **options)


@pytest.mark.parametrize(
    ("uri", "driver", "extra"), [("postgresql://u@h/db", "psycopg", "postgres"), ("mysql://u@h/db", "pymysql", "mysql")]
)
def test_a_missing_driver_names_the_extra(uri: str, driver: str, extra: str) -> None:
    # a child interpreter in which the driver cannot be imported, as if it were not installed
    code = (
        f"import sys; sys.modules[{driver!r}] = None\n"
        "from membership_tables import open_table, BackendNotInstalledError\n"
        f"try: open_table({uri!r}, 'c1')\n"
        "except BackendNotInstalledError as exc: print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'silo-membership[{extra}]'" in result.stdout
    assert issubclass(BackendNotInstalledError, ImportError)


@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "mysql+pymysql"])
def test_an_unreachable_server_raises_table_unavailable(scheme: str) -> None:
    with open_table(f"{scheme}://user:secret@127.0.0.1:{free_port()}/db", "c1", connect_timeout=2) as table:
        for call in (table.read_all, table.initialize, lambda: table.insert_row(make_entry(), UNINITIALIZED_VERSION)):
            with pytest.raises(TableUnavailableError, match="is unavailable") as caught:
                call()
            assert caught.value.__cause__ is not None
            assert "secret" not in str(caught.value)


def test_an_unreachable_sqlite_file_raises_table_unavailable(tmp_path: Path) -> None:
    with open_table(f"sqlite:///{tmp_path / 'missing-dir' / 'm.db'}", "c1") as table:
        with pytest.raises(TableUnavailableError) as caught:
            table.initialize()
        assert caught.value.__cause__ is not None


@pytest.mark.slow
@pytest.mark.parametrize("server_fixture", SERVERS.values())
def test_a_handle_recovers_when_the_server_comes_back(request: pytest.FixtureRequest, server_fixture: str) -> None:
    server: ThrowawayServer = request.getfixturevalue(server_fixture)
    with open_table(server.url, f"restart-{uuid.uuid4().hex[:8]}") as table:
        table.initialize()
        insert(table, make_entry())
        before = table.read_all()
        server.stop()
        try:
            with pytest.raises(TableUnavailableError):
                table.read_all()
        finally:
            server.start()
        assert table.read_all() == before


LOCK_WAITS = {
    "postgresql": "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
    "mysql": "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
}


ROW_KEY = "cluster_id = :cluster AND address = :host AND port = :port AND generation = :generation"
"""A member row by its whole key (InnoDB locks every row a locking read or an UPDATE scans)."""


def row_key(cluster_id: str, silo: SiloAddress) -> dict[str, object]:
    return {"cluster": cluster_id, "host": silo.host, "port": silo.port, "generation": silo.generation}


@pytest.mark.slow
@pytest.mark.parametrize("server_fixture", SERVERS.values())
def test_a_deadlock_with_another_transaction_is_retried(request: pytest.FixtureRequest, server_fixture: str) -> None:
    """An admin transaction locks the second of two member rows a writer updates, then the first,
    which the writer holds (it updates its rows in key order, the version row last).

    The database aborts one of the two: PostgreSQL the writer (it waited first, so it detects
    the deadlock), InnoDB the writer too (it changed fewer rows than the admin).
    """
    server: ThrowawayServer = request.getfixturevalue(server_fixture)
    cluster_id = f"deadlock-{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server.url)
    lock_waits = LOCK_WAITS[admin.dialect.name]
    rename = f"UPDATE silo_membership SET silo_name = 'admin' WHERE {ROW_KEY}"
    with open_table(server.url, cluster_id) as table, admin.connect() as blocker, admin.connect() as observer:
        table.initialize()
        insert(table, *(make_entry(port) for port in range(1000, 1005)))
        read = table.read_all()
        (first, first_etag), (second, second_etag) = read.rows[:2]
        updates = [(first.replace(role_name="w"), first_etag), (second.replace(role_name="w"), second_etag)]
        results: list[bool] = []
        blocker.execute(sa.text(rename), row_key(cluster_id, second.silo_address))
        writer = threading.Thread(target=lambda: results.append(table.update_rows(updates, read.version.next())))
        writer.start()
        wait_until(lambda: observer.execute(sa.text(lock_waits)).scalar_one() > 0, 30, "the writer to wait for a lock")
        try:  # closes the cycle; the database aborts one of the two transactions
            blocker.execute(sa.text(rename), row_key(cluster_id, first.silo_address))
            blocker.commit()
        except sa.exc.DBAPIError:
            blocker.rollback()
        writer.join()
    admin.dispose()
    assert results == [True]


@pytest.mark.slow
def test_on_postgresql_a_writer_loses_at_once_while_another_holds_the_version_row(
    postgres_server: ThrowawayServer,
) -> None:
    """A writer holds the version row only between its last statement and COMMIT, so one that
    finds it held would wait only to lose: in a 1,000-silo join storm ~100 waited at a time."""
    cluster_id = f"nowait-{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_server.url)
    with open_table(postgres_server.url, cluster_id) as table, admin.connect() as holder:
        table.initialize()
        insert(table, make_entry(1000))
        read = table.read_all()
        [(entry, etag)] = read.rows
        holder.execute(
            sa.text("UPDATE silo_membership_version SET version = version WHERE cluster_id = :cluster"),
            {"cluster": cluster_id},
        )
        results: list[bool] = []
        writer = threading.Thread(
            target=lambda: results.append(table.update_row(entry.replace(role_name="w"), etag, read.version.next()))
        )
        writer.start()
        writer.join(timeout=20)
        holder.rollback()
        assert results == [False], "the writer waited for the version row"
        assert table.read_all() == read  # it changed nothing
        assert table.update_row(entry.replace(role_name="w"), etag, read.version.next())  # once free, it wins
    admin.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("server_fixture", SERVERS.values())
def test_a_writer_waiting_for_its_row_does_not_hold_up_writers_of_other_rows(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    """The version row, which every write locks, is locked last: a writer waiting for a member
    row (an admin's open transaction here; another writer of that row in a storm) holds nothing
    every other writer needs. It then loses the race: the version moved meanwhile."""
    server: ThrowawayServer = request.getfixturevalue(server_fixture)
    cluster_id = f"order-{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server.url)
    lock_waits = LOCK_WAITS[admin.dialect.name]
    with open_table(server.url, cluster_id) as table, admin.connect() as blocker, admin.connect() as observer:
        table.initialize()
        insert(table, make_entry(1000), make_entry(1001))
        read = table.read_all()
        (first, first_etag), (second, second_etag) = read.rows
        blocker.execute(
            sa.text(f"SELECT etag FROM silo_membership WHERE {ROW_KEY} FOR UPDATE"),
            row_key(cluster_id, first.silo_address),
        )
        waiting: list[bool] = []
        writer = threading.Thread(
            target=lambda: waiting.append(
                table.update_row(first.replace(role_name="w"), first_etag, read.version.next())
            )
        )
        writer.start()
        try:
            wait_until(lambda: observer.execute(sa.text(lock_waits)).scalar_one() > 0, 30, "the writer to wait")
            other: list[bool] = []
            free = threading.Thread(
                target=lambda: other.append(
                    table.update_row(second.replace(role_name="x"), second_etag, read.version.next())
                )
            )
            free.start()
            free.join(timeout=20)
            assert other == [True], "a writer of another row waited for the blocked writer"
        finally:
            blocker.rollback()
            writer.join()
    admin.dispose()
    assert waiting == [False]


def _join_and_count(url: str, index: int, updates: int) -> None:
    """One process: initialize, insert its own row, then bump a shared row ``updates`` times."""
    with open_table(url, "shared") as table:
        table.initialize()
        while not table.insert_row(make_entry(2000 + index), table.read_all().version.next()):
            pass
        shared = make_entry().silo_address
        done = 0
        while done < updates:
            data = table.read_row(shared)
            entry, etag = data.rows[0]
            properties = {**entry.properties, f"p{index}-{done}": "x"}
            done += table.update_row(entry.replace(properties=properties), etag, data.version.next())


@pytest.mark.slow
def test_several_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'membership.db'}"
    with open_table(url, "shared") as table:
        table.initialize()
        insert(table, make_entry())
    processes, updates = 4, 10
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        for result in [pool.submit(_join_and_count, url, index, updates) for index in range(processes)]:
            result.result()
    with open_table(url, "shared") as table:
        data = table.read_all()
    assert data.version.version == 1 + processes + processes * updates
    assert len(data.rows) == 1 + processes
    assert len(data.get(make_entry().silo_address)[0].properties) == processes * updates  # type: ignore[index]


DOC_TAGS = {"every database": None, "SQLite": "sqlite", "PostgreSQL": "postgresql", "MySQL / MariaDB": "mysql"}


def doc_blocks(dialect: str) -> list[str]:
    """The SQL blocks of docs/sql.md for ``dialect``: each opens with a comment naming its databases."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()
    blocks = re.findall(r"```sql\n-- ([^\n]+)\n(.*?)```", text, flags=re.DOTALL)
    assert {tag for tag, _ in blocks} <= set(DOC_TAGS), "tag each SQL block in docs/sql.md with its databases"
    return [sql for tag, sql in blocks if DOC_TAGS[tag] in (None, dialect)]


def test_the_admin_queries_in_the_docs_work(url: str, admin: sa.Engine) -> None:
    with open_table(url, "prod") as table:
        table.initialize()
        now = datetime.now(UTC)
        alive = make_entry(11111, host="10.0.0.5", start_time=now - timedelta(minutes=5), i_am_alive_time=now)
        dead = make_entry(22222, status=SiloStatus.DEAD, suspect_times=((alive.silo_address, now),))
        insert(table, alive, dead)
        blocks = doc_blocks("mysql" if admin.dialect.name == "mariadb" else admin.dialect.name)
        assert len(blocks) >= 7
        for block in blocks:
            statements = [s.strip() for s in block.split(";") if s.strip() not in ("", "BEGIN", "COMMIT")]
            with admin.begin() as connection:
                for statement in statements:
                    result = connection.execute(sa.text(statement))
                    if statement.startswith("SELECT"):
                        assert result.all(), f"the documented query returned nothing:\n{statement}"
        assert table.read_all().rows == ()
