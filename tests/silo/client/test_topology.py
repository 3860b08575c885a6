from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pytest

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from membership_tables.testing import make_entry
from silo.client.topology import ClusterView, SiloInfo, ViewDiff, ViewTracker, diff
from silo.events import EventKind, MembershipEvent

CLUSTER = "topology-test"
A, S, J, D = SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.JOINING, SiloStatus.DEAD

Row = tuple[int, int, SiloStatus] | tuple[int, int, SiloStatus, Mapping[str, str]]
"""A table row in shorthand: (port, generation, status[, properties])."""


def entry(row: Row) -> MembershipEntry:
    port, generation, status, *rest = row
    return make_entry(port, generation=generation, status=status, properties=rest[0] if rest else {})


def view(version: int, *rows: Row) -> ClusterView:
    data = MembershipTableData(
        rows=tuple((entry(row), f"e{i}") for i, row in enumerate(rows)), version=TableVersion(version, "v")
    )
    return ClusterView.from_table_data(CLUSTER, data)


def addr(port: int, generation: int) -> SiloAddress:
    return SiloAddress("10.0.0.1", port, generation)


def ports(silos: Sequence[SiloInfo]) -> list[int]:
    return [silo.address.port for silo in silos]


@pytest.mark.parametrize(
    ("rows", "expected_order", "expected_leader"),
    [
        ([], [], None),
        ([(1, 5, A)], [1], 1),
        ([(1, 30, A), (2, 10, A), (3, 20, A)], [2, 3, 1], 2),
        # Same generation: the address breaks the tie, deterministically.
        ([(3, 7, A), (1, 7, A), (2, 7, A)], [1, 2, 3], 1),
        # Only Active silos are in the view: not Joining, shutting down or Dead ones, even older ones.
        ([(1, 1, D), (2, 2, S), (3, 3, J), (4, 4, A), (5, 5, A)], [4, 5], 4),
        ([(1, 1, D), (2, 2, J)], [], None),
    ],
)
def test_view_holds_active_silos_in_join_order_and_the_oldest_leads(
    rows: list[Row], expected_order: list[int], expected_leader: int | None
) -> None:
    cluster = view(42, *rows)
    assert cluster.cluster_id == CLUSTER
    assert cluster.version == 42
    assert ports(cluster.silos) == expected_order
    assert [address.port for address in cluster.addresses] == expected_order
    assert (cluster.leader.port if cluster.leader else None) == expected_leader
    assert len(cluster) == len(expected_order)


def test_silo_info_carries_the_row_fields_clients_need() -> None:
    row = make_entry(7000, generation=3, proxy_port=7100, properties={"zone": "a"})
    info = ClusterView.from_table_data(
        CLUSTER, MembershipTableData(rows=((row, "e"),), version=TableVersion(1, "v"))
    ).silos[0]
    assert info == SiloInfo(row.silo_address, "silo-7000", A, 7100, {"zone": "a"}, row.start_time)
    assert info.gateway == "10.0.0.1:7100"
    assert dict(info.properties) == {"zone": "a"}
    with pytest.raises(TypeError):
        info.properties["zone"] = "b"  # type: ignore[index]


@pytest.mark.parametrize(
    ("host", "proxy_port", "gateway"), [("10.0.0.1", 0, None), ("::1", 30000, "[::1]:30000"), ("h", 1, "h:1")]
)
def test_gateway_endpoint(host: str, proxy_port: int, gateway: str | None) -> None:
    info = SiloInfo.from_entry(make_entry(5, host=host, proxy_port=proxy_port))
    assert info.gateway == gateway


def test_lookup_by_address() -> None:
    cluster = view(3, (1, 1, A), (2, 2, D))
    assert cluster.get(addr(1, 1)) == cluster.silos[0]
    assert addr(1, 1) in cluster
    assert cluster.get(addr(2, 2)) is None
    assert addr(2, 2) not in cluster
    assert addr(1, 2) not in cluster, "another generation of the same endpoint is another silo"
    assert "10.0.0.1:1@1" not in cluster


def test_a_view_refuses_a_leader_that_is_not_active_in_it_and_duplicate_silos() -> None:
    one = SiloInfo.from_entry(entry((1, 1, A)))
    with pytest.raises(ValueError, match="leader"):
        ClusterView(CLUSTER, 1, (one,), leader=addr(9, 9))
    with pytest.raises(ValueError, match="twice"):
        ClusterView(CLUSTER, 1, (one, one))


@pytest.mark.parametrize(
    ("old_rows", "new_rows", "joined", "died", "changed"),
    [
        pytest.param(None, [(1, 1, A), (2, 2, A)], [1, 2], [], [], id="first view: everyone joined"),
        pytest.param([(1, 1, A)], [(1, 1, A)], [], [], [], id="nothing changed"),
        pytest.param([(1, 1, A)], [(1, 1, A), (2, 2, J)], [], [], [], id="joining is not joined yet"),
        pytest.param([(1, 1, A), (2, 2, J)], [(1, 1, A), (2, 2, A)], [2], [], [], id="became active"),
        pytest.param([(1, 1, A), (2, 2, A)], [(1, 1, A), (2, 2, D)], [], [2], [], id="declared dead"),
        pytest.param([(1, 1, A), (2, 2, A)], [(1, 1, A), (2, 2, S)], [], [2], [], id="shutting down"),
        pytest.param([(1, 1, A), (2, 2, A)], [(1, 1, A)], [], [2], [], id="row removed"),
        pytest.param([(1, 1, A)], [(1, 1, D), (1, 9, A)], [1], [1], [], id="restart: new generation, same endpoint"),
        pytest.param(
            [(1, 1, A, {"k": "v"}), (2, 2, A)],
            [(1, 1, A, {"k": "w"}), (2, 2, A, {})],
            [],
            [],
            [1],
            id="properties changed",
        ),
        pytest.param(
            [(1, 1, A), (2, 2, A), (3, 3, A)],
            [(1, 1, A, {"x": "1"}), (3, 3, D), (4, 4, A)],
            [4],
            [2, 3],
            [1],
            id="everything at once",
        ),
    ],
)
def test_diff(
    old_rows: list[Row] | None, new_rows: list[Row], joined: list[int], died: list[int], changed: list[int]
) -> None:
    old = None if old_rows is None else view(1, *old_rows)
    new = view(2, *new_rows)
    result = diff(old, new)
    assert (ports(result.joined), ports(result.died), ports(result.properties_changed)) == (joined, died, changed)
    assert result.is_empty == (not (joined or died or changed))


def test_diff_reports_the_new_properties_and_the_last_known_info_of_the_dead() -> None:
    old = view(1, (1, 1, A, {"k": "old"}), (2, 2, A, {"role": "worker"}))
    new = view(2, (1, 1, A, {"k": "new"}), (2, 2, D))
    result = diff(old, new)
    assert dict(result.properties_changed[0].properties) == {"k": "new"}
    assert dict(result.died[0].properties) == {"role": "worker"}
    assert result.died[0].status is A, "the dead silo's last info as an Active silo"


@pytest.mark.parametrize(
    ("offered", "delivered"),
    [
        ([1, 2, 3], [1, 2, 3]),
        ([2, 1, 3], [2, 3]),
        ([3, 3, 2, 4, 4], [3, 4]),
        ([5, 1, 2, 3, 4], [5]),
        ([1, 7, 3, 8, 2, 9], [1, 7, 8, 9]),
    ],
)
def test_tracker_delivers_only_strictly_newer_versions(offered: list[int], delivered: list[int]) -> None:
    tracker = ViewTracker(CLUSTER)
    updates = [tracker.offer(view(version, (1, 1, A))) for version in offered]
    assert [update.view.version for update in updates if update is not None] == delivered
    assert tracker.current is not None
    assert tracker.current.version == max(offered)


def test_tracker_diffs_against_the_last_delivered_view_not_the_last_offered() -> None:
    tracker = ViewTracker(CLUSTER)
    assert tracker.current is None
    first = tracker.offer(view(1, (1, 1, A)))
    assert first is not None
    assert ports(first.diff.joined) == [1]
    assert tracker.offer(view(3, (1, 1, A), (2, 2, D), (3, 3, A))) is not None
    assert tracker.offer(view(2, (1, 1, A), (2, 2, A))) is None, "older than 3: never delivered"
    update = tracker.offer(view(4, (1, 1, D), (3, 3, A)))
    assert update is not None
    assert (ports(update.diff.joined), ports(update.diff.died)) == ([], [1])


def test_tracker_delivers_a_newer_version_even_when_the_active_set_is_unchanged() -> None:
    tracker = ViewTracker(CLUSTER)
    tracker.offer(view(1, (1, 1, A), (2, 2, A)))
    update = tracker.offer(view(2, (1, 1, A), (2, 2, A)))
    assert update is not None
    assert update.diff == ViewDiff()
    assert update.diff.is_empty


def test_tracker_refuses_a_view_of_another_cluster() -> None:
    tracker = ViewTracker("other")
    with pytest.raises(ValueError, match="one tracker per cluster"):
        tracker.offer(view(1, (1, 1, A)))


# Each step is one table state (rows in shorthand) and the leader's port the tracker must report.
LEADER_STORIES: dict[str, list[tuple[list[Row], int | None]]] = {
    "younger silos join: the leader stays": [
        ([(1, 10, A)], 1),
        ([(1, 10, A), (2, 20, J)], 1),
        ([(1, 10, A), (2, 20, A)], 1),
        ([(1, 10, A), (2, 20, A), (3, 30, A)], 1),
    ],
    "the leader dies: the next oldest takes over and keeps it": [
        ([(1, 10, A), (2, 20, A), (3, 30, A)], 1),
        ([(1, 10, D), (2, 20, A), (3, 30, A)], 2),
        ([(1, 10, D), (2, 20, A), (3, 30, A), (4, 40, A)], 2),
        ([(2, 20, S), (3, 30, A), (4, 40, A)], 3),
    ],
    "a non-leader dies: the leader stays": [
        ([(1, 10, A), (2, 20, A)], 1),
        ([(1, 10, A), (2, 20, D)], 1),
    ],
    "the leader restarts: its new generation is the youngest": [
        ([(1, 10, A), (2, 20, A)], 1),
        ([(1, 10, D), (1, 50, J), (2, 20, A)], 2),
        ([(1, 10, D), (1, 50, A), (2, 20, A)], 2),
    ],
    "an older silo becomes Active late: the leader is pinned": [
        ([(1, 10, J), (2, 20, A)], 2),
        ([(1, 10, A), (2, 20, A)], 2),
        ([(1, 10, A), (2, 20, D)], 1),
    ],
    "everyone leaves, then a silo joins": [
        ([(1, 10, A)], 1),
        ([(1, 10, D)], None),
        ([(1, 10, D), (2, 20, A)], 2),
    ],
}


@pytest.mark.parametrize("story", LEADER_STORIES.values(), ids=LEADER_STORIES.keys())
def test_the_leader_changes_only_when_it_leaves_the_active_set(story: list[tuple[list[Row], int | None]]) -> None:
    tracker = ViewTracker(CLUSTER)
    for version, (rows, leader) in enumerate(story, start=1):
        update = tracker.offer(view(version, *rows))
        assert update is not None
        assert (update.view.leader.port if update.view.leader else None) == leader, f"at version {version}"


@pytest.mark.parametrize("story", LEADER_STORIES.values(), ids=LEADER_STORIES.keys())
def test_a_leaders_epoch_stays_while_it_leads_and_grows_when_another_takes_over(
    story: list[tuple[list[Row], int | None]],
) -> None:
    tracker, previous = ViewTracker(CLUSTER), None
    for version, (rows, _) in enumerate(story, start=1):
        update = tracker.offer(view(version, *rows))
        assert update is not None
        current = update.view
        if current.leader is None:
            assert current.leader_epoch == 0
        elif previous is not None and previous.leader == current.leader:
            assert current.leader_epoch == previous.leader_epoch, f"at version {version}"
        else:
            assert current.leader_epoch == version, f"a new leader at version {version}"
        previous = current


def test_a_fresh_observer_names_the_oldest_active_silo() -> None:
    late_older = view(2, (1, 10, A), (2, 20, A))
    assert late_older.leader == addr(1, 10)
    tracker = ViewTracker(CLUSTER)
    update = tracker.offer(late_older)
    assert update is not None
    assert update.view.leader == addr(1, 10)


def test_views_pickle_for_spark_broadcasts_and_hash() -> None:
    cluster = view(9, (1, 1, A, {"zone": "a"}), (2, 2, A))
    copy = pickle.loads(pickle.dumps(cluster))
    assert copy == cluster
    assert copy.leader == cluster.leader
    assert dict(copy.silos[0].properties) == {"zone": "a"}
    assert hash(copy) == hash(cluster)
    assert len({*cluster.silos, *copy.silos}) == 2


def test_an_update_says_which_active_silos_are_about_to_change() -> None:
    """A suspicion of an Active silo is Sling's TOPOLOGY_CHANGING: the view is about to change."""
    when = datetime(2026, 1, 1, tzinfo=UTC)
    start = view(1, (1, 1, A), (2, 2, A), (3, 3, D))
    suspected, voter, gone = (entry(row).silo_address for row in ((1, 1, A), (2, 2, A), (3, 3, D)))

    def event(kind: EventKind, silo: SiloAddress) -> MembershipEvent:
        return MembershipEvent(kind, silo, "", 2, when, when, by=(voter,))

    events = (event(EventKind.SUSPECTED, suspected), event(EventKind.SUSPECTED, gone), event(EventKind.JOINED, voter))
    tracker = ViewTracker(CLUSTER)
    tracker.offer(start)
    update = tracker.offer(ClusterView(CLUSTER, 2, start.silos, events=events))
    assert update is not None
    assert update.changing == (suspected,), "only Active silos of the view; suspicions only"
