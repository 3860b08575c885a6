"""The ``silo`` command line: argument errors, ``silo status`` end to end, ``python -m silo``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from membership_tables import MembershipTable, SiloAddress, SiloStatus, open_table
from membership_tables.memory import InMemoryMembershipTable
from silo.cli.commands import main
from silo.exit_codes import ExitCode
from testbed.services.process import free_port
from tests.silo.rpc_fakes import entry

CLUSTER = "cli-cluster"


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = f"cli-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    InMemoryMembershipTable.reset(name)


def populated(uri: str) -> MembershipTable:
    table = open_table(uri, CLUSTER)
    table.initialize()
    address = SiloAddress("127.0.0.1", 40123, 1767225600123)
    assert table.insert_row(entry(address, SiloStatus.ACTIVE, silo_name="alpha"), table.read_all().version.next())
    return table


def test_status_prints_the_table(memory_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    populated(memory_uri)
    assert main(["status", "--table", memory_uri, "--cluster", CLUSTER]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"cluster {CLUSTER}  version 1  (1 active)"
    assert lines[1].split() == ["ADDRESS", "NAME", "STATUS", "LAST", "I-AM-ALIVE", "PROPERTIES", "SUSPICIONS"]
    assert lines[2].split()[:3] == ["127.0.0.1:40123@1767225600123", "alpha", "ACTIVE"]


def test_status_json_is_the_documented_document(memory_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    populated(memory_uri)
    assert main(["status", "--table", memory_uri, "--cluster", CLUSTER, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cluster"] == CLUSTER
    assert document["version"] == 1
    assert [silo["address"] for silo in document["silos"]] == ["127.0.0.1:40123@1767225600123"]
    assert set(document["silos"][0]) == {
        "address",
        "name",
        "status",
        "proxy_port",
        "start_time",
        "i_am_alive_time",
        "suspicions",
        "properties",
    }


def test_status_of_an_unreachable_table_fails_clearly_without_leaking_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    uri = f"postgresql+psycopg://silo:s3cret@127.0.0.1:{free_port()}/silo"
    code = main(["status", "--table", uri, "--cluster", CLUSTER])
    err = capsys.readouterr().err
    assert code != 0
    assert "silo: error: cannot read the membership table at" in err
    assert "s3cret" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--table", "memory://x", "--cluster", "c", "--port", "70000"], "port must be in 0..65535"),
        (["run", "--table", "memory://x", "--cluster", "c", "--port", "abc"], "expected a port number"),
        (["run", "--table", "memory://x", "--cluster", "c", "--preset", "fast"], "invalid choice: 'fast'"),
        (["run", "--table", "memory://x", "--cluster", "c", "--set", "probe_timeout"], "expected OPTION=VALUE"),
        (["run", "--table", "memory://x", "--cluster", "c", "--property", "zone"], "expected KEY=VALUE"),
        (["run", "--table", "memory://x", "--cluster", "c", "--handler", "wc=mod"], "expected NAME=module:function"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


RUN = ["run", "--table", "memory://cli-config", "--cluster", "c"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*RUN, "--set", "probe_timout=1s"], "unknown option 'probe_timout'; did you mean probe_timeout"),
        ([*RUN, "--set", "probe_timeout=soon"], "bad value for option probe_timeout"),
        (["run", "--table", "memory://x", "--cluster", "bad cluster!"], "invalid cluster id"),
        (["run", "--table", "nosuch://x", "--cluster", "c"], "unknown table URI scheme 'nosuch'"),
        ([*RUN, "--handler", "wc=no_such_module_anywhere:count"], "cannot import module 'no_such_module_anywhere'"),
        ([*RUN, "--handler", "wc=tests.silo.work_handlers:missing"], "has no attribute 'missing'"),
        ([*RUN, "--handler", "example.checksum=tests.silo.work_handlers:reverse"], "registered twice"),
        ([*RUN, "--property", "zone=a", "--property", "zone=b"], "--property zone is given twice"),
        (["status", "--table", "sqlite-file.db", "--cluster", "c"], "table URI must be a string like"),
        (["run", "--cluster", "c"], "silo run needs --table: give it, or set SILO_TABLE, or table in a --config"),
        (["status", "--table", "memory://x"], "silo status needs --cluster"),
    ],
)
def test_bad_configuration_exits_2_with_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("silo: error: ")
    assert message in err[0]


@pytest.mark.slow
def test_python_dash_m_silo_is_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "silo", "run", "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "--gateway-port" in result.stdout
    assert "--preset {local,production}" in result.stdout


@pytest.mark.slow
def test_run_exits_5_when_the_table_is_unreachable_while_joining() -> None:
    uri = f"postgresql+psycopg://silo:s3cret@127.0.0.1:{free_port()}/silo"
    argv = ["run", "--table", uri, "--cluster", CLUSTER, "--preset", "local", "--set", "max_join_attempt_time=1s"]
    result = subprocess.run(
        [sys.executable, "-m", "silo", *argv], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == ExitCode.TABLE_UNAVAILABLE_AT_START, result.stderr
    assert "listening" in result.stderr
    assert "s3cret" not in result.stderr
