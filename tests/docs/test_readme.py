"""The README stays short, and every figure of its results table is in the committed results file
its row names, written by the command its row gives."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common import RESULTS
from benchmarks.report import run_command
from tests.docs.markdown import first_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 15_000
NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:-\d[\d,]*(?:\.\d+)?)?\s*(%|ms)?")
"""A figure, with the unit of a range's end: "0.37", "1,000", "20%", "28 ms", "34.5-42 ms"."""
SCALES = {"": (1.0,), "%": (1.0, 100.0), "ms": (1000.0,)}
"""How a value may be shown: as stored; a fraction as a percentage; seconds as milliseconds."""


def results_rows(readme: str) -> list[dict[str, str]]:
    """The rows of the table under ``## Results``: column header -> cell."""
    return first_table(readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0])


def numbers_in(value: Any) -> Iterator[float]:
    """The figures a results document holds: values of its mappings, and numbers in their keys.

    Lists (raw samples, per-round series) are left out: among thousands of samples nearly any
    figure would be found."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if not math.isnan(value):
            yield float(value)
    elif isinstance(value, dict):
        for key, item in value.items():  # keys name what was measured: "1000", "split_3_2", "loss_20pct"
            yield from (float(number) for number in re.findall(r"\d+(?:\.\d+)?", key))
            yield from numbers_in(item)


def figures_in(text: str) -> list[tuple[str, str]]:
    """The figures of a cell with their units, leaving out what is in backticks (options, commands)."""
    figures = []
    for match in NUMBER.finditer(re.sub(r"`[^`]*`", "", text)):
        unit = match.group(2) or ""
        figures += [(number, unit) for number in re.findall(r"\d[\d,]*(?:\.\d+)?", match.group(0))]
    return figures


def figure_found(figure: str, unit: str, values: list[float]) -> bool:
    """``figure`` as written ("0.31", "1,000", "34.5") equals some value, rounded as written."""
    shown = float(figure.replace(",", ""))
    tolerance = 0.5 * 10 ** -len(figure.partition(".")[2]) + 1e-9
    return any(abs(value * scale - shown) <= tolerance for value in values for scale in SCALES[unit])


def missing_figures(row: dict[str, str]) -> list[str]:
    """What in ``row`` its results file does not back: the file, the command or a figure."""
    name = row["results file"].strip("`")
    path = RESULTS / name
    if not path.is_file():
        return [f"{name}: no such file in benchmarks/results"]
    document = json.loads(path.read_text())
    problems = []
    command = run_command(document)
    if row["command"].strip("`") != command:
        problems.append(f"{name}: the row says {row['command']}, the run was `{command}`")
    values = list(numbers_in({"config": document["config"], "results": document["results"]}))
    problems += [
        f"{name}: {figure}{unit} not found"
        for figure, unit in figures_in(row["what"]) + figures_in(row["result"])
        if not figure_found(figure, unit, values)
    ]
    return problems


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.read_bytes()) < MAX_BYTES, "move detail into docs/ and link to it"


def test_every_readme_result_is_in_its_results_file() -> None:
    rows = results_rows(README.read_text())
    assert len(rows) >= 5
    assert [problem for row in rows for problem in missing_figures(row)] == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"result": "median 0.16-987 s"}, "987 not found"),
        ({"result": "median 0.16-0.22 s, 7.5 ms later"}, "7.5ms not found"),
        ({"what": "crash to the Dead row, N = 50"}, "50 not found"),
        ({"command": "`python -m benchmarks.detection`"}, "the run was"),
        ({"results file": "`detection_lost.json`"}, "no such file"),
    ],
)
def test_a_figure_its_file_does_not_hold_is_reported(change: dict[str, str], problem: str) -> None:
    row = {
        "what": "crash (SIGKILL) to the Dead row, N = 5, 10, 20",
        "result": "median 0.16-0.22 s",
        "command": "`python -m benchmarks.detection --systems silos --sizes 5,10,20 --trials 10`",
        "results file": "`detection_takeover.json`",
    }
    assert missing_figures(row) == []
    found = missing_figures(row | change)
    assert found
    assert problem in found[0]


def test_the_readmes_links_into_the_repository_resolve() -> None:
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert targets
    assert [target for target in targets if not (ROOT / target).exists()] == []
