"""The whole MembershipTable contract against Consul: the test server, and a real agent if CONSUL_HTTP_ADDR is set."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import consul
import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.services.consul import ConsulEndpoint
from tests.membership_tables.malformed_rows import consul_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def consul_prefix(consul_endpoint: ConsulEndpoint) -> Iterator[str]:
    """A key prefix of this module's own, removed afterwards (a real agent may hold other data)."""
    prefix = f"silo-membership-tests/{uuid.uuid4().hex[:12]}"
    yield prefix
    agent = consul.Consul(host=consul_endpoint.host, port=consul_endpoint.port, scheme=consul_endpoint.scheme)
    agent.kv.delete(f"{prefix}/", recurse=True)


class TestConsulConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, consul_endpoint: ConsulEndpoint, consul_prefix: str) -> OpenCluster:
        uri = consul_endpoint.uri(consul_prefix)
        return lambda cluster_id: open_table(uri, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, consul_endpoint: ConsulEndpoint) -> StoreMalformedRow:
        return consul_store(consul_endpoint.host, consul_endpoint.port, consul_endpoint.scheme)
