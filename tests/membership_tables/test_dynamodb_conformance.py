from __future__ import annotations

import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.services.dynamodb import MotoServer
from tests.membership_tables.malformed_rows import dynamodb_store

pytestmark = pytest.mark.slow


class TestDynamoDbConformance(MembershipTableConformance):
    """Every cluster of the suite shares one table, as production clusters may."""

    @pytest.fixture
    def open_cluster(self, moto_server: MotoServer) -> OpenCluster:
        uri = moto_server.uri("membership-conformance")
        return lambda cluster_id: open_table(uri, cluster_id, **moto_server.options)

    @pytest.fixture
    def store_malformed_row(self, moto_server: MotoServer) -> StoreMalformedRow:
        return dynamodb_store(moto_server.client)
