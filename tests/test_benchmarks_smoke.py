"""Every benchmark runs end to end with ``--quick`` and writes well-formed JSON and a plot.

No timing is asserted here: speed is what the benchmarks report, not what tests check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = [
    "tables",
    "round_trips",
    "detection",
    "propagation",
    "accuracy",
    "scale",
    "spark_routing",
    "metrics_overhead",
    "slow_store",
]


NARROWER = {"round_trips": ["--backends", "postgres,consul"]}
"""Flags that narrow a quick run where another test covers the rest: each backend's round trips
are counted by tests/membership_tables/test_round_trips.py."""


@pytest.mark.slow
@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_quick_run_writes_its_json_and_plot(name: str, tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick", *NARROWER.get(name, []), "--output-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,  # the accuracy run holds a loss level and a flap level for 15 s each, beside ZooKeeper and Serf
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
    if name == "scale":  # each kill's removal is read from the write log; the simultaneous kill too
        size = document["results"]["sizes"]["20"]
        assert [(removal["dead"], removal["versions"] >= 2) for removal in size["removals"]] == [(True, True)]
        together = size["mass_kill"]["removals"]
        assert together["all_dead"] is True, size["mass_kill"]
        assert len(together["versions_per_removal"]) == 3
        assert 1 <= together["dead_write_versions"] <= 3


@pytest.mark.slow
def test_a_scale_run_whose_join_ran_out_of_time_still_watches_and_kills(tmp_path: Path) -> None:
    """With no time to join (``--join-timeout 0``) the size goes on: it says where the join stopped,
    watches the cluster as it stands, and kills Active hosted silos (``--victims hosted``: crashed in
    their host process, as when a stopped join leaves the victim processes joining), each
    removed in two versions (a vote and the Dead write: a crash refuses, so no death settles)."""
    argv = ["--quick", "--join-timeout", "0", "--mass-kill", "2", "--victims", "hosted", "--output-dir", str(tmp_path)]
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    size = json.loads((tmp_path / "scale.json").read_text())["results"]["sizes"]["20"]
    assert "error" not in size, size["error"]
    # stopped at the first look, however many were Active by then (all 20, at times, on a quick machine)
    assert 0 <= size["join_stopped"]["active"] <= 20
    assert "all_active_s" not in size
    assert size["false_deaths_steady"] == 0
    assert size["victims"] == "hosted silos, crashed in process"
    assert size["processes"] == 2, "no victim processes: the hosts alone"
    assert [(removal["dead"], removal["versions"]) for removal in size["removals"]] == [(True, 2)]
    assert size["mass_kill"]["removals"]["all_dead"] is True
    assert size["mass_kill"]["removals"]["versions_per_removal"] == [2, 2]
    assert size["mass_kill"]["not_stopped"] == [], "both hosts got to the crash"
    assert "Active when the join stopped after" in finished.stdout


@pytest.mark.slow
def test_a_tiny_serf_detection_run_times_a_crash_and_a_hang(tmp_path: Path) -> None:
    """Three ``serf agent`` processes (local profile) on loopback: one crash and one hang, each seen by both others."""
    from benchmarks.serf_group import serf_unavailable_reason

    reason = serf_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    argv = ["--quick", "--systems", "serf-local", "--sizes", "3", "--trials", "1", "--output-dir", str(tmp_path)]
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks.detection", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    results = json.loads((tmp_path / "detection.json").read_text())["results"]
    assert {system: results[system] for system in ("silos", "zookeeper", "partitions")} == {
        "silos": {},
        "zookeeper": {},
        "partitions": {},
    }
    run = results["serf"]["local"]["3"]
    assert run["error"] is None
    for mode in ("crash", "hang"):
        (trial,) = run[mode]["trials"]
        assert trial["observers"] == 2
        assert trial["first_failed"] is not None, trial
        assert trial["all_failed"] is not None, trial
        assert trial["first_failed"] <= trial["all_failed"]
    assert "Serf local  3" in finished.stdout  # its rows in the printed table


@pytest.mark.slow
def test_a_tiny_detection_run_measures_tls_beside_plaintext_with_their_ratio(tmp_path: Path) -> None:
    argv = ["--quick", "--systems", "silos", "--transport", "plaintext,tls", "--trials", "1", "--sizes", "3"]
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks.detection", *argv, "--output-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    results = json.loads((tmp_path / "detection.json").read_text())["results"]
    assert set(results["silos"]) == set(results["silos_tls"]) == {"3"}
    for mode in ("crash", "hang"):
        assert results["silos_tls"]["3"][mode]["table_dead"]["n"] == 1
        comparison = results["tls_vs_plaintext"]["3"][mode]
        assert comparison["tls_over_plaintext"] == comparison["tls_median_s"] / comparison["plaintext_median_s"]
    assert "Detection with mutual TLS beside plaintext" in finished.stdout
    for transport in ("silos", "silos_tls"):  # the takeover, on both transports: measured, and after the Dead row
        for mode in ("crash", "hang"):
            entry = results[transport]["3"][mode]
            assert entry["takeover"]["n"] == entry["dead_to_takeover"]["n"] == 1, entry
            assert entry["takeover_before_dead"] == 0, entry
            (trial,) = entry["trials"]
            assert trial["takeover_owner"] is not None
            assert trial["table_dead_s"] < trial["takeover_s"], trial
    assert "Dead row -> takeover" in finished.stdout


SIGTERMED_BENCHMARK = """
import dataclasses, sys, time
from pathlib import Path
from benchmarks.common import RunSettings, run_benchmark

@dataclasses.dataclass(frozen=True)
class Config:
    pass

marker = Path(sys.argv[1])

def measure():
    try:
        marker.write_text("measuring")
        time.sleep(60)
    finally:
        marker.write_text("cleaned up")
    return {}

run_benchmark("sigterm", RunSettings(False, marker.parent), Config(), measure, print, lambda results, path: None)
"""


def test_a_benchmark_stopped_with_sigterm_runs_its_cleanup(tmp_path: Path) -> None:
    """SIGTERM (kill, a timeout) must stop a benchmark's servers and silo processes, not orphan them."""
    marker = tmp_path / "marker"
    process = subprocess.Popen([sys.executable, "-c", SIGTERMED_BENCHMARK, str(marker)], cwd=ROOT)
    try:
        for _ in range(300):
            if marker.exists():
                break
            time.sleep(0.05)
        assert marker.read_text() == "measuring"
        process.terminate()
        process.wait(timeout=30)
    finally:
        process.kill()
    assert marker.read_text() == "cleaned up"
