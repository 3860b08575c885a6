"""The ZooKeeper table passes every contract check against a real ZooKeeper."""

from __future__ import annotations

import uuid

import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.services.zookeeper import ZooKeeperServer
from tests.membership_tables.malformed_rows import zookeeper_store

pytestmark = pytest.mark.slow


class TestZooKeeperConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self, zookeeper_server: ZooKeeperServer) -> OpenCluster:
        uri = zookeeper_server.uri(f"conformance-{uuid.uuid4().hex[:12]}")
        return lambda cluster_id: open_table(uri, cluster_id)

    @pytest.fixture
    def store_malformed_row(self, zookeeper_server: ZooKeeperServer) -> StoreMalformedRow:
        return zookeeper_store(zookeeper_server.hosts)
