"""The whole conformance suite on SQLite (a file), PostgreSQL and MariaDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.services.mariadb import MariaDbServer
from testbed.services.postgres import PostgresServer
from tests.membership_tables.malformed_rows import sql_store


def opener(url: str) -> OpenCluster:
    return lambda cluster_id: open_table(url, cluster_id)


class TestSqliteConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, tmp_path: Path) -> OpenCluster:
        return opener(f"sqlite:///{tmp_path / 'membership.db'}")

    @pytest.fixture
    def store_malformed_row(self, tmp_path: Path) -> StoreMalformedRow:
        return sql_store(f"sqlite:///{tmp_path / 'membership.db'}")


@pytest.mark.slow
class TestPostgresConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, postgres_server: PostgresServer) -> OpenCluster:
        return opener(postgres_server.url)

    @pytest.fixture
    def store_malformed_row(self, postgres_server: PostgresServer) -> StoreMalformedRow:
        return sql_store(postgres_server.url)


@pytest.mark.slow
class TestMariaDbConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, mariadb_server: MariaDbServer) -> OpenCluster:
        return opener(mariadb_server.url)

    @pytest.fixture
    def store_malformed_row(self, mariadb_server: MariaDbServer) -> StoreMalformedRow:
        return sql_store(mariadb_server.url)
