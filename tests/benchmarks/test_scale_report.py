"""What ``benchmarks.scale`` prints for a size's removals (``benchmarks.scale_report``)."""

from __future__ import annotations

from typing import Any

from benchmarks.scale_report import REMOVAL_HEADERS, caused_counted, caused_figure, join_stopped_line, removal_rows


def size_with_a_mass_kill(not_stopped: list[str]) -> dict[str, Any]:
    removals = {"versions_per_removal": [2, 0, 0], "victim_versions": 2, "dead_write_versions": 1, "span_versions": 3}
    mass = {"victims": 3, "all_dead_s": None, "not_stopped": not_stopped, "removals": removals, "caused": {}}
    return {"sizes": {"2000": {"removals": [{"versions": 2, "span_versions": 2}], "mass_kill": mass}}}


def test_the_victims_cell_says_how_many_never_crashed_so_no_dead_row_was_due() -> None:
    (row,) = removal_rows(size_with_a_mass_kill(["127.0.0.1:1@1", "127.0.0.1:2@1"]))
    cells = dict(zip(REMOVAL_HEADERS[:5], row[:5], strict=True))
    assert cells["killed at once"] == "3 (2 never crashed)"
    assert cells["all Dead s"] == "-"
    (row,) = removal_rows(size_with_a_mass_kill([]))
    assert row[3] == 3


def test_a_size_whose_join_stopped_counts_no_statements_caused_by_its_kills() -> None:
    results = size_with_a_mass_kill([])
    entry = results["sizes"]["2000"]
    entry["mass_kill"]["caused"] = {"all_reads": 1253}
    (row,) = removal_rows(results)
    assert row[REMOVAL_HEADERS.index("reads caused")] == 1253
    assert caused_counted(entry)
    entry["join_stopped"] = {"active": 1223, "joining": 777, "after_s": 300.3}
    (row,) = removal_rows(results)
    assert row[REMOVAL_HEADERS.index("reads caused")] == "-"
    assert not caused_counted(entry)
    line = join_stopped_line("2000", entry)
    assert line is not None
    assert "1223 Active" in line
    assert "not counted" in line


def test_a_negative_count_caused_by_kills_is_shown_as_no_measure() -> None:
    """The background's swing between the two windows exceeded what the kills caused (a 500-silo
    run counted -333 reads): "-", not a figure."""
    results = size_with_a_mass_kill([])
    results["sizes"]["2000"]["mass_kill"]["caused"] = {"all_reads": -333}
    (row,) = removal_rows(results)
    assert row[REMOVAL_HEADERS.index("reads caused")] == "-"
    assert caused_figure(-0.5) is None
    assert caused_figure(0) == 0
    assert caused_figure(None) is None
