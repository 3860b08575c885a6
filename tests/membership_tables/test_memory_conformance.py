from __future__ import annotations

import uuid

import pytest

from membership_tables import open_table
from membership_tables.testing import OpenCluster, StoreMalformedRow
from membership_tables.testing.pytest_suite import MembershipTableConformance
from tests.membership_tables.malformed_rows import store_in_memory


class TestMemoryConformance(MembershipTableConformance):
    @pytest.fixture
    def open_cluster(self) -> OpenCluster:
        uri = f"memory://conformance-{uuid.uuid4().hex}"
        return lambda cluster_id: open_table(uri, cluster_id)

    @pytest.fixture
    def store_malformed_row(self) -> StoreMalformedRow:
        return store_in_memory
