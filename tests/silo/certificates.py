"""Certificates for TLS tests, made with the development CA (``silo.cli.dev_ca``) in a temp directory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from silo.cli.dev_ca import CA_CERT, init_ca, issue
from silo.wire.peer_identity import Role
from silo.wire.tls import TlsSettings


class TestCa:
    """One CA; ``issue`` returns the ``TlsSettings`` of a new certificate trusting this CA."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        init_ca(directory)
        self.ca = directory / CA_CERT

    def issue(
        self, name: str, cluster: str, *roles: Role, expired: bool = False, trust: Path | None = None
    ) -> TlsSettings:
        """A certificate of ``cluster`` with ``roles`` (default: silo); ``expired``: valid only last week;
        ``trust``: the CA file it trusts (default this CA's)."""
        window = {}
        if expired:
            now = datetime.now(UTC)
            window = {"valid_from": now - timedelta(days=7), "valid_until": now - timedelta(days=1)}
        issued = issue(self.directory, cluster=cluster, name=name, roles=roles or (Role.SILO,), **window)
        return TlsSettings(issued.cert, issued.key, trust or self.ca)


def tls_flags(settings: TlsSettings) -> list[str]:
    """``silo run`` arguments that use ``settings``."""
    return ["--tls-cert", str(settings.cert), "--tls-key", str(settings.key), "--tls-ca", str(settings.ca)]
