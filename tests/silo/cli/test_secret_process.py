"""A table password given by file reaches the store and nothing else: not ``ps``, the log, status or errors.

A real ``silo run`` process joins a MariaDB table as a least-privilege role that MariaDB
authenticates by password (a wrong one is refused, so the silo turning Active proves the
password from the file was used).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from silo.cli.table_access import PASSWORD_ENV
from testbed.cluster_harness import ROOT, Cluster
from testbed.services.mariadb import MariaDbServer
from testbed.services.process import free_port
from testbed.services.sql_roles import PASSWORD, initialize_as_admin, role_database

pytestmark = pytest.mark.slow


def silo_command(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "silo", *argv], capture_output=True, text=True, env=environ, timeout=60, check=False
    )


def test_a_password_given_by_file_never_appears_in_ps_logs_status_or_errors(
    mariadb_server: MariaDbServer, tmp_path: Path
) -> None:
    role = role_database(mariadb_server, "mysql", create_schema=initialize_as_admin, granted=True)
    url = make_url(role.role_url)
    assert url.password == PASSWORD
    without = url._replace(password=None).render_as_string(hide_password=False)
    secret = tmp_path / "table-password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)

    cluster = Cluster(tmp_path, without, "secretive", log_level="DEBUG", watch_uri=role.role_url)
    try:
        (silo,) = cluster.start_active(1, "--table-password-file", str(secret))
        cmdline = Path(f"/proc/{silo.pid}/cmdline").read_bytes().decode()
        assert str(secret) in cmdline
        assert PASSWORD not in cmdline
        assert PASSWORD not in Path(f"/proc/{silo.pid}/environ").read_bytes().decode(errors="replace")
        ps = subprocess.run(
            ["ps", "-ww", "-o", "args=", "-p", str(silo.pid)], capture_output=True, text=True, check=True
        )
        assert "--table-password-file" in ps.stdout
        assert PASSWORD not in ps.stdout

        common = ["--table", without, "--cluster", "secretive"]
        status = silo_command("status", *common, "--json", env={"SILO_TABLE_PASSWORD_FILE": str(secret)})
        assert status.returncode == 0, status.stderr
        assert str(silo.address) in status.stdout
        assert PASSWORD not in status.stdout + status.stderr
        shown = silo_command("config", "show", "run", *common, env={PASSWORD_ENV: PASSWORD})
        assert shown.returncode == 0, shown.stderr
        assert PASSWORD not in shown.stdout + shown.stderr

        closed = url._replace(password=None, port=free_port()).render_as_string(hide_password=False)
        unreachable = silo_command("status", "--table", closed, "--cluster", "secretive", env={PASSWORD_ENV: PASSWORD})
        assert unreachable.returncode == 1
        assert "cannot read the membership table" in unreachable.stderr
        assert PASSWORD not in unreachable.stderr + unreachable.stdout
        wrong = tmp_path / "wrong-password"
        wrong.write_text("not-the-password-9c1e\n")
        refused = silo_command("status", *common, "--table-password-file", str(wrong), env={})
        assert refused.returncode != 0
        assert "not-the-password-9c1e" not in refused.stderr + refused.stdout
        both = silo_command("status", *common, "--table-password-file", str(secret), env={PASSWORD_ENV: PASSWORD})
        assert both.returncode == 2
        assert "keep one" in both.stderr
        assert PASSWORD not in both.stderr

        silo.send(15)
        assert silo.wait_exit(30) == 0
        log = silo.log_text()
        assert "listening" in log
        assert PASSWORD not in log
    finally:
        cluster.close()
