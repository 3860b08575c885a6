"""Consul under ACLs: the documented key_prefix policy is all a silo needs, and nothing more.

The test server enforces tokens the way an agent with default-deny ACLs does; the token comes
from ``CONSUL_HTTP_TOKEN``. The whole conformance suite runs under the documented policy.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from membership_tables import AccessDeniedError, open_table
from membership_tables.consul import ConsulMembershipTable
from membership_tables.policies import consul_policy
from membership_tables.redaction import redact
from membership_tables.testing import OpenCluster, StoreMalformedRow, make_entry
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.consul_server import AclPolicy, AclTable, ConsulTestServer
from tests.membership_tables.malformed_rows import consul_store

PREFIX = "silo-membership"
TOKEN = "3f1b2c9e-6a1d-4b7e-9c55-acl-test-token"
ADMIN_TOKEN = "9d0e7a41-admin-acl-test-token"


@pytest.fixture(scope="module")
def acl_server() -> Iterator[ConsulTestServer]:
    acl = AclTable({TOKEN: AclPolicy.from_hcl(consul_policy(PREFIX)), ADMIN_TOKEN: AclPolicy.allow_all()})
    with ConsulTestServer(acl=acl) as server:
        yield server


@pytest.fixture
def token_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", TOKEN)


@pytest.mark.usefixtures("token_in_environment")
class TestConsulConformanceUnderTheDocumentedPolicy(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, acl_server: ConsulTestServer) -> OpenCluster:
        uri = acl_server.uri(f"{PREFIX}/{uuid.uuid4().hex[:8]}")
        return lambda cluster_id: open_table(uri, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, acl_server: ConsulTestServer) -> StoreMalformedRow:
        return consul_store(acl_server.host, acl_server.port, token=TOKEN)


@pytest.mark.usefixtures("token_in_environment")
def test_the_token_may_not_touch_keys_outside_its_prefix(acl_server: ConsulTestServer) -> None:
    entry = make_entry()
    with open_table(acl_server.uri("elsewhere"), "c1", token=ADMIN_TOKEN) as admin:  # a cluster the token may not see
        admin.initialize()
        assert admin.insert_row(entry, admin.read_all().version.next())
        admin_version = admin.read_all().version.next()
    elsewhere = [key.key for key in acl_server.store if not key.key.startswith(f"{PREFIX}/")]
    with open_table(acl_server.uri("elsewhere"), "c1") as outside:
        for action in (outside.initialize, outside.read_version):
            with pytest.raises(AccessDeniedError, match="key_prefix") as info:
                action()
            assert TOKEN not in str(info.value)
        # Consul leaves unreadable keys out of a recursive read: the cluster looks empty, nothing leaks
        assert outside.read_all().rows == ()
        with pytest.raises(AccessDeniedError):
            outside.insert_row(make_entry(port=2), admin_version)
        with pytest.raises(AccessDeniedError):
            outside.update_i_am_alive(entry.silo_address, entry.i_am_alive_time)
    assert [key.key for key in acl_server.store if not key.key.startswith(f"{PREFIX}/")] == elsewhere


def test_without_the_token_nothing_is_allowed(acl_server: ConsulTestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    with open_table(acl_server.uri(PREFIX), "c1") as table, pytest.raises(AccessDeniedError):
        table.initialize()
    with open_table(acl_server.uri(PREFIX), "c1", token="guessed") as table, pytest.raises(AccessDeniedError):
        table.read_all()


@pytest.mark.usefixtures("token_in_environment")
def test_the_token_shows_in_no_repr_error_or_log_line(
    acl_server: ConsulTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    table = open_table(acl_server.uri("elsewhere"), "c1")
    assert isinstance(table, ConsulMembershipTable)
    assert TOKEN not in repr(table)
    assert TOKEN not in repr(table.settings)
    with caplog.at_level(logging.INFO):
        logging.getLogger("silo.test").info("opened with token %s", TOKEN)
    assert TOKEN not in redact(caplog.text)
    assert redact(f"CONSUL_HTTP_TOKEN={TOKEN}") == "CONSUL_HTTP_TOKEN=***"
    table.close()
