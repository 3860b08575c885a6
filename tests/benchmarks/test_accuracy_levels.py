"""The accuracy benchmark's level flags and targets, and its counts from a history with a silo killed on purpose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchmarks.accuracy import parse
from benchmarks.accuracy_network import flap_target, loss_target, target_met
from benchmarks.lab_counts import declared_dead_after, history_counts
from membership_tables import MembershipEntry, SiloAddress, SiloStatus
from membership_tables.history import HistoryRecord

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
A = SiloAddress("10.0.0.1", 11111, 1)
B = SiloAddress("10.0.0.2", 11111, 1)
C = SiloAddress("10.0.0.3", 11111, 1)


def dead(target: SiloAddress, writer: SiloAddress, at: float, version: int) -> HistoryRecord:
    """``writer`` declares ``target`` Dead ``at`` seconds after T0, with ``writer``'s vote."""
    entry = MembershipEntry(
        silo_address=target,
        status=SiloStatus.DEAD,
        start_time=T0,
        i_am_alive_time=T0,
        silo_name="x",
        suspect_times=((writer, T0 + timedelta(seconds=at)),),
    )
    return HistoryRecord(version, str(writer), "update", entry, "", T0 + timedelta(seconds=at))


def test_a_killed_silos_dead_row_is_its_detection_not_a_false_death() -> None:
    killed_at = (T0 + timedelta(seconds=10)).timestamp()
    records = [dead(B, A, 5.0, 1), dead(C, A, 12.5, 2)]
    counts = history_counts(records, cut=(T0 + timedelta(seconds=60)).timestamp(), killed={str(C): killed_at})
    assert list(counts["declared"]) == [str(B)]
    assert counts["votes"] == 1
    assert declared_dead_after(records, str(C), killed_at) == pytest.approx(2.5)
    assert declared_dead_after(records, str(A), killed_at) is None


def test_a_silo_declared_dead_before_its_kill_is_still_a_false_death() -> None:
    records = [dead(C, A, 5.0, 1)]
    counts = history_counts(records, cut=(T0 + timedelta(seconds=60)).timestamp(), killed={str(C): 1e12})
    assert list(counts["declared"]) == [str(C)]


def test_each_level_has_its_target() -> None:
    assert loss_target(0.4) == "one_per_10_minutes"
    assert target_met("one_per_10_minutes", declared=1, zookeeper_expired=0, seconds=600.0) is True
    assert target_met("one_per_10_minutes", declared=2, zookeeper_expired=0, seconds=600.0) is False
    assert target_met("one_per_10_minutes", declared=1, zookeeper_expired=0, seconds=120.0) is False
    assert target_met("tenth_of_zookeeper", declared=2, zookeeper_expired=20, seconds=600.0) is True
    assert flap_target(1.0) == "zero"  # a 1 s cut heals before the 1.5 s floor less one 0.25 s probe interval
    assert flap_target(2.0) is None  # longer than the floor: it may kill


def test_naming_one_kind_of_level_runs_only_those() -> None:
    _, config = parse(["--loss-levels", "0.4"])
    assert (config.loss_levels, config.flap_levels) == ((0.4,), ())
    _, config = parse(["--flap-levels", "1,2", "--loss-seconds", "120"])
    assert (config.loss_levels, config.flap_levels, config.loss_seconds) == ((), (1.0, 2.0), 120.0)
    _, config = parse([])
    assert config.loss_levels == (0.1, 0.2, 0.3, 0.4)
    assert config.flap_levels == (1.0, 2.0)


@pytest.mark.parametrize(("flag", "value"), [("--loss-levels", "1.5"), ("--flap-levels", "0"), ("--flap-levels", "x")])
def test_bad_levels_are_refused_with_the_flag_named(flag: str, value: str) -> None:
    with pytest.raises(SystemExit, match=flag):
        parse([flag, value])
