"""SQL under a least-privilege role: row privileges on the two tables, no DDL, clear denials.

Real PostgreSQL and MariaDB: the admin creates the schema (``initialize`` as ``silo table init``
does), then a role gets exactly ``grant_statements`` and works as a silo would.
"""

from __future__ import annotations

import pytest

from membership_tables import AccessDeniedError, open_table
from membership_tables.sql.grants import SILO_TABLES, grant_statements
from membership_tables.testing import OpenCluster, StoreMalformedRow, make_entry
from membership_tables.testing.pytest_suite import MembershipTableConformance
from silo.cli import main
from testbed.services.sql_roles import PASSWORD, SqlServer, initialize_as_admin, refused, role_database
from tests.membership_tables.malformed_rows import sql_store


@pytest.fixture(params=["postgresql", "mysql"])
def sql_server(request: pytest.FixtureRequest) -> tuple[str, SqlServer]:
    fixture = "postgres_server" if request.param == "postgresql" else "mariadb_server"
    server: SqlServer = request.getfixturevalue(fixture)
    return request.param, server


def test_a_granted_role_initializes_reads_and_writes_but_runs_no_ddl(sql_server: tuple[str, SqlServer]) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=initialize_as_admin, granted=True)
    entry = make_entry()
    with open_table(db.role_url, "lp") as table:
        table.initialize()  # the schema exists: only the version row is inserted
        assert table.insert_row(entry, table.read_all().version.next())
        read = table.read_all()
        assert table.update_row(entry, read.rows[0][1], read.version.next())
        table.delete_cluster_entries()
        assert table.read_all().rows == ()
    assert refused(db.role_url, "CREATE TABLE lp_probe (a INTEGER)")
    assert refused(db.role_url, f"DROP TABLE {SILO_TABLES[0]}")


def test_a_missing_schema_the_role_may_not_create_is_access_denied_naming_the_fix(
    sql_server: tuple[str, SqlServer],
) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=None, granted=False)
    with open_table(db.role_url, "lp") as table, pytest.raises(AccessDeniedError, match="silo table init URI") as info:
        table.initialize()
    assert PASSWORD not in str(info.value)
    with open_table(db.admin_url, "lp") as admin:  # nothing was created
        assert admin.read_all().rows == ()


def test_a_wrong_password_is_access_denied_not_unavailable(mariadb_server: SqlServer) -> None:
    db = role_database(mariadb_server, "mysql", create_schema=initialize_as_admin, granted=True)
    wrong = db.role_url.replace(PASSWORD, "not-the-password")
    with open_table(wrong, "lp") as table, pytest.raises(AccessDeniedError, match="refused") as info:
        table.read_all()
    assert "not-the-password" not in str(info.value)


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        (
            "postgresql",
            [
                "GRANT CONNECT ON DATABASE membership TO silo_app;",
                "GRANT USAGE ON SCHEMA public TO silo_app;",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON silo_membership, silo_membership_version TO silo_app;",
            ],
        ),
        (
            "mysql",
            [
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `membership`.`silo_membership` TO 'silo_app'@'%';",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `membership`.`silo_membership_version` TO 'silo_app'@'%';",
            ],
        ),
    ],
)
def test_the_grants_cover_exactly_the_two_tables_with_row_privileges(dialect: str, expected: list[str]) -> None:
    assert sorted(grant_statements(dialect, "membership", "silo_app")) == sorted(expected)


@pytest.mark.parametrize(("database", "role"), [("membership", "silo; DROP"), ("db`x", "silo_app"), ("m", "")])
def test_grants_refuse_names_that_are_not_plain_identifiers(database: str, role: str) -> None:
    with pytest.raises(ValueError, match="plain SQL identifier"):
        grant_statements("postgresql", database, role)


def test_silo_table_init_under_the_role_exits_2_naming_the_fix(
    sql_server: tuple[str, SqlServer], capsys: pytest.CaptureFixture[str]
) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=None, granted=False)
    assert main(["table", "init", db.role_url]) == 2
    err = capsys.readouterr().err
    assert "silo table init URI" in err
    assert PASSWORD not in err
    assert main(["table", "init", db.admin_url]) == 0  # the admin may


@pytest.fixture(scope="module")
def postgres_role_url(postgres_server: SqlServer) -> str:
    return role_database(postgres_server, "postgresql", create_schema=initialize_as_admin, granted=True).role_url


@pytest.fixture(scope="module")
def mariadb_role_url(mariadb_server: SqlServer) -> str:
    return role_database(mariadb_server, "mysql", create_schema=initialize_as_admin, granted=True).role_url


@pytest.mark.slow
class TestPostgresConformanceUnderTheGrantedRole(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, postgres_role_url: str) -> OpenCluster:
        return lambda cluster_id: open_table(postgres_role_url, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, postgres_role_url: str) -> StoreMalformedRow:
        return sql_store(postgres_role_url)


@pytest.mark.slow
class TestMariaDbConformanceUnderTheGrantedRole(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, mariadb_role_url: str) -> OpenCluster:
        return lambda cluster_id: open_table(mariadb_role_url, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, mariadb_role_url: str) -> StoreMalformedRow:
        return sql_store(mariadb_role_url)
