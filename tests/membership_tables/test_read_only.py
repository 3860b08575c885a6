"""``open_table(..., read_only=True)`` on every store: the handle reads, and no write gets through.

Real servers (``testbed.services``). Every backend's read-only handle refuses each write with
``ReadOnlyTableError`` and leaves the table as it was. On SQL the database refuses too: the
backend's own handle under the guard (``.inner``) and a raw ``UPDATE`` on a read-only engine are
refused by SQLite, PostgreSQL and MariaDB themselves; DynamoDB's client refuses to send a write;
Consul enforces a token that may only read, and the read path needs no more.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from membership_tables import (
    AccessDeniedError,
    MembershipTable,
    ReadOnlyTableError,
    SiloStatus,
    TableUnavailableError,
    open_table,
)
from membership_tables.read_only import ReadOnlyMembershipTable
from membership_tables.sql import dialects
from membership_tables.sql.engine import SqlOptions, create_engine, parse_url
from membership_tables.sql.schema import version_table
from membership_tables.testing import make_entry
from testbed.consul_server import AclPolicy, AclTable, ConsulTestServer
from testbed.services.consul import ConsulEndpoint
from testbed.services.dynamodb import MotoServer
from testbed.services.mariadb import MariaDbServer
from testbed.services.postgres import PostgresServer

SQL = ("sqlite", "postgresql", "mariadb")
A = make_entry(11111, status=SiloStatus.DEAD)
B = make_entry(11112)


@dataclass(frozen=True)
class Store:
    uri: str
    options: dict[str, Any]
    writer: MembershipTable

    def reader(self) -> MembershipTable:
        return open_table(self.uri, self.writer.cluster_id, read_only=True, **self.options)


def opened(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A cluster of two rows (one Dead, so a cleanup has one to remove) in the store ``name``."""
    cluster = f"ro-{uuid.uuid4().hex[:10]}"
    options: dict[str, Any] = {}
    if name == "memory":
        uri = f"memory://{cluster}"
    elif name == "sqlite":
        uri = f"sqlite:///{tmp_path / 'm.db'}"
    elif name in ("postgresql", "mariadb"):
        uri = request.getfixturevalue(f"{'postgres' if name == 'postgresql' else name}_server").url
    elif name == "zookeeper":
        uri = request.getfixturevalue("zookeeper_server").uri(f"ro-{uuid.uuid4().hex[:8]}")
    elif name == "consul":
        uri = request.getfixturevalue("consul_test_server").uri(f"ro-{uuid.uuid4().hex[:8]}")
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        uri, options = moto.uri("membership-read-only"), moto.options
    with open_table(uri, cluster, **options) as writer:
        writer.initialize()
        assert writer.insert_row(A, writer.read_all().version.next())
        assert writer.insert_row(B, writer.read_all().version.next())
        yield Store(uri, options, writer)
        writer.delete_cluster_entries()


@pytest.fixture(params=["memory", *SQL, "zookeeper", "consul", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from opened(request.param, request, tmp_path)


@pytest.fixture(params=[*SQL, "dynamodb"])
def session_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from opened(request.param, request, tmp_path)


def writes(table: MembershipTable) -> dict[str, Callable[[], object]]:
    """Every write of the contract, each with arguments that would change the table."""
    data = table.read_all()
    (a, a_etag), (b, b_etag) = sorted(data.rows, key=lambda row: row[0].silo_address.port)
    changed = a.replace(status=SiloStatus.ACTIVE)
    later = a.i_am_alive_time + timedelta(days=1)
    new = make_entry(11113)
    return {
        "initialize": table.initialize,
        "insert_row": lambda: table.insert_row(new, data.version.next()),
        "insert_row_at_next_version": lambda: table.insert_row_at_next_version(new),
        "update_row": lambda: table.update_row(changed, a_etag, data.version.next()),
        "update_row_at_next_version": lambda: table.update_row_at_next_version(changed, a_etag),
        "update_rows": lambda: table.update_rows(((changed, a_etag), (b, b_etag)), data.version.next()),
        "update_i_am_alive": lambda: table.update_i_am_alive(a.silo_address, later),
        "cleanup_defunct_entries": lambda: table.cleanup_defunct_entries(later + timedelta(days=1)),
        "delete_cluster_entries": table.delete_cluster_entries,
    }


def test_a_read_only_handle_reads_the_rows_and_refuses_every_write(store: Store) -> None:
    before = store.writer.read_all()
    with store.reader() as reader:
        assert isinstance(reader, ReadOnlyMembershipTable)
        assert reader.read_all() == before
        assert reader.read_version() == before.version
        assert reader.read_row(A.silo_address).rows == (before.get(A.silo_address),)
        for name, write in writes(reader).items():
            with pytest.raises(ReadOnlyTableError, match=f"{name} is a write.*opened read-only"):
                write()
    assert store.writer.read_all() == before


def test_the_store_refuses_writes_of_a_read_only_session(session_store: Store) -> None:
    """The backend's handle under the guard (``.inner``) tries its writes: the SQL database refuses
    each one on its read-only session (autocommit statements and transactions alike), and the
    DynamoDB client refuses to send it."""
    store = session_store
    before = store.writer.read_all()
    with store.reader() as reader:
        assert isinstance(reader, ReadOnlyMembershipTable)
        inner = reader.inner
        assert inner.read_all() == before
        for name, write in writes(inner).items():
            if name == "initialize":
                continue  # the schema and the version row exist: it only reads
            with pytest.raises(ReadOnlyTableError, match=r"refused a write|is a write.*nothing was sent") as refused:
                write()
            if not store.uri.startswith("dynamodb"):
                assert isinstance(refused.value.__cause__, sa.exc.DBAPIError), name
    assert store.writer.read_all() == before


@pytest.mark.parametrize("name", SQL)
def test_a_raw_update_on_a_read_only_engine_is_refused_by_the_database(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if name == "sqlite":
        uri = f"sqlite:///{tmp_path / 'raw.db'}"
        with open_table(uri, "raw") as writer:
            writer.initialize()
    else:
        server: PostgresServer | MariaDbServer = request.getfixturevalue(
            "postgres_server" if name == "postgresql" else "mariadb_server"
        )
        uri = server.url
        with open_table(uri, "raw") as writer:
            writer.initialize()
    engine = create_engine(parse_url(uri), SqlOptions(), read_only=True)
    try:
        with engine.connect() as connection:
            before = connection.execute(sa.select(sa.func.count()).select_from(version_table)).scalar_one()
            with pytest.raises(sa.exc.DBAPIError) as refused:
                connection.exec_driver_sql(f"UPDATE {version_table.name} SET version = version + 1")
            connection.rollback()
            assert dialects.is_read_only(engine.dialect.name, refused.value), refused.value
            with pytest.raises(sa.exc.DBAPIError) as refused:
                connection.exec_driver_sql(f"DELETE FROM {version_table.name}")
            connection.rollback()
            assert dialects.is_read_only(engine.dialect.name, refused.value), refused.value
            assert connection.execute(sa.select(sa.func.count()).select_from(version_table)).scalar_one() == before
    finally:
        engine.dispose()


def test_a_read_only_sqlite_handle_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with open_table(f"sqlite:///{path}", "c", read_only=True) as reader, pytest.raises(TableUnavailableError):
        reader.read_all()
    assert not path.exists()


@pytest.fixture(scope="module")
def consul_reader_token() -> Iterator[tuple[ConsulTestServer, str, str]]:
    reader, admin = "ro-reader-token", "ro-admin-token"
    policy = AclPolicy.from_hcl('key_prefix "read-only/" { policy = "read" }')
    with ConsulTestServer(acl=AclTable({reader: policy, admin: AclPolicy.allow_all()})) as server:
        yield server, reader, admin


def test_consul_serves_a_read_only_handle_with_a_token_that_may_only_read(
    consul_reader_token: tuple[ConsulTestServer, str, str],
) -> None:
    """What Consul enforces: the token's key policy. A token that may only read suffices for every
    read of the read-only handle (so its read path writes nothing), and refuses the backend's writes."""
    server, reader_token, admin_token = consul_reader_token
    uri = ConsulEndpoint("test", server.host, server.port).uri("read-only/c")
    with open_table(uri, "c", token=admin_token) as writer:
        writer.initialize()
        assert writer.insert_row(A, writer.read_all().version.next())
        with open_table(uri, "c", read_only=True, token=reader_token) as reader:
            assert isinstance(reader, ReadOnlyMembershipTable)
            assert reader.read_all() == writer.read_all()
            assert reader.read_row(A.silo_address).version == reader.read_version()
            with pytest.raises(AccessDeniedError):
                reader.inner.update_i_am_alive(A.silo_address, A.i_am_alive_time + timedelta(days=1))
        writer.delete_cluster_entries()
