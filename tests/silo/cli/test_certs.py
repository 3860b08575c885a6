"""``silo certs`` and the TLS flags of ``silo run``: the development CA and the self-check at start."""

from __future__ import annotations

import argparse
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from silo.cli.commands import main
from silo.cli.tls_options import certificate_names, check_own_certificate, settings_from_args
from silo.wire.peer_identity import Role
from silo.wire.tls import TlsConfigError, TlsSettings
from tests.silo.certificates import TestCa


def test_certs_init_and_issue_write_a_ca_and_a_bound_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_dir = tmp_path / "ca"
    assert main(["certs", "init", str(ca_dir)]) == 0
    assert main(["certs", "issue", str(ca_dir), "--cluster", "prod", "--name", "silo-1", "--role", "silo"]) == 0
    out = capsys.readouterr().out
    assert (
        f"--tls-cert {ca_dir / 'silo-1.pem'} --tls-key {ca_dir / 'silo-1-key.pem'} --tls-ca {ca_dir / 'ca.pem'}" in out
    )
    assert stat.S_IMODE((ca_dir / "ca-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((ca_dir / "silo-1-key.pem").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((ca_dir / "silo-1.pem").read_bytes())
    assert sorted(certificate_names(cert)) == ["prod.silo-cluster", "silo://cluster/prod", "silo://role/silo"]
    settings = TlsSettings(ca_dir / "silo-1.pem", ca_dir / "silo-1-key.pem", ca_dir / "ca.pem")
    check_own_certificate(settings, "prod", Role.SILO)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["certs", "init", "{ca}"], "already holds a CA"),
        (["certs", "issue", "{empty}", "--cluster", "c", "--name", "n", "--role", "silo"], "no CA in"),
        (["certs", "issue", "{ca}", "--cluster", "bad id!", "--name", "n", "--role", "silo"], "invalid cluster id"),
        (["certs", "issue", "{ca}", "--cluster", "c", "--name", "../n", "--role", "silo"], "bad certificate name"),
    ],
)
def test_certs_errors_are_one_line(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    TestCa(tmp_path / "ca")
    (tmp_path / "empty").mkdir()
    argv = [part.format(ca=tmp_path / "ca", empty=tmp_path / "empty") for part in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]


def test_a_bad_role_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["certs", "issue", "dir", "--cluster", "c", "--name", "n", "--role", "admin"])
    assert exit_.value.code == 2
    assert "invalid choice: 'admin'" in capsys.readouterr().err


def args(preset: str = "production", insecure: bool = False, **files: str | None) -> argparse.Namespace:
    flags = {"tls_cert": None, "tls_key": None, "tls_ca": None, **files}
    return argparse.Namespace(preset=preset, insecure=insecure, **flags)


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        (args(), "the production preset needs TLS"),
        (args(insecure=True, tls_cert="c", tls_key="k", tls_ca="a"), "--insecure contradicts"),
        (args(tls_cert="c"), "missing --tls-key, --tls-ca"),
        (args("local", tls_key="k", tls_ca="a"), "missing --tls-cert"),
    ],
)
def test_tls_flags_are_all_or_nothing_and_plaintext_is_explicit(namespace: argparse.Namespace, message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        settings_from_args(namespace)


def test_plaintext_with_the_local_preset_or_insecure_and_tls_with_all_three_files() -> None:
    assert settings_from_args(args("local")) is None
    assert settings_from_args(args(insecure=True)) is None
    assert settings_from_args(args(tls_cert="c", tls_key="k", tls_ca="a")) == TlsSettings("c", "k", "a")


def test_the_own_certificate_check_names_each_misconfiguration(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "ca")
    other = TestCa(tmp_path / "other")
    good = ca.issue("good", "prod")
    cases = {
        "not of cluster 'prod'": ca.issue("stranger", "staging"),
        "a silo needs the SAN silo://role/silo": ca.issue("client", "prod", Role.CLIENT),
        "not now": ca.issue("old", "prod", expired=True),
        "was not issued by a CA of --tls-ca": other.issue("rogue", "prod", trust=ca.ca),
        "is not the key of --tls-cert": TlsSettings(good.cert, ca.issue("another", "prod").key, ca.ca),
    }
    for message, settings in cases.items():
        with pytest.raises(TlsConfigError, match=message):
            check_own_certificate(settings, "prod", Role.SILO)
    check_own_certificate(good, "prod", Role.SILO)
    with pytest.raises(TlsConfigError, match="not now"):
        check_own_certificate(good, "prod", Role.SILO, now=datetime.now(UTC) + timedelta(days=400))


def test_silo_run_refuses_a_certificate_of_another_cluster_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = TestCa(tmp_path / "ca")
    stranger = ca.issue("stranger", "staging")
    argv = ["run", "--table", "memory://tls-cli", "--cluster", "prod"]
    argv += ["--tls-cert", str(stranger.cert), "--tls-key", str(stranger.key), "--tls-ca", str(ca.ca)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "is a certificate of staging with silo, not of cluster 'prod'" in err[0]
