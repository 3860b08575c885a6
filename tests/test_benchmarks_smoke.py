"""Every benchmark runs end to end with ``--quick`` and writes well-formed JSON and a plot.

No timing is asserted here: speed is what the benchmarks report, not what tests check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ["tables", "detection", "propagation", "accuracy", "scale", "spark_routing", "metrics_overhead"]


@pytest.mark.slow
@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_quick_run_writes_its_json_and_plot(name: str, tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick", "--output-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,  # the accuracy run holds three loss levels for 30 s each, beside ZooKeeper, on a busy CI machine
        check=False,
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    document = json.loads((tmp_path / f"{name}.json").read_text())
    assert document["benchmark"] == name
    assert document["quick"] is True
    assert {"cpu", "cores", "memory_mb", "python", "packages"} <= set(document["machine"])
    assert document["config"]
    assert document["results"]
    assert (tmp_path / f"{name}.png").stat().st_size > 0
