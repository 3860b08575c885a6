"""``silo kill``, ``silo cleanup``, ``silo --version`` and ``silo status``'s refusals, on a SQLite file.

``silo kill`` on every other backend is in ``tests/membership_tables/test_admin_backends.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

import pytest

from membership_tables import (
    MembershipTable,
    ReadOnlyTableError,
    SiloAddress,
    SiloStatus,
    open_table,
)
from silo.cli.commands import main
from silo.exit_codes import ExitCode
from testbed.cluster_harness import sqlite_cluster
from tests.silo.rpc_fakes import T0, entry

CLUSTER = "c"
A = SiloAddress("10.0.0.1", 11111, 1)
A2 = SiloAddress("10.0.0.1", 11111, 2)
B = SiloAddress("10.0.0.2", 11111, 1)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'm.db'}"


def add(table: MembershipTable, *rows: tuple[SiloAddress, SiloStatus]) -> None:
    table.initialize()
    for address, status in rows:
        assert table.insert_row(entry(address, status), table.read_all().version.next())


def statuses(table: MembershipTable) -> dict[SiloAddress, SiloStatus]:
    return {e.silo_address: e.status for e in table.read_all().entries}


def test_kill_writes_the_row_dead_with_the_reason_and_bumps_the_version(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.ACTIVE), (B, SiloStatus.ACTIVE))
        before = table.read_all().version.version
        assert main(["kill", str(A), "--table", uri, "--cluster", CLUSTER, "--reason", "disk gone"], {}) == 0
        data = table.read_all()
        assert data.version.version == before + 1
        killed = data.get(A)
        assert killed is not None
        assert killed[0].status == SiloStatus.DEAD
        assert killed[0].properties["kill_reason"] == "disk gone"
        assert "@" in killed[0].properties["killed_by"]
        assert statuses(table)[B] == SiloStatus.ACTIVE
    assert f"silo {A} is Dead (disk gone)" in capsys.readouterr().out


def test_kill_of_host_port_picks_the_latest_generation(uri: str) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.DEAD), (A2, SiloStatus.ACTIVE), (B, SiloStatus.ACTIVE))
        assert main(["kill", "10.0.0.1:11111", "--table", uri, "--cluster", CLUSTER], {}) == 0
        assert statuses(table)[A2] == SiloStatus.DEAD


def test_kill_refuses_the_last_active_silo_unless_forced(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.ACTIVE), (B, SiloStatus.DEAD))
        version = table.read_all().version
        assert main(["kill", str(A), "--table", uri, "--cluster", CLUSTER], {}) == 1
        assert "is the last Active silo" in capsys.readouterr().err
        assert table.read_all().version == version
        assert statuses(table)[A] == SiloStatus.ACTIVE
        assert main(["kill", str(A), "--table", uri, "--cluster", CLUSTER, "--force"], {}) == 0
        assert statuses(table)[A] == SiloStatus.DEAD


def test_kill_of_an_unknown_or_dead_silo(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.DEAD))
    assert main(["kill", str(B), "--table", uri, "--cluster", CLUSTER], {}) == 1
    assert f"no silo {B} in the table" in capsys.readouterr().err
    assert main(["kill", str(A), "--table", uri, "--cluster", CLUSTER], {}) == 0
    assert "already Dead" in capsys.readouterr().out


def test_cleanup_removes_only_dead_rows_older_than_the_duration(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_table(uri, CLUSTER) as table:
        table.initialize()
        old = T0 - timedelta(days=30)
        for address, status in ((A, SiloStatus.DEAD), (B, SiloStatus.ACTIVE)):
            row = entry(address, status, start_time=old, i_am_alive_time=old)
            assert table.insert_row(row, table.read_all().version.next())
        assert main(["cleanup", "--older-than", "7d", "--table", uri, "--cluster", CLUSTER], {}) == 0
        assert set(statuses(table)) == {B}
    assert "removed 1 Dead row(s)" in capsys.readouterr().out


def test_admin_commands_and_status_refuse_a_missing_sqlite_file_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    uri = f"sqlite:///{missing}"
    assert main(["status", "--table", uri, "--cluster", CLUSTER], {}) == 1
    assert f"there is no SQLite database at {missing}" in capsys.readouterr().err
    assert main(["kill", str(A), "--table", uri, "--cluster", CLUSTER], {}) == 2
    assert main(["cleanup", "--older-than", "1d", "--table", uri, "--cluster", CLUSTER], {}) == 2
    assert "there is no SQLite database" in capsys.readouterr().err
    assert not missing.exists()


def test_status_of_an_unknown_cluster_fails_clearly(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.ACTIVE))
    assert main(["status", "--table", uri, "--cluster", "other"], {}) == 1
    assert "there is no cluster 'other'" in capsys.readouterr().err
    assert main(["status", "--table", uri, "--cluster", CLUSTER, "--json"], {}) == 0
    assert json.loads(capsys.readouterr().out)["silos"][0]["properties"] == {}


def test_version_is_the_package_metadata() -> None:
    result = subprocess.run([sys.executable, "-m", "silo", "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"silo {version('silo-membership')}"


def test_run_refuses_a_wildcard_host_without_an_advertised_one(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--table", "memory://wildcard", "--cluster", CLUSTER, "--preset", "local", "--host", "0.0.0.0"]
    assert main(argv, {}) == 2
    assert "give --advertise-host" in capsys.readouterr().err


def test_status_opens_a_sqlite_table_read_only(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_table(uri, CLUSTER) as table:
        add(table, (A, SiloStatus.ACTIVE))
    with open_table(uri, CLUSTER, read_only=True) as reader:
        assert reader.read_all().version.version == 1
        with pytest.raises(ReadOnlyTableError, match="opened read-only"):
            reader.update_i_am_alive(A, T0 + timedelta(days=1))
    assert main(["status", "--table", uri, "--cluster", CLUSTER], {}) == 0
    assert str(A) in capsys.readouterr().out


@pytest.mark.slow
def test_a_running_silo_that_is_killed_exits_declared_dead_and_its_peer_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite_cluster(tmp_path, "killed") as cluster:
        victim, peer = cluster.start_active(2)
        argv = ["kill", str(victim.address), "--table", cluster.table_uri, "--cluster", "killed", "--reason", "test"]
        assert main(argv, {}) == 0
        assert victim.wait_exit(30) == ExitCode.DECLARED_DEAD
        assert peer.running
        assert cluster.row(victim).properties["kill_reason"] == "test"
        assert cluster.row(peer).status == SiloStatus.ACTIVE
