"""A pytest base class that runs every conformance check against a backend.

Subclass it and provide an ``open_cluster`` fixture::

    class TestMyTable(MembershipTableConformance):
        @pytest.fixture
        def open_cluster(self, my_server) -> OpenCluster:
            return lambda cluster_id: open_table(my_server.uri, cluster_id)

Each check becomes one test; handles opened during a test are closed after it. Override
``store_malformed_row`` too (a ``StoreMalformedRow``: write an unparsable row through the
store's own driver) to run the malformed-row check; without it that test is skipped. With
hypothesis installed, two more tests run the property check of
``membership_tables.testing.properties`` (budget: the active hypothesis profile): random
concurrent programs of conditional writes, without and with cleanups and re-created clusters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from membership_tables.contract import MembershipTable
from membership_tables.testing.checks import CHECKS, Check, OpenCluster
from membership_tables.testing.malformed import StoreMalformedRow, check_malformed_rows_are_skipped_and_reported


class MembershipTableConformance:
    """Every ``MembershipTable`` check, parametrized; override ``open_cluster``."""

    @pytest.fixture
    def open_cluster(self) -> OpenCluster:
        raise NotImplementedError("subclasses provide an open_cluster fixture")

    @pytest.fixture
    def store_malformed_row(self) -> StoreMalformedRow:
        pytest.skip("the backend's tests provide no store_malformed_row fixture (a hook writing an unparsable row)")

    @pytest.fixture
    def tracked_open_cluster(self, open_cluster: OpenCluster) -> Iterator[OpenCluster]:
        handles: list[MembershipTable] = []

        def open_and_track(cluster_id: str) -> MembershipTable:
            handle = open_cluster(cluster_id)
            handles.append(handle)
            return handle

        yield open_and_track
        for handle in handles:
            handle.close()

    @pytest.mark.parametrize("check", CHECKS, ids=[check.__name__.removeprefix("check_") for check in CHECKS])
    def test_conformance(self, check: Check, tracked_open_cluster: OpenCluster) -> None:
        check(tracked_open_cluster)

    def test_malformed_rows_are_skipped_and_reported(
        self, tracked_open_cluster: OpenCluster, store_malformed_row: StoreMalformedRow
    ) -> None:
        check_malformed_rows_are_skipped_and_reported(tracked_open_cluster, store_malformed_row)

    def test_conditional_writes_are_linearizable(
        self, open_cluster: OpenCluster, request: pytest.FixtureRequest
    ) -> None:
        _check_linearizable_writes(open_cluster, request, removals=False)

    def test_etags_stay_fresh_across_removals(self, open_cluster: OpenCluster, request: pytest.FixtureRequest) -> None:
        _check_linearizable_writes(open_cluster, request, removals=True)


def _check_linearizable_writes(open_cluster: OpenCluster, request: pytest.FixtureRequest, *, removals: bool) -> None:
    pytest.importorskip("hypothesis", reason="the property checks need hypothesis")
    from membership_tables.testing.properties import check_linearizable_writes

    check_linearizable_writes(open_cluster, name=request.node.nodeid, removals=removals)
