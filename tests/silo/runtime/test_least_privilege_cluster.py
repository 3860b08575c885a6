"""Real 3-silo clusters under least privilege: SQL roles, ZooKeeper digest ACLs, a Consul token.

The admin runs ``silo table init URI``; on PostgreSQL and MariaDB the silos run as a role
holding only the GRANTs of ``membership_tables.sql.grants`` (SELECT/INSERT/UPDATE/DELETE on the
two tables). The cluster forms, a SIGKILLed silo is declared Dead, the role may run no DDL, and
its password shows in no log line or ``silo status``. Without the schema, ``silo run`` under the
role exits 2 naming the fix. On ZooKeeper (digest credentials in the URI) and on the Consul test
server enforcing the documented ``key_prefix`` policy (token in ``CONSUL_HTTP_TOKEN``) the same
cluster runs and no secret is logged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from membership_tables.policies import consul_policy
from membership_tables.sql.grants import SILO_TABLES
from silo.exit_codes import ExitCode
from testbed.cluster_harness import ROOT, Cluster, death_bound
from testbed.consul_server import AclPolicy, AclTable, ConsulTestServer
from testbed.services.sql_roles import PASSWORD, SqlServer, refused, role_database

pytestmark = pytest.mark.slow

JOIN_TIMEOUT = 60.0


def silo_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "silo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def silo_table_init(admin_url: str, secret: str = PASSWORD) -> None:
    done = silo_cli("table", "init", admin_url)
    assert done.returncode == 0, done.stderr
    assert "membership schema ready" in done.stdout
    assert secret not in done.stdout + done.stderr


def kill_one_of_three(cluster: Cluster) -> None:
    """Three silos join; one is SIGKILLed and declared Dead while the other two stay Active."""
    silos = cluster.start(3)
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, JOIN_TIMEOUT)
    victim, survivors = silos[0], silos[1:]
    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * 2


def assert_never_shown(cluster: Cluster, secret: str) -> None:
    """The secret is in no silo's log and not in ``silo status`` (which shows the Dead silo)."""
    for silo in cluster.silos:
        assert secret not in silo.log_text(), silo.log_tail()
    status = silo_cli("status", "--table", cluster.table_uri, "--cluster", cluster.cluster_id)
    assert status.returncode == 0, status.stderr
    assert "DEAD" in status.stdout
    assert secret not in status.stdout + status.stderr


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
    kill_one_of_three(cluster)

    assert refused(db.role_url, "CREATE TABLE lp_probe (a INTEGER)")
    assert refused(db.role_url, f"DROP TABLE {SILO_TABLES[1]}")
    assert refused(db.role_url, f"ALTER TABLE {SILO_TABLES[1]} ADD COLUMN lp_probe INTEGER")
    assert_never_shown(cluster, PASSWORD)
    cluster.check_history()


def test_a_silo_without_the_schema_exits_2_and_names_silo_table_init(sql_server: tuple[str, SqlServer]) -> None:
    dialect, server = sql_server
    db = role_database(server, dialect, create_schema=None, granted=False)
    run = silo_cli("run", "--table", db.role_url, "--cluster", "lp", "--preset", "local")
    assert run.returncode == ExitCode.BAD_CONFIGURATION, run.stderr
    assert "silo table init URI" in run.stderr
    assert PASSWORD not in run.stdout + run.stderr


ZOOKEEPER_PASSWORD = "zk-cluster-Secret-44d1"
CONSUL_TOKEN = "b7a0c3d2-least-privilege-cluster-token"


@pytest.fixture(params=["zookeeper", "consul"])
def restricted_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A table URI whose store admits only the silos' credentials, and the secret to look for."""
    prefix = f"lp-{uuid.uuid4().hex[:8]}"
    if request.param == "zookeeper":
        uri = request.getfixturevalue("zookeeper_server").uri(prefix)
        yield uri.replace("zookeeper://", f"zookeeper://silo:{ZOOKEEPER_PASSWORD}@", 1), ZOOKEEPER_PASSWORD
        return
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", CONSUL_TOKEN)  # the silo processes inherit it
    with ConsulTestServer(acl=AclTable({CONSUL_TOKEN: AclPolicy.from_hcl(consul_policy(prefix))})) as server:
        yield server.uri(prefix), CONSUL_TOKEN


def test_a_cluster_runs_with_digest_acls_or_a_prefix_limited_token(
    restricted_store: tuple[str, str], tmp_path: Path, clusters: list[Cluster]
) -> None:
    uri, secret = restricted_store
    silo_table_init(uri, secret)
    cluster = Cluster(tmp_path, uri, "least-privilege")
    clusters.append(cluster)
    kill_one_of_three(cluster)
    assert_never_shown(cluster, secret)
    cluster.check_history()
