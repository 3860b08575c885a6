"""The dashboard's document: silos, the probe graph from the silos' own ring code, suspicions, latency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from membership_tables import MalformedRow, MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.dashboard.state import dashboard_document, latency_document, probe_edges, suspicions
from silo.events import membership_events
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
SILOS = [SiloAddress("10.0.0.1", 5000 + index, 7) for index in range(5)]
OPTIONS = SiloOptions.local()


def entry(
    silo: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, votes: tuple[tuple[int, float], ...] = ()
) -> MembershipEntry:
    return MembershipEntry(
        silo,
        status,
        silo_name=f"n{silo.port}",
        start_time=NOW - timedelta(minutes=1),
        i_am_alive_time=NOW - timedelta(seconds=2),
        suspect_times=tuple((SILOS[voter], NOW - timedelta(seconds=ago)) for voter, ago in votes),
    )


def table(version: int, *entries: MembershipEntry) -> MembershipTableData:
    return MembershipTableData(tuple((item, "e") for item in entries), TableVersion(version, "v"))


def test_the_probe_graph_is_what_each_active_silo_computes_for_itself() -> None:
    data = table(9, *(entry(silo) for silo in SILOS[:4]), entry(SILOS[4], SiloStatus.DEAD))
    edges = probe_edges(data, OPTIONS)
    active = SILOS[:4]
    for prober in active:
        mine = [edge["to"] for edge in edges if edge["from"] == str(prober)]
        assert mine == [str(target) for target in probe_targets(prober, active, OPTIONS.num_probed_silos)]
    assert str(SILOS[4]) not in {edge["to"] for edge in edges} | {edge["from"] for edge in edges}


def test_suspicions_list_fresh_votes_against_live_silos_with_their_age() -> None:
    expired = OPTIONS.death_vote_expiration + 1
    data = table(
        3,
        entry(SILOS[0], votes=((1, 0.5), (2, expired))),
        entry(SILOS[3], SiloStatus.DEAD, votes=((1, 0.1),)),
    )
    assert suspicions(data, OPTIONS, NOW) == [
        {
            "silo": str(SILOS[0]),
            "name": "n5000",
            "by": str(SILOS[1]),
            "at": "2026-01-01T11:59:59.500000+00:00",
            "age_s": 0.5,
        }
    ]


def test_latency_figures() -> None:
    assert latency_document([]) == {"reads": 0}
    figures = latency_document([0.002, 0.001, 0.010, 0.003])
    assert (figures["last_ms"], figures["p50_ms"], figures["max_ms"], figures["reads"]) == (3.0, 2.5, 10.0, 4)


def test_the_document_has_the_silos_in_address_order_and_the_timeline_newest_first() -> None:
    before = table(1, entry(SILOS[1], SiloStatus.JOINING))
    after = table(2, entry(SILOS[1]), entry(SILOS[0], SiloStatus.JOINING))
    later = table(3, entry(SILOS[1], votes=((0, 0),)), entry(SILOS[0]))
    timeline = [*membership_events(before, after, NOW), *membership_events(after, later, NOW)]
    document = dashboard_document(
        cluster_id="c", data=later, options=OPTIONS, now=NOW, timeline=timeline, latencies=[0.001]
    )
    assert [silo["address"] for silo in document["silos"]] == [str(SILOS[0]), str(SILOS[1])]
    assert document["counts"] == {"ACTIVE": 2}
    assert [(event["kind"], event["version"]) for event in document["timeline"]] == [
        ("suspected", 3),
        ("joined", 3),
        ("joined", 2),
    ]
    assert 0 <= document["silos"][0]["ring_angle"] < 360


def test_the_document_lists_malformed_rows() -> None:
    data = table(1, entry(SILOS[0]))
    bad = MalformedRow("znode /silo-membership/c/x", "not valid JSON")
    reported = MembershipTableData(data.rows, data.version, (bad,))
    document = dashboard_document(cluster_id="c", data=reported, options=OPTIONS, now=NOW, timeline=[], latencies=[])
    assert document["malformed"] == [{"key": bad.key, "reason": bad.reason}]
    assert [silo["address"] for silo in document["silos"]] == [str(SILOS[0])]
    empty = dashboard_document(cluster_id="c", data=None, options=OPTIONS, now=NOW, timeline=[], latencies=[])
    assert empty["malformed"] == []
