"""Options from flags, ``SILO_*`` variables and a TOML file: the precedence, the errors, ``silo config show``."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from membership_tables import SiloStatus, open_table
from silo.cli.commands import build_parser, main
from silo.cli.configuration import CONFIGURED_COMMANDS, command_parsers, reference, resolve, settings_of
from silo.errors import OptionsError
from testbed.cluster_harness import SiloProcess
from testbed.services.process import wait_until

DOCS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
BASE = ["run", "--table", "memory://x", "--cluster", "c"]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "silo.toml"
    path.write_text(text)
    return str(path)


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    config = write(tmp_path, 'port = 1111\nname = "from-file"\nhost = "10.0.0.1"\n[run]\nlog_level = "debug"\n')
    environ = {"SILO_PORT": "2222", "SILO_NAME": "from-env"}
    resolved = resolve(build_parser, [*BASE, "--config", config, "--port", "3333"], environ)
    args = resolved.args
    assert (args.port, args.name, args.host, args.log_level, args.preset) == (
        3333,
        "from-env",
        "10.0.0.1",
        "DEBUG",
        "production",
    )
    sources = resolved.sources
    assert sources["port"] == "flag --port"
    assert sources["name"] == "env SILO_NAME"
    assert sources["host"] == f"file {config}"
    assert sources["preset"] == "default"


def test_everything_may_come_from_the_environment_and_the_file_alone(tmp_path: Path) -> None:
    config = write(tmp_path, 'table = "memory://from-file"\n[run]\ninsecure = true\nproperty = {zone = "eu-1"}\n')
    args = resolve(build_parser, ["run"], {"SILO_CONFIG": config, "SILO_CLUSTER": "prod"}).args
    assert (args.table, args.cluster, args.insecure, args.properties) == (
        "memory://from-file",
        "prod",
        True,
        [("zone", "eu-1")],
    )


def test_a_command_specific_variable_wins_over_the_shared_one() -> None:
    environ = {"SILO_PORT": "11111", "SILO_DASHBOARD_PORT": "8081", "SILO_TABLE": "memory://x", "SILO_CLUSTER": "c"}
    assert resolve(build_parser, ["run"], environ).args.port == 11111
    dashboard = resolve(build_parser, ["dashboard"], environ)
    assert dashboard.args.port == 8081
    assert dashboard.sources["port"] == "env SILO_DASHBOARD_PORT"


def test_a_repeatable_option_comes_whole_from_the_first_source_that_gives_it(tmp_path: Path) -> None:
    config = write(tmp_path, '[run]\nset = ["probe_timeout=9s"]\nproperty = ["zone=file", "rack=file"]\n')
    environ = {"SILO_PROPERTY": "zone=env, rack=env"}
    args = resolve(build_parser, [*BASE, "--config", config, "--property", "zone=flag"], environ).args
    assert args.properties == [("zone", "flag")]  # the flag replaces the environment's list, not adds to it
    assert args.overrides == [("probe_timeout", "9s")]
    args = resolve(build_parser, [*BASE, "--config", config], environ).args
    assert args.properties == [("zone", "env"), ("rack", "env")]


def test_a_command_table_wins_over_the_top_level_and_keys_of_other_commands_are_ignored(tmp_path: Path) -> None:
    config = write(tmp_path, 'port = 1\ninterval = "5s"\n[run]\nport = 2\n[status]\njson = true\n')
    assert resolve(build_parser, [*BASE, "--config", config], {}).args.port == 2
    status = resolve(build_parser, ["status", "--table", "memory://x", "--cluster", "c", "--config", config], {})
    assert (status.args.interval, status.args.json) == (5.0, True)


def test_a_key_another_command_does_not_have_is_refused_whichever_command_runs(tmp_path: Path) -> None:
    config = write(tmp_path, "[status]\nport = 3\n")
    with pytest.raises(OptionsError, match=r"unknown key \[status\] port"):
        resolve(build_parser, [*BASE, "--config", config], {})


@pytest.mark.parametrize(
    ("environ", "toml", "message"),
    [
        ({"SILO_PORT": "eleven"}, "", "environment variable SILO_PORT (--port): expected a port number"),
        ({"SILO_PRESET": "fast"}, "", "environment variable SILO_PRESET (--preset) is 'fast'; choose one of"),
        ({"SILO_INSECURE": "maybe"}, "", "SILO_INSECURE is 'maybe'; --insecure is a switch"),
        ({}, "[run]\nport = 70000\n", "key port of"),
        ({}, "[run]\nprot = 1\n", "unknown key [run] prot in"),
        ({}, "colour = 1\n", "unknown key colour in"),
        ({}, "port = [1\n", "is not valid TOML"),
        ({}, "[run]\ninsecure = 'yes'\n", "must be true or false (--insecure is a switch)"),
    ],
)
def test_a_bad_value_names_its_source(
    tmp_path: Path, environ: dict[str, str], toml: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, toml)
    assert main([*BASE, "--config", config], environ) == 2
    err = capsys.readouterr().err
    assert err.startswith("silo: error: "), err
    assert message in err, err


def test_a_required_option_given_nowhere_names_every_way_to_give_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--table", "memory://x"], {}) == 2
    assert "silo status needs --cluster: give it, or set SILO_CLUSTER, or cluster in a --config file" in (
        capsys.readouterr().err
    )


def test_a_missing_config_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--config", str(tmp_path / "nope.toml")], {}) == 2
    assert "cannot read the configuration file" in capsys.readouterr().err


def test_config_show_prints_values_sources_and_masks_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, '[run]\nport = 1234\ntable_option = ["token=tok3n"]\n')
    environ = {"SILO_TABLE": "postgresql://silo:hunter2@db/m", "SILO_TABLE_PASSWORD": "pw-from-env"}
    assert main(["config", "show", "run", "--cluster", "c", "--config", config, "--name", "n1"], environ) == 0
    out = capsys.readouterr().out
    assert 'table = "postgresql://silo:***@db/m"  # env SILO_TABLE' in out
    assert f"port = 1234  # file {config}" in out
    assert 'name = "n1"  # flag --name' in out
    assert "# advertise_host is not set (default)" in out
    assert "hunter2" not in out
    assert "tok3n" not in out
    assert "pw-from-env" not in out
    assert '# table password = "***"  # env SILO_TABLE_PASSWORD' in out


def test_config_show_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"], {}) == 2
    assert "silo config show takes a command" in capsys.readouterr().err


def test_every_option_is_configurable_except_the_config_file_itself() -> None:
    """Derived from the parsers: a flag added to a command has a variable and a key at once."""
    parsers = command_parsers(build_parser())
    for command in CONFIGURED_COMMANDS:
        flags = {max(a.option_strings, key=len) for a in parsers[command]._actions if a.option_strings}
        configurable = {setting.flag for setting in settings_of(parsers[command])}
        assert flags - configurable <= {"--help", "--config", "--no-gateway"}, command


def test_the_configuration_reference_in_the_docs_is_the_parsers() -> None:
    text = DOCS.read_text()
    match = re.search(
        r"<!-- configuration reference: begin -->\n(.*?)<!-- configuration reference: end -->", text, re.S
    )
    assert match is not None, "docs/operations.md lost its generated configuration reference"
    assert match.group(1).strip() == reference(build_parser).strip(), (
        "docs/operations.md is out of date: regenerate the reference with "
        "python -c 'from silo.cli.commands import build_parser; from silo.cli.configuration import reference; "
        "print(reference(build_parser))'"
    )


def test_options_error_is_raised_for_environment_values_before_parsing() -> None:
    with pytest.raises(OptionsError, match="SILO_GATEWAY_PORT"):
        resolve(build_parser, BASE, {"SILO_GATEWAY_PORT": "-1"})


@pytest.mark.slow
def test_a_silo_runs_from_a_file_and_the_environment_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``silo run`` whose command line names only the file: its row shows the file's settings."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    config = write(
        tmp_path, f'table = "{uri}"\n[run]\npreset = "local"\nname = "from-file"\nproperty = {{zone = "eu-1"}}\n'
    )
    monkeypatch.setenv("SILO_CLUSTER", "configured")
    monkeypatch.setenv("SILO_RUN_PROPERTY", "zone=eu-2,rack=r9")  # the variable's list replaces the file's
    silo = SiloProcess([sys.executable, "-m", "silo", "run", "--config", config], tmp_path / "silo.log")
    try:
        address = silo.wait_listening()
        with open_table(uri, "configured") as table:
            wait_until(lambda: any(e.status == SiloStatus.ACTIVE for e in table.read_all().entries), 30, "Active")
            (row,) = table.read_all().entries
        assert row.silo_address == address
        assert row.silo_name == "from-file"
        assert dict(row.properties) == {"zone": "eu-2", "rack": "r9"}
        silo.send(signal.SIGTERM)
        assert silo.wait_exit(30) == 0
    finally:
        silo.close()
