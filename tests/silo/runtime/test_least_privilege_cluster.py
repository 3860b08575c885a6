"""A real 3-silo cluster on PostgreSQL and MariaDB under a least-privilege role.

The admin runs ``silo table init URI``; the silos run as a role holding only the GRANTs of
``membership_tables.sql.grants`` (SELECT/INSERT/UPDATE/DELETE on the two tables). The cluster
forms, a SIGKILLed silo is declared Dead, the role may run no DDL, and its password shows in
no log line. Without the schema, ``silo run`` under the role exits 2 naming the fix.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from membership_tables.sql.grants import SILO_TABLES
from silo.exit_codes import ExitCode
from tests.services.sql_roles import PASSWORD, SqlServer, refused, role_database
from tests.silo.cluster_harness import ROOT, Cluster, death_bound

pytestmark = pytest.mark.slow

JOIN_TIMEOUT = 60.0


def silo_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "silo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def silo_table_init(admin_url: str) -> None:
    done = silo_cli("table", "init", admin_url)
    assert done.returncode == 0, done.stderr
    assert "membership schema ready" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr


@pytest.fixture(params=["postgresql", "mysql"])
def sql_server(request: pytest.FixtureRequest) -> tuple[str, SqlServer]:
    fixture = "postgres_server" if request.param == "postgresql" else "mariadb_server"
    server: SqlServer = request.getfixturevalue(fixture)
    return request.param, server


@pytest.fixture
def clusters() -> Iterator[list[Cluster]]:
    """Clusters a test started: every silo killed and the table handle closed at teardown."""
    made: list[Cluster] = []
    try:
        yield made
    finally:
        for cluster in made:
            cluster.close()
            cluster.table.close()


def test_a_cluster_forms_and_detects_a_kill_under_the_least_privilege_role(
    sql_server: tuple[str, SqlServer], tmp_path: Path, clusters: list[Cluster]
) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=silo_table_init, granted=True)
    cluster = Cluster(tmp_path, db.role_url, "least-privilege")
    clusters.append(cluster)
    silos = cluster.start(3)
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, JOIN_TIMEOUT)

    victim, survivors = silos[0], silos[1:]
    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * 2

    assert refused(db.role_url, "CREATE TABLE lp_probe (a INTEGER)")
    assert refused(db.role_url, f"DROP TABLE {SILO_TABLES[1]}")
    assert refused(db.role_url, f"ALTER TABLE {SILO_TABLES[1]} ADD COLUMN lp_probe INTEGER")
    for silo in silos:
        assert PASSWORD not in silo.log_text()
    status = silo_cli("status", "--table", db.role_url, "--cluster", "least-privilege")
    assert status.returncode == 0, status.stderr
    assert "DEAD" in status.stdout
    assert PASSWORD not in status.stdout + status.stderr
    cluster.check_history()


def test_a_silo_without_the_schema_exits_2_and_names_silo_table_init(sql_server: tuple[str, SqlServer]) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=None, granted=False)
    run = silo_cli("run", "--table", db.role_url, "--cluster", "lp", "--preset", "local")
    assert run.returncode == ExitCode.BAD_CONFIGURATION, run.stderr
    assert "silo table init URI" in run.stderr
    assert PASSWORD not in run.stdout + run.stderr
