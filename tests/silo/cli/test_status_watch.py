"""``silo status --watch``: a frame per change, read on a period, never a busy loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from membership_tables import (
    MalformedRow,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from silo.cli.status_watch import membership_key, watch
from testbed.cluster_harness import ROOT
from testbed.services.process import wait_until
from tests.silo.rpc_fakes import T0, entry

A = SiloAddress("127.0.0.1", 40123, 1)
B = SiloAddress("127.0.0.1", 40124, 2)


def data(version: int, alive_s: int = 0, *extra: SiloAddress) -> MembershipTableData:
    rows = [entry(A, SiloStatus.ACTIVE, i_am_alive_time=T0 + timedelta(seconds=alive_s))]
    rows += [entry(silo, SiloStatus.JOINING) for silo in extra]
    return MembershipTableData(tuple((row, f"e{version}") for row in rows), TableVersion(version, "v"))


def test_a_frame_is_drawn_only_when_the_version_a_row_or_the_reachability_changes() -> None:
    reads: list[MembershipTableData | Exception] = [
        data(1),
        data(1),  # nothing changed: no frame
        data(2, 0, B),  # a new version
        data(2, 5, B),  # a heartbeat: the row changed, the version did not
        data(2, 5, B),
        TableUnavailableError("down"),
        TableUnavailableError("down"),  # the same error: no new frame
        data(3, 5, B),
    ]
    script = iter(reads)
    frames: list[str] = []
    waits: list[float] = []

    def read() -> MembershipTableData:
        item = next(script)
        if isinstance(item, Exception):
            raise item
        return item

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) == len(reads)  # stop after the last read

    drawn = watch(read, lambda snapshot: f"v{snapshot.version.version}", frames.append, sleep, 0.5)
    assert frames == ["v1", "v2", "v2", "down", "v3"]
    assert drawn == 5
    assert waits == [0.5] * len(reads), "one read per interval, each followed by a sleep"


def test_a_malformed_row_appearing_or_going_is_a_change() -> None:
    bad = MalformedRow("silo_membership row (...)", "suspect_times is not valid JSON")
    plain = data(1)
    reported = MembershipTableData(plain.rows, plain.version, (bad,))
    reads = iter([plain, reported, reported, plain])
    frames: list[str] = []
    watch(lambda: next(reads), lambda s: f"{len(s.malformed)}", frames.append, lambda _: len(frames) >= 3, 0.1)
    assert frames == ["0", "1", "0"]


def test_with_the_membership_key_a_heartbeat_alone_draws_nothing() -> None:
    """``--watch --json`` without ``--heartbeats``: one line per membership change."""
    suspected = data(3, 9, B)
    voted = MembershipTableData(
        ((suspected.rows[0][0].replace(suspect_times=((B, T0),)), "e3"), suspected.rows[1]), TableVersion(4, "v")
    )
    reads = [data(1), data(1, 5), data(1, 9), data(2, 9, B), data(2, 12, B), voted]
    script = iter(reads)
    frames: list[str] = []
    waits: list[float] = []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) == len(reads)

    watch(lambda: next(script), lambda s: f"v{s.version.version}", frames.append, sleep, 0.1, key=membership_key)
    assert frames == ["v1", "v2", "v4"]


@pytest.fixture
def table(tmp_path: Path) -> Iterator[tuple[str, MembershipTable]]:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with open_table(uri, "watched") as opened:
        opened.initialize()
        yield uri, opened


@pytest.mark.slow
def test_the_command_redraws_on_each_change_and_stops_on_sigint(
    table: tuple[str, MembershipTable], tmp_path: Path
) -> None:
    uri, store = table
    output = tmp_path / "watch.out"
    argv = [sys.executable, "-m", "silo", "status", "--table", uri, "--cluster", "watched"]
    argv += ["--watch", "--json", "--interval", "50ms"]
    with output.open("w") as sink:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:

        def frames() -> list[dict[str, Any]]:
            return [json.loads(line) for line in output.read_text().splitlines() if line.strip()]

        def shows(version: int) -> Callable[[], bool]:
            return lambda: bool(frames()[-1]["version"] == version)

        wait_until(lambda: len(frames()) == 1, 30, "the first frame")
        for version, silo in enumerate((A, B), start=1):
            assert store.insert_row(entry(silo, SiloStatus.JOINING), store.read_all().version.next())
            wait_until(shows(version), 30, f"the frame of version {version}")
        time.sleep(1.0)  # 20 more reads of an unchanged table
        assert [frame["version"] for frame in frames()] == [0, 1, 2]
        assert [silo["address"] for silo in frames()[-1]["silos"]] == [str(A), str(B)]
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
