"""``silo demo``: the real thing with fewer records, its cleanup, and its report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus, TableVersion, open_table
from silo.cli.demo_report import Death, DemoSummary, JobTotals
from testbed.cluster_harness import ROOT

DEMO_TIMEOUT = 240.0
EXIT_GRACE = 15.0
"""Seconds for processes to vanish after the demo exits (the JVM's Python workers exit on their own)."""
REQUIRED_KEYS = {"records_in", "records_out", "correct", "killed", "declared_dead_after_s", "rerouted", "per_silo"}


def start_demo(tmp_path: Path, *args: str, stdout: int) -> subprocess.Popen[str]:
    """``silo demo`` on a table in ``tmp_path`` (so its silos can be found by path), in its own session."""
    return subprocess.Popen(
        [sys.executable, "-m", "silo", "demo", "--table", f"sqlite:///{tmp_path / 'demo.db'}", *args],
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def leftovers(session: int, marker: str) -> list[str]:
    """Command lines of live processes in the demo's session or naming its directory (the silos)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, _group, sid = stat.read_text().rsplit(")", 1)[1].split()[:4]
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if state != "Z" and (int(sid) == session or marker in command):
            found.append(command)
    return found


def assert_nothing_left(session: int, marker: str) -> None:
    deadline = time.monotonic() + EXIT_GRACE
    while (left := leftovers(session, marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"the demo left processes behind: {left}"


@pytest.mark.slow
def test_demo_json_is_correct_and_leaves_nothing_behind(tmp_path: Path) -> None:
    demo = start_demo(tmp_path, "--records", "20000", "--json", stdout=subprocess.PIPE)
    try:
        stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, stderr
    summary = json.loads(stdout)  # stdout is the JSON object alone; progress went to stderr
    assert set(summary) >= REQUIRED_KEYS
    assert summary["correct"] is True
    assert summary["records_in"] == summary["records_out"] == 20000
    assert summary["checksum_out"] == summary["checksum_expected"]
    assert sum(summary["per_silo"].values()) == summary["records_out"]
    assert len(summary["per_silo"]) == 4
    killed = summary["killed"]
    assert killed in summary["per_silo"]
    assert summary["declared_dead_after_s"] is not None, "the killed silo was declared Dead"
    assert summary["declared_dead_after_s"] >= 0
    assert summary["declared_dead_by"] in summary["per_silo"]
    assert summary["declared_dead_by"] != killed
    assert 0 <= summary["rerouted"] < summary["records_out"]
    after = {silo["address"]: silo["status"] for silo in summary["status_after"]["silos"]}
    assert after[killed] == "DEAD"
    assert sorted(after.values()) == ["ACTIVE", "ACTIVE", "ACTIVE", "DEAD"]
    assert "partitions done" in stderr
    assert_nothing_left(demo.pid, str(tmp_path))
    with open_table(f"sqlite:///{tmp_path / 'demo.db'}", "demo") as table:
        statuses = {str(entry.silo_address): entry.status for entry in table.read_all().entries}
    assert statuses == dict.fromkeys(after, SiloStatus.DEAD)  # the survivors left gracefully


@pytest.mark.slow
def test_demo_over_tls_routes_every_record_through_tls_silos(tmp_path: Path) -> None:
    demo = start_demo(tmp_path, "--records", "20000", "--json", "--tls", stdout=subprocess.PIPE)
    try:
        stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["correct"] is True
    assert summary["records_out"] == 20000
    assert summary["declared_dead_after_s"] is not None
    assert "local preset, mutual TLS" in stderr
    assert "made a development CA" in stderr
    assert_nothing_left(demo.pid, str(tmp_path))
    with open_table(f"sqlite:///{tmp_path / 'demo.db'}", "demo") as table:
        rows = table.read_all().entries
    assert len(rows) == 4
    assert all(entry.properties.get("transport") == "tls" for entry in rows)


@pytest.mark.slow
def test_ctrl_c_stops_every_silo_and_the_jvm(tmp_path: Path) -> None:
    demo = start_demo(tmp_path, "--records", "2000000", stdout=subprocess.DEVNULL)
    try:
        assert demo.stderr is not None
        for line in demo.stderr:
            if "routing" in line:
                break
        demo.send_signal(signal.SIGINT)
        _, rest = demo.communicate(timeout=DEMO_TIMEOUT)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, rest
    assert "interrupted" in rest
    assert_nothing_left(demo.pid, str(tmp_path))


def test_demo_refuses_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "silo", "demo", "--silos", "1"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "needs at least 2" in result.stderr


def test_without_java_the_demo_says_what_to_install() -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "JAVA_HOME": ""}
    result = subprocess.run(
        [sys.executable, "-m", "silo", "demo"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "Spark needs Java 17" in result.stderr
    assert "make system-packages" in result.stderr


def sample_summary(records_out: int = 1000, checksum: int = 0xABC) -> DemoSummary:
    start = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    silos = [SiloAddress("127.0.0.1", 40000 + index, 1_000 + index) for index in range(3)]
    killed = silos[2]

    def entry(
        silo: SiloAddress, status: SiloStatus, votes: tuple[tuple[SiloAddress, datetime], ...] = ()
    ) -> MembershipEntry:
        return MembershipEntry(
            silo_address=silo,
            status=status,
            silo_name=f"s{silo.port - 40000}",
            start_time=start,
            i_am_alive_time=start,
            suspect_times=votes,
        )

    votes = ((silos[0], start + timedelta(seconds=11.5)), (silos[1], start + timedelta(seconds=12)))
    before = MembershipTableData(tuple((entry(silo, SiloStatus.ACTIVE), "e") for silo in silos), TableVersion(3, "v"))
    dead_row = entry(killed, SiloStatus.DEAD, votes)
    after = MembershipTableData(
        (*before.rows[:2], (dead_row, "e")),
        TableVersion(4, "v"),
    )
    per_silo = {str(silos[0]): 500, str(silos[1]): 300, str(killed): records_out - 800}
    return DemoSummary(
        cluster="demo",
        table="sqlite:///x.db",
        names={silo: f"s{silo.port - 40000}" for silo in silos},
        records_in=1000,
        keys=250,
        partitions=4,
        expected_checksum=0xABC,
        totals=JobTotals(records_out, checksum, per_silo, rerouted=120),
        death=Death.observe(killed, start + timedelta(seconds=10), "2/4 partitions were done", dead_row),
        before=before,
        before_at=start,
        after=after,
        after_at=start + timedelta(seconds=13),
        elapsed_s=42.0,
    )


def test_the_report_tells_the_story() -> None:
    summary = sample_summary()
    text = summary.render()
    assert summary.correct
    for expected in (
        "before the job (silo status)",
        "cluster demo  version 3  (3 active)",
        "Killed s2 (127.0.0.1:40002@1002) with SIGKILL when 2/4 partitions were done.",
        "Declared Dead 2.0s after the kill by s1 (127.0.0.1:40001@1001); votes: s0 at +1.5s, s1 at +2.0s.",
        "cluster demo  version 4  (2 active, 1 dead)",
        "Rerouted: 120 records",
        "(killed mid-job)",
        "CORRECT",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    document = summary.document()
    assert set(document) >= REQUIRED_KEYS
    assert document["declared_dead_after_s"] == 2.0
    assert document["killed"] == "127.0.0.1:40002@1002"
    assert json.loads(summary.render_json()) == document


@pytest.mark.parametrize(("records_out", "checksum"), [(999, 0xABC), (1000, 0xABD)])
def test_a_lost_record_or_a_wrong_checksum_is_reported(records_out: int, checksum: int) -> None:
    summary = sample_summary(records_out, checksum)
    assert not summary.correct
    assert summary.document()["correct"] is False
    assert "MISMATCH" in summary.render()
    assert "WRONG" in summary.render()
