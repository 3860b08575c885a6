"""docs/benchmarks.md is what ``python -m benchmarks.page`` makes of the committed results, and
benchmarks/results/ holds only the results that page shows (the latest run of each benchmark and scope)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks.common import RESULTS
from benchmarks.page import PAGE, render_page, shown_results


def test_the_committed_page_is_the_generators_output() -> None:
    assert PAGE.read_text() == render_page(), "docs/benchmarks.md is out of date: run python -m benchmarks.page"


def test_results_hold_exactly_the_files_the_page_shows() -> None:
    """A superseded run left beside the latest, or a shown file missing, fails here."""
    committed = sorted(path.name for path in RESULTS.glob("*.json"))
    assert committed == sorted(shown_results())
    assert [path.name for path in RESULTS.iterdir() if path.is_dir() and path.name not in {"quick", "tmp"}] == []


def test_a_changed_figure_changes_the_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results, ignore=shutil.ignore_patterns("quick", "tmp"))
    path = results / "scale_1000.json"
    document = json.loads(path.read_text())
    document["results"]["sizes"]["1000"]["all_active_s"] = 999.25
    path.write_text(json.dumps(document))
    page = render_page(results)
    assert page != render_page(RESULTS)
    assert "| 1000 | 20 | 999 |" in page
