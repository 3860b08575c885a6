"""The table's secret from a file or ``SILO_TABLE_PASSWORD``, put where each backend takes it; ``--table-option``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from membership_tables import ReadOnlyTableError
from membership_tables.read_only import ReadOnlyMembershipTable
from membership_tables.redaction import redact
from silo.cli.commands import main
from silo.cli.table_access import backend_options, open_configured_table, table_secret, with_secret
from silo.errors import OptionsError


def args(password_file: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(table_password_file=password_file)


def test_the_secret_comes_from_the_first_line_of_the_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("pw-Line-One-41\nignored\n")
    assert table_secret(args(str(path)), {}) == "pw-Line-One-41"
    assert redact("x pw-Line-One-41 y") == "x *** y"  # registered before anything can print it
    assert table_secret(args(), {"SILO_TABLE_PASSWORD": "pw-Env-42"}) == "pw-Env-42"
    assert table_secret(args(), {}) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read --table-password-file"), ("\n", "is empty; put the password on its first line")],
)
def test_an_unreadable_or_empty_file_is_refused_without_its_content(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "password"
    if content is not None:
        path.write_text(content)
    with pytest.raises(OptionsError, match=message):
        table_secret(args(str(path)), {})


def test_a_file_and_the_variable_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("a-Secret-43\n")
    with pytest.raises(OptionsError, match="keep one"):
        table_secret(args(str(path)), {"SILO_TABLE_PASSWORD": "b-Secret-44"})


def test_each_backend_gets_the_secret_its_way() -> None:
    assert with_secret("postgresql+psycopg://silo@db:5432/m", "p@ss:w/rd") == (
        "postgresql+psycopg://silo:p%40ss%3Aw%2Frd@db:5432/m",
        {},
    )
    assert with_secret("zookeeper://silo@zk1:2181,zk2:2181/chroot", "p@ss") == (
        "zookeeper://silo:p%40ss@zk1:2181,zk2:2181/chroot",
        {},
    )
    assert with_secret("consul://127.0.0.1:8500/prefix", "tok") == ("consul://127.0.0.1:8500/prefix", {"token": "tok"})
    assert with_secret("sqlite:///m.db", None) == ("sqlite:///m.db", {})


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("postgresql+psycopg://silo:inline@db/m", "has a password and"),
        ("postgresql+psycopg://db/m", "names no user"),
        ("zookeeper://zk1:2181/chroot", "needs the digest user"),
        ("dynamodb://t?region=eu-west-1", "takes no password"),
    ],
)
def test_a_secret_the_uri_cannot_take_is_refused(uri: str, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        with_secret(uri, "s3cret-45")


def test_table_options_are_numbers_where_they_read_as_numbers() -> None:
    assert backend_options([("statement_timeout", "10"), ("network_timeout", "2.5"), ("scheme", "https")]) == {
        "statement_timeout": 10,
        "network_timeout": 2.5,
        "scheme": "https",
    }
    with pytest.raises(OptionsError, match="given twice"):
        backend_options([("pool_size", "1"), ("pool_size", "2")])


def test_table_options_reach_the_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    common = ["--table", uri, "--cluster", "c"]
    assert main(["table", "init", uri, "--cluster", "c"], {}) == 0
    assert main(["status", *common, "--table-option", "statement_timeout=2"], {}) == 0
    assert main(["status", *common], {"SILO_TABLE_OPTION": "bogus=1"}) == 2
    assert "unknown SQL table options ['bogus']" in capsys.readouterr().err


@pytest.mark.parametrize("read_only", [True, False])
def test_read_commands_get_a_handle_that_refuses_writes(tmp_path: Path, read_only: bool) -> None:
    """What ``silo status`` (and ``--watch``) and ``silo dashboard`` open; ``kill`` and ``cleanup`` open it to write."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["table", "init", uri, "--cluster", "c"], {}) == 0
    opened = argparse.Namespace(table=uri, cluster="c", table_password_file=None, table_options=[("pool_size", "1")])
    with open_configured_table(opened, {}, read_only=read_only) as table:
        assert isinstance(table, ReadOnlyMembershipTable) == read_only
        if read_only:
            with pytest.raises(ReadOnlyTableError):
                table.delete_cluster_entries()
        assert table.read_version().version == 0
