"""``silo kill``, ``silo cleanup`` and ``silo status`` (read-only) through the CLI on every store with a server.

The table's secret goes the way an operator gives it: MariaDB's password and ZooKeeper's digest
password (the URI names only the user; the znodes carry that user's digest ACL, so no other
identity may touch them) and Consul's ACL token through ``SILO_TABLE_PASSWORD``, DynamoDB's
credentials as ``--table-option``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import make_url

from membership_tables import MembershipTable, SiloAddress, SiloStatus, open_table
from silo.cli.commands import main
from testbed.consul_server.server import ConsulTestServer
from testbed.services.dynamodb import MotoServer
from testbed.services.mariadb import MariaDbServer
from testbed.services.postgres import PostgresServer
from testbed.services.zookeeper import ZooKeeperServer
from tests.silo.rpc_fakes import entry

pytestmark = pytest.mark.slow

A = SiloAddress("10.0.0.1", 11111, 1)
B = SiloAddress("10.0.0.2", 11111, 1)
CONSUL_TOKEN = "5e1c-kill-test-token"
ZOOKEEPER_PASSWORD = "zk-Digest-6d2f"


@pytest.fixture(scope="module")
def consul_with_token() -> Iterator[ConsulTestServer]:
    """A Consul test server that refuses requests without ``CONSUL_TOKEN``."""
    with ConsulTestServer(acl_token=CONSUL_TOKEN) as server:
        yield server


@dataclass(frozen=True)
class Store:
    """How the CLI reaches one store: its URI, extra arguments and environment, and a handle for the test."""

    uri: str
    table: MembershipTable
    args: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)


def cluster() -> str:
    return f"kill-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["postgresql", "mariadb", "zookeeper", "consul", "dynamodb"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    name = request.param
    cluster_id = cluster()
    if name == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        uri = server.url
        made = Store(uri, open_table(uri, cluster_id))
    elif name == "mariadb":
        maria: MariaDbServer = request.getfixturevalue("mariadb_server")
        url = make_url(maria.url)
        without = url._replace(password=None).render_as_string(hide_password=False)
        made = Store(without, open_table(maria.url, cluster_id), environ={"SILO_TABLE_PASSWORD": str(url.password)})
    elif name == "zookeeper":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper_server")
        chroot = f"kill-{uuid.uuid4().hex[:8]}"
        owner = f"zookeeper://silo:{ZOOKEEPER_PASSWORD}@{zookeeper.hosts}/{chroot}"  # its znodes get silo's ACL
        user_only = f"zookeeper://silo@{zookeeper.hosts}/{chroot}"
        made = Store(user_only, open_table(owner, cluster_id), environ={"SILO_TABLE_PASSWORD": ZOOKEEPER_PASSWORD})
    elif name == "consul":
        consul = request.getfixturevalue("consul_with_token")
        uri = consul.uri(f"silo-kill-tests/{uuid.uuid4().hex[:8]}")
        made = Store(
            uri, open_table(uri, cluster_id, token=CONSUL_TOKEN), environ={"SILO_TABLE_PASSWORD": CONSUL_TOKEN}
        )
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        uri = moto.uri("membership-kill")
        options = [f"--table-option={key}={value}" for key, value in moto.options.items()]
        made = Store(uri, open_table(uri, cluster_id, **moto.options), args=options)
    made.table.initialize()
    try:
        yield made
    finally:
        made.table.delete_cluster_entries()
        made.table.close()


def cli(store: Store, *argv: str) -> int:
    return main([*argv, "--table", store.uri, "--cluster", store.table.cluster_id, *store.args], store.environ)


def test_kill_writes_dead_with_the_reason_and_refuses_the_last_active_silo(store: Store) -> None:
    table = store.table
    for address in (A, B):
        assert table.insert_row(entry(address, SiloStatus.ACTIVE), table.read_all().version.next())
    version = table.read_all().version.version
    assert cli(store, "kill", str(A), "--reason", "host retired") == 0
    data = table.read_all()
    killed = data.get(A)
    assert killed is not None
    assert killed[0].status == SiloStatus.DEAD
    assert killed[0].properties["kill_reason"] == "host retired"
    assert data.version.version == version + 1
    assert cli(store, "kill", str(B)) == 1  # the last Active silo
    assert table.read_all().version == data.version
    assert cli(store, "kill", str(B), "--force") == 0
    assert {e.status for e in table.read_all().entries} == {SiloStatus.DEAD}
    assert cli(store, "cleanup", "--older-than", "1d") == 0  # both are fresh: nothing removed
    assert len(table.read_all().entries) == 2


def test_status_reads_every_store_read_only_and_changes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    table = store.table
    for address in (A, B):
        assert table.insert_row(entry(address, SiloStatus.ACTIVE), table.read_all().version.next())
    before = table.read_all()
    capsys.readouterr()
    assert cli(store, "status", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert [silo["address"] for silo in document["silos"]] == [str(A), str(B)]
    assert document["version"] == before.version.version
    assert cli(store, "status") == 0
    assert str(A) in capsys.readouterr().out
    assert table.read_all() == before
