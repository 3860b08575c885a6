"""``benchmarks.detection``'s takeover time: the keys it watches and how a trial's times are summarized (pure)."""

from __future__ import annotations

import pytest

from benchmarks.detection import summarize_trials
from benchmarks.silo_cluster import KillTrial, TakeoverPlan
from membership_tables import SiloAddress
from silo.work.hashring import HashRing

SILOS = [SiloAddress("127.0.0.1", 11000 + index, 1) for index in range(5)]


def test_the_plan_watches_keys_of_the_victim_that_all_go_to_one_new_owner() -> None:
    victim = SILOS[2]
    plan = TakeoverPlan.of(SILOS, victim, count=8)
    before, after = HashRing(SILOS), HashRing([silo for silo in SILOS if silo != victim])
    assert len(plan.items) == 8
    assert plan.owner != victim
    for key, payload in plan.items:
        assert before.owner(key) == victim
        assert after.owner(key) == plan.owner
        assert payload == key.encode()
    with pytest.raises(ValueError, match="only silo"):
        TakeoverPlan.of([victim], victim)


def trial(dead: float | None, takeover: float | None) -> KillTrial:
    return KillTrial("victim", 4, table_dead=dead, takeover=takeover, takeover_owner="owner")


def test_the_gap_is_counted_from_the_dead_row() -> None:
    assert trial(0.4, 0.45).dead_to_takeover == pytest.approx(0.05)
    assert trial(0.4, 0.45).to_json()["dead_to_takeover_s"] == pytest.approx(0.05)
    assert trial(0.4, None).dead_to_takeover is None  # not served within the bound
    assert trial(None, 0.45).dead_to_takeover is None


def test_the_summary_reports_takeover_and_gap_with_their_ratios_and_counts_a_takeover_before_the_dead_row() -> None:
    summary = summarize_trials("hang", [trial(1.4, 2.5), trial(1.4, 1.3), trial(1.4, None)])
    assert summary["takeover"]["n"] == summary["dead_to_takeover"]["n"] == 2
    assert summary["ratio_to_floor"]["takeover"]["median"] == pytest.approx(1.9 / 1.5)  # median of 2.5 and 1.3
    assert summary["takeover_before_dead"] == 1
    assert summary["takeover_missing"] == 1
