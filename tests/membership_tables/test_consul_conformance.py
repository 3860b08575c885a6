"""The whole MembershipTable contract against Consul: the test server, and a real agent if CONSUL_HTTP_ADDR is set."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import consul
import pytest

from membership_tables import open_table
from membership_tables.testing import ConformanceError, OpenCluster
from membership_tables.testing.pytest_suite import MembershipTableConformance
from tests.services.consul import ConsulEndpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def consul_prefix(consul_endpoint: ConsulEndpoint) -> Iterator[str]:
    """A key prefix of this module's own, removed afterwards (a real agent may hold other data)."""
    prefix = f"silo-membership-tests/{uuid.uuid4().hex[:12]}"
    yield prefix
    agent = consul.Consul(host=consul_endpoint.host, port=consul_endpoint.port, scheme=consul_endpoint.scheme)
    agent.kv.delete(f"{prefix}/", recurse=True)


ALIVE_GOES_BACKWARDS = pytest.mark.xfail(
    raises=ConformanceError,
    strict=False,  # the stored example (tests/.hypothesis-examples) replays it; a lucky run must not fail CI
    reason="known bug: update_row stores the entry's IAmAlive time in the row document as given, so an update "
    "carrying an older time than the row's previous canonical write moves the stored time backwards",
)


class TestConsulConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, consul_endpoint: ConsulEndpoint, consul_prefix: str) -> OpenCluster:
        uri = consul_endpoint.uri(consul_prefix)
        return lambda cluster_id: open_table(uri, cluster_id)

    @ALIVE_GOES_BACKWARDS
    def test_conditional_writes_are_linearizable(
        self, open_cluster: OpenCluster, request: pytest.FixtureRequest
    ) -> None:
        super().test_conditional_writes_are_linearizable(open_cluster, request)

    @ALIVE_GOES_BACKWARDS
    def test_etags_stay_fresh_across_removals(self, open_cluster: OpenCluster, request: pytest.FixtureRequest) -> None:
        super().test_etags_stay_fresh_across_removals(open_cluster, request)
