"""``read_changes`` on SQL: the columns that say at which version a row was written, tables of an
older release upgraded (or refused), rows an older silo rewrote, writers at the next version.

The conformance suite (``test_sql_conformance.py``) checks what every backend promises; these
check what only the SQL table does, on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import functools
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from membership_tables import (
    AccessDeniedError,
    CommittedWrite,
    MembershipTable,
    SiloAddress,
    SiloStatus,
    open_table,
)
from membership_tables.sql.schema import (
    LIVE_VIEW,
    LIVE_VIEW_SELECT,
    MEMBERSHIP_TABLE,
    VERSION_TABLE,
    WRITTEN_COLUMNS,
    UtcDateTime,
)
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from testbed.services.process import wait_until
from testbed.services.sql_roles import PASSWORD, SqlServer, initialize_as_admin, role_database
from testbed.services.sql_server import ThrowawayServer
from tests.membership_tables.conftest import SERVERS
from tests.membership_tables.together import run_together

LOCK_WAITS = {
    "postgresql": "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
    "mysql": "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
}


def release_0_1_0_tables() -> tuple[sa.MetaData, sa.Table, sa.Table]:
    """The tables as release 0.1.0 created them, written out by hand: no ``written_version``, no
    ``written_etag``."""
    old = sa.MetaData()
    options = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
    versions = sa.Table(
        VERSION_TABLE,
        old,
        sa.Column("cluster_id", sa.String(128), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("etag", sa.String(64), nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        **options,
    )
    statuses = ", ".join(f"'{status.name}'" for status in SiloStatus)
    members = sa.Table(
        MEMBERSHIP_TABLE,
        old,
        sa.Column("cluster_id", sa.String(128), primary_key=True),
        sa.Column("address", sa.String(255), primary_key=True),
        sa.Column("port", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("generation", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("silo_name", sa.String(255), nullable=False),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("proxy_port", sa.Integer, nullable=False),
        sa.Column("role_name", sa.String(255), nullable=False),
        sa.Column("update_zone", sa.Integer, nullable=False),
        sa.Column("fault_zone", sa.Integer, nullable=False),
        sa.Column("start_time", UtcDateTime, nullable=False),
        sa.Column("i_am_alive_time", UtcDateTime, nullable=False),
        sa.Column("suspect_times", sa.Text, nullable=False),
        sa.Column("properties", sa.Text, nullable=False),
        sa.Column("etag", sa.String(64), nullable=False),
        sa.CheckConstraint(f"status IN ({statuses})", name="ck_silo_membership_status"),
        **options,
    )
    return old, versions, members


OLD_METADATA, OLD_VERSIONS, OLD_MEMBERS = release_0_1_0_tables()


def create_release_0_1_0_schema(url: str) -> None:
    """The schema ``silo table init`` of release 0.1.0 left at ``url``."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            OLD_METADATA.create_all(connection)
            invoker = "" if engine.dialect.name in ("sqlite", "postgresql") else "SQL SECURITY INVOKER "
            connection.exec_driver_sql(f"CREATE {invoker}VIEW {LIVE_VIEW} AS {LIVE_VIEW_SELECT}")
    finally:
        engine.dispose()


def old_silo_row(cluster_id: str, port: int, etag: str, **changes: object) -> dict[str, object]:
    """A row as a 0.1.0 silo writes it: every column it knows of, and a fresh etag."""
    now = datetime.now(UTC)
    return {
        "cluster_id": cluster_id,
        "address": "10.0.0.1",
        "port": port,
        "generation": 1,
        "silo_name": f"old-{port}",
        "host_name": "old-host",
        "status": "ACTIVE",
        "proxy_port": 0,
        "role_name": "",
        "update_zone": 0,
        "fault_zone": 0,
        "start_time": now,
        "i_am_alive_time": now,
        "suspect_times": "[]",
        "properties": "{}",
        "etag": etag,
        **changes,
    }


def bump_as_old_silo(connection: sa.Connection, cluster_id: str, etag: str) -> None:
    """The version's UPDATE of a 0.1.0 silo's write."""
    connection.execute(
        sa.update(OLD_VERSIONS)
        .where(OLD_VERSIONS.c.cluster_id == cluster_id)
        .values(version=OLD_VERSIONS.c.version + 1, etag=etag, updated_at=datetime.now(UTC))
    )


def ports(table: MembershipTable, since: int) -> list[int]:
    return sorted(entry.silo_address.port for entry in table.read_changes(since).entries)


def columns(engine: sa.Engine) -> dict[str, dict[str, object]]:
    return {column["name"]: dict(column) for column in sa.inspect(engine).get_columns(MEMBERSHIP_TABLE)}


def test_written_columns_record_each_write_and_are_left_alone_by_heartbeats(url: str, admin: sa.Engine) -> None:
    with open_table(url, "c") as table:
        table.initialize()
        first, second = make_entry(1001), make_entry(1002)
        joined = table.insert_row_at_next_version(first)  # 1
        assert joined is not None
        table.insert_row_with_etags(second, table.read_version().next())  # 2
        assert table.update_row_at_next_version(first.replace(silo_name="on"), joined.rows[0][1]) is not None  # 3
        stored = "SELECT port, written_version, written_etag, etag FROM silo_membership ORDER BY port"
        with admin.connect() as connection:
            before = [tuple(row) for row in connection.execute(sa.text(stored))]
        assert [(port, version) for port, version, _, _ in before] == [(1001, 3), (1002, 2)]
        assert all(written == etag for _, _, written, etag in before)
        table.update_i_am_alive(first.silo_address, T0 + timedelta(days=1))
        with admin.connect() as connection:
            assert [tuple(row) for row in connection.execute(sa.text(stored))] == before
        assert ports(table, 2) == [1001]
        assert ports(table, 3) == []
    # people see what the columns are for
    if admin.dialect.name != "sqlite":
        assert "membership write" in str(columns(admin)["written_version"]["comment"])
    with admin.connect() as connection:  # and the live view does not show them
        live = connection.execute(sa.text(f"SELECT * FROM {LIVE_VIEW}")).keys()
    assert not set(WRITTEN_COLUMNS) & set(live)


def test_a_table_of_release_0_1_0_gets_the_columns_at_initialize(url: str, admin: sa.Engine) -> None:
    create_release_0_1_0_schema(url)
    with admin.begin() as connection:  # a cluster that 0.1.0 silos run
        connection.execute(sa.insert(OLD_VERSIONS).values(cluster_id="c", version=1, etag="v1", updated_at=T0))
        connection.execute(sa.insert(OLD_MEMBERS).values(old_silo_row("c", 1000, "old-1")))
    assert not set(WRITTEN_COLUMNS) & set(columns(admin))
    with open_table(url, "c", read_only=True) as reader:  # not upgraded yet: read_changes reads every row
        assert ports(reader, 1) == [1000]
    with open_table(url, "c") as table:
        table.initialize()
        added = columns(admin)
        assert set(WRITTEN_COLUMNS) <= set(added)
        assert all(added[name]["nullable"] for name in WRITTEN_COLUMNS)
        if admin.dialect.name != "sqlite":
            assert "membership write" in str(added["written_version"]["comment"])
        table.initialize()  # again: nothing to add
        assert ports(table, 1) == [1000]  # written by 0.1.0: at an unknown version
        assert table.insert_row_at_next_version(make_entry(1001)) is not None  # 2
        read = table.read_all()
        assert table.insert_row(make_entry(1002), read.version.next())  # 3
        assert ports(table, 2) == [1000, 1002]
        assert ports(table, 1) == [1000, 1001, 1002]
        assert table.read_changes(3).version == table.read_all().version


def test_many_silos_starting_at_once_upgrade_a_table_of_release_0_1_0_once(url: str, admin: sa.Engine) -> None:
    create_release_0_1_0_schema(url)
    handles = [open_table(url, "c") for _ in range(6)]
    errors = run_together([handle.initialize for handle in handles])
    try:
        assert errors == []
        assert set(WRITTEN_COLUMNS) <= set(columns(admin))
        assert handles[0].insert_row_at_next_version(make_entry(1000)) is not None
        assert [ports(handle, 0) for handle in handles] == [[1000]] * len(handles)
    finally:
        for handle in handles:
            handle.close()


def test_a_row_rewritten_by_a_silo_of_release_0_1_0_is_read_as_changed_since_any_version(
    url: str, admin: sa.Engine
) -> None:
    """A 0.1.0 silo rewrites a row's columns and etag but not written_version: the etag then differs
    from written_etag, and the row is read as changed whatever the version asked about."""
    with open_table(url, "c") as table:
        table.initialize()
        for port in (1000, 1001, 1002):
            assert table.insert_row_at_next_version(make_entry(port)) is not None
        assert ports(table, 3) == []
        with admin.begin() as connection:  # the 0.1.0 silo's update of row 1001 at version 4
            connection.execute(
                sa.update(OLD_MEMBERS)
                .where(OLD_MEMBERS.c.cluster_id == "c", OLD_MEMBERS.c.port == 1001)
                .values(status="DEAD", etag="old-release-1")
            )
            bump_as_old_silo(connection, "c", "old-version-4")
        [(dead, etag)] = table.read_row(make_entry(1001).silo_address).rows
        assert (dead.status, etag) == (SiloStatus.DEAD, "old-release-1")
        for since in range(6):
            assert 1001 in ports(table, since), since
        assert ports(table, 4) == [1001]
        assert ports(table, 2) == [1001, 1002]
        read = table.read_all()  # a write of this release makes its version known again
        assert table.update_row(dead.replace(silo_name="again"), etag, read.version.next())  # 5
        assert ports(table, 5) == []
        assert ports(table, 4) == [1001]


@pytest.fixture(params=["postgresql", "mysql"])
def sql_server(request: pytest.FixtureRequest) -> tuple[str, SqlServer]:
    fixture = "postgres_server" if request.param == "postgresql" else "mariadb_server"
    server: SqlServer = request.getfixturevalue(fixture)
    return request.param, server


@pytest.mark.slow
def test_a_role_that_may_not_alter_a_table_of_release_0_1_0_is_access_denied_naming_the_fix(
    sql_server: tuple[str, SqlServer],
) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=create_release_0_1_0_schema, granted=True)
    with open_table(db.role_url, "lp") as table, pytest.raises(AccessDeniedError) as info:
        table.initialize()
    message = str(info.value)
    assert "silo table init URI" in message
    assert "written_version, written_etag" in message
    assert PASSWORD not in message
    admin = sa.create_engine(db.admin_url)
    try:
        assert not set(WRITTEN_COLUMNS) & set(columns(admin))  # nothing was added
        with admin.connect() as connection:  # and no version row seeded: the silo did not start
            assert connection.execute(sa.text(f"SELECT COUNT(*) FROM {VERSION_TABLE}")).scalar_one() == 0
        initialize_as_admin(db.admin_url)  # silo table init URI, as the admin
        assert set(WRITTEN_COLUMNS) <= set(columns(admin))
    finally:
        admin.dispose()
    with open_table(db.role_url, "lp") as table:
        table.initialize()  # the columns exist: no DDL, which this role may not run
        assert table.insert_row_at_next_version(make_entry(1000)) is not None
        assert table.insert_row(make_entry(1001), table.read_all().version.next())
        assert ports(table, 1) == [1001]


@pytest.mark.slow
@pytest.mark.parametrize("server_fixture", SERVERS.values())
def test_a_writer_at_the_next_version_that_waited_records_the_version_it_set(
    request: pytest.FixtureRequest, server_fixture: str
) -> None:
    """A writer at the next version that waits for the version row while another moves it records
    the version it set, not the one the table had when it started (PostgreSQL: its statement's
    snapshot), and wins: it does not lose or retry because the version moved."""
    server: ThrowawayServer = request.getfixturevalue(server_fixture)
    cluster_id = f"wait-{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server.url)
    with open_table(server.url, cluster_id) as table, admin.connect() as holder, admin.connect() as observer:
        table.initialize()
        assert table.insert_row_at_next_version(make_entry(1000)) is not None  # 1
        holder.execute(  # another writer's version UPDATE, not committed yet
            sa.text(f"UPDATE {VERSION_TABLE} SET version = version + 1, etag = 'other' WHERE cluster_id = :c"),
            {"c": cluster_id},
        )
        written: list[CommittedWrite | None] = []
        writer = threading.Thread(target=lambda: written.append(table.insert_row_at_next_version(make_entry(1001))))
        writer.start()
        try:
            wait_until(
                lambda: observer.execute(sa.text(LOCK_WAITS[admin.dialect.name])).scalar_one() > 0,
                30,
                "the writer to wait for the version row",
            )
        finally:
            holder.commit()  # version 2
            writer.join()
        [write] = written
        assert write is not None
        assert write.version.version == 3
        assert table.read_version() == write.version
        with admin.connect() as connection:
            stored = connection.execute(
                sa.text(f"SELECT written_version FROM {MEMBERSHIP_TABLE} WHERE cluster_id = :c AND port = 1001"),
                {"c": cluster_id},
            ).scalar_one()
        assert stored == 3
        assert ports(table, 2) == [1001]
        assert ports(table, 3) == []
    admin.dispose()


@pytest.mark.slow
def test_forty_writers_at_the_next_version_on_postgresql_each_found_from_the_version_before(
    postgres_server: ThrowawayServer,
) -> None:
    """40 silos each insert their row and then update it at the next version, all at once: every
    write wins at a version of its own, and ``read_changes(v - 1)`` finds the row its write at ``v``
    left (the rows' ``written_version`` is the version their last write set, never another)."""
    cluster_id = f"storm-{uuid.uuid4().hex[:8]}"
    count = 40
    handles = [open_table(postgres_server.url, cluster_id) for _ in range(count)]
    handles[0].initialize()
    versions: dict[SiloAddress, list[int]] = {}

    def join(index: int) -> None:
        table, entry = handles[index], make_entry(5000 + index)
        joined = table.insert_row_at_next_version(entry)
        assert joined is not None
        active = table.update_row_at_next_version(entry.replace(status=SiloStatus.ACTIVE), joined.rows[0][1])
        assert active is not None
        versions[entry.silo_address] = [joined.version.version, active.version.version]

    failures = run_together([functools.partial(join, index) for index in range(count)])
    try:
        assert failures == []
        table = handles[0]
        assert sorted(version for both in versions.values() for version in both) == list(range(1, 2 * count + 1))
        assert table.read_version().version == 2 * count
        last = {silo: both[1] for silo, both in versions.items()}
        for silo, version in last.items():
            assert table.read_changes(version - 1).get(silo) is not None, silo
        for since in range(0, 2 * count + 1, 7):
            assert {entry.silo_address for entry in table.read_changes(since).entries} == {
                silo for silo, version in last.items() if version > since
            }
    finally:
        for handle in handles:
            handle.close()
