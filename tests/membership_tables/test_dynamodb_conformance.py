from __future__ import annotations

import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from testbed.services.dynamodb import MotoServer
from tests.membership_tables.malformed_rows import dynamodb_store

pytestmark = pytest.mark.slow

MOTO_READ_TIMEOUT = 30.0
"""Seconds a request to moto may take here (the table's default is 5 s). moto serves one request
at a time, so the suite's races of 20 writers queue behind one another: under the full suite's
load a TransactWriteItems waited past 5 s and the check failed on moto's queue, not on the table."""


class TestDynamoDbConformance(MembershipTableConformance):
    """Every cluster of the suite shares one table, as production clusters may."""

    @pytest.fixture
    def open_cluster(self, moto_server: MotoServer) -> OpenCluster:
        uri = moto_server.uri("membership-conformance")
        return lambda cluster_id: open_table(uri, cluster_id, read_timeout=MOTO_READ_TIMEOUT, **moto_server.options)

    @pytest.fixture
    def store_malformed_row(self, moto_server: MotoServer) -> StoreMalformedRow:
        return dynamodb_store(moto_server.client)
