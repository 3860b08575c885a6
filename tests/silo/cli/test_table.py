"""``silo table init URI [--cluster ID]``: the schema, once, idempotent, errors without secrets."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from membership_tables import UNINITIALIZED_VERSION, open_table
from membership_tables.sql.grants import SILO_TABLES
from membership_tables.sql.schema import LIVE_VIEW
from silo.cli import main


def tables_in(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {
            name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        }


def test_init_creates_the_schema_and_nothing_else(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.db"
    assert main(["table", "init", f"sqlite:///{path}"]) == 0
    assert "membership schema ready at sqlite:///" in capsys.readouterr().out
    assert tables_in(path) >= {*SILO_TABLES, LIVE_VIEW}
    with open_table(f"sqlite:///{path}", "c1") as table:
        assert table.read_version() == UNINITIALIZED_VERSION  # no cluster named: no version row


def test_init_with_a_cluster_creates_its_version_row_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["table", "init", uri, "--cluster", "c1"]) == 0
    with open_table(uri, "c1") as table:
        first = table.read_version()
    assert first.version == 0
    assert main(["table", "init", uri, "--cluster", "c1"]) == 0
    assert "cluster 'c1' has its version row" in capsys.readouterr().out
    with open_table(uri, "c1") as table:
        assert table.read_version() == first  # never touched again


def test_an_unreachable_store_exits_1_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    uri = "postgresql://silo:init-pw-8d2@127.0.0.1:1/membership"
    assert main(["table", "init", uri]) == 1
    err = capsys.readouterr().err
    assert err.startswith("silo: error: cannot initialize the membership table at postgresql://silo:***@127.0.0.1:1/")
    assert "init-pw-8d2" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["table", "init", "redis://u:bad-pw-0@h/0"], "unknown table URI scheme"),
        (["table", "init", "memory://x", "--cluster", "bad id"], "invalid cluster id"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("silo: error: ")
    assert message in err
    assert "bad-pw-0" not in err


def test_table_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["table"])
    assert exited.value.code == 2
    assert "ACTION" in capsys.readouterr().err
