"""ZooKeeper digest ACLs on the real server: only the identity that created a cluster may use it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

from membership_tables import AccessDeniedError, open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow, make_entry
from membership_tables.testing.pytest_suite import MembershipTableConformance
from membership_tables.zookeeper import DIGEST_ENV, ZooKeeperMembershipTable, parse_uri
from testbed.services.zookeeper import ZooKeeperServer
from tests.membership_tables.malformed_rows import zookeeper_store

PASSWORD = "zk-Secret-91c2"


def with_credentials(uri: str, user: str, password: str) -> str:
    return uri.replace("zookeeper://", f"zookeeper://{user}:{password}@", 1)


@pytest.fixture
def chroot_uri(zookeeper_server: ZooKeeperServer) -> str:
    return zookeeper_server.uri(f"acl-{uuid.uuid4().hex[:10]}")


def started_client(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def raw_client(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    yield from started_client(zookeeper_server)


@pytest.fixture
def stranger(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain kazoo client with no credentials at all."""
    yield from started_client(zookeeper_server)


def test_credentials_come_from_the_uri_or_the_environment_and_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    from_uri = parse_uri("zookeeper://silo:p%40ss@zk:2181/x", {})
    assert from_uri.digest is not None
    assert (from_uri.digest.user, from_uri.digest.password) == ("silo", "p@ss")
    assert "p@ss" not in repr(from_uri)
    monkeypatch.setenv(DIGEST_ENV, f"env-user:{PASSWORD}")
    from_env = parse_uri("zookeeper://zk:2181/x", {})
    assert from_env.digest is not None
    assert from_env.digest.user == "env-user"
    assert parse_uri("zookeeper://silo:pw@zk:2181/x", {}).digest.user == "silo"  # type: ignore[union-attr]  # the URI wins
    table = ZooKeeperMembershipTable(from_env, "c1")
    assert PASSWORD not in repr(table)
    assert PASSWORD not in repr(from_env)


def test_another_identity_can_neither_read_nor_write_the_cluster(
    chroot_uri: str, raw_client: KazooClient, stranger: KazooClient
) -> None:
    owner_uri = with_credentials(chroot_uri, "silo", PASSWORD)
    entry = make_entry()
    with open_table(owner_uri, "c1") as owner:
        owner.initialize()
        assert owner.insert_row(entry, owner.read_all().version.next())
        version = owner.read_all().version
        assert isinstance(owner, ZooKeeperMembershipTable)
        cluster_path, row_path = owner.cluster_path, owner.row_path(entry.silo_address)

    # Every znode carries one ACL entry: all permissions for the owner's digest, none for anyone else
    # (reading an ACL takes READ, so the owner looks).
    raw_client.add_auth("digest", f"silo:{PASSWORD}")
    expected_id = make_digest_acl_credential("silo", PASSWORD)
    for path in (cluster_path.rsplit("/", 1)[0], cluster_path, row_path, f"{row_path}/alive"):
        acls, _ = raw_client.get_acls(path)
        assert [(acl.id.scheme, acl.id.id, acl.perms) for acl in acls] == [("digest", expected_id, 31)], path

    for intruder_uri in (chroot_uri, with_credentials(chroot_uri, "silo", "guessed-password")):
        with open_table(intruder_uri, "c1") as intruder:
            with pytest.raises(AccessDeniedError, match="digest ACL") as info:
                intruder.read_all()
            assert PASSWORD not in str(info.value)
            with pytest.raises(AccessDeniedError):
                intruder.read_version()
            with pytest.raises(AccessDeniedError):
                intruder.insert_row(make_entry(port=2), version.next())
            with pytest.raises(AccessDeniedError):
                intruder.update_i_am_alive(entry.silo_address, entry.i_am_alive_time)
            with pytest.raises(AccessDeniedError):
                intruder.delete_cluster_entries()
    with pytest.raises(NoAuthError):  # a plain client too
        stranger.get(cluster_path)
    with pytest.raises(NoAuthError):
        stranger.set(cluster_path, b"{}")

    with open_table(owner_uri, "c1") as owner:  # nothing changed
        assert owner.read_all().version == version
        assert [row.silo_address for row, _ in owner.read_all().rows] == [entry.silo_address]


def test_a_chroot_the_identity_may_not_create_is_access_denied_naming_silo_table_init(chroot_uri: str) -> None:
    with open_table(with_credentials(chroot_uri, "admin", PASSWORD), "c1") as admin:
        admin.initialize(try_init_version=False)
    nested = f"{chroot_uri}/inner"
    with (
        open_table(with_credentials(nested, "other", "other-pw"), "c1") as other,
        pytest.raises(AccessDeniedError, match="silo table init URI"),
    ):
        other.initialize()


@pytest.mark.slow
class TestZooKeeperConformanceWithDigestAcls(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, chroot_uri: str) -> OpenCluster:
        uri = with_credentials(chroot_uri, "silo", PASSWORD)
        return lambda cluster_id: open_table(uri, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, zookeeper_server: ZooKeeperServer) -> StoreMalformedRow:
        return zookeeper_store(zookeeper_server.hosts, digest=f"silo:{PASSWORD}")
