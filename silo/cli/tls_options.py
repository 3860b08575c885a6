"""The TLS flags of ``silo run`` and the check of the silo's own certificate before it starts.

``--tls-cert/--tls-key/--tls-ca`` turn mutual TLS on (all three, or none). Plaintext must be
chosen explicitly: the ``local`` preset allows it, the ``production`` preset needs ``--insecure``.
Before the silo binds or writes anything, its certificate is checked here so a misconfigured
silo stops with one clear line: the key matches the certificate, the certificate is valid now,
was issued by a CA of ``--tls-ca`` and names this cluster and the silo role. The cluster's
silos check the same things again on every call (``silo.wire.peer_identity``): this check
only turns a refusal at run time into an error message at start.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from silo.wire.peer_identity import Role, cluster_uri, identity_from_sans, role_uri
from silo.wire.tls import TlsConfigError, TlsSettings, read_material

PLAINTEXT_PRESETS = frozenset({"local"})
"""Presets under which a silo may run without TLS and without ``--insecure``."""

ISSUE_HINT = "silo certs issue DIR --cluster {cluster} --name NAME --role silo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert", metavar="PEM", help="this silo's certificate (chain); turns on mutual TLS")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument("--tls-ca", metavar="PEM", help="the CA certificates peers must be signed by")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve and call in plaintext with the production preset (anyone who reaches the port can call it)",
    )


def settings_from_args(args: argparse.Namespace) -> TlsSettings | None:
    """The TLS settings of ``silo run`` (None = plaintext); ``TlsConfigError`` names what is missing."""
    plaintext_hint = (
        f"the {args.preset} preset needs TLS: give --tls-cert, --tls-key and --tls-ca "
        "(make them with silo certs init DIR and silo certs issue), or --insecure to run in plaintext"
    )
    return _settings(args, None if args.preset in PLAINTEXT_PRESETS else plaintext_hint)


def caller_settings_from_args(args: argparse.Namespace, command: str) -> TlsSettings | None:
    """The TLS settings of a command that calls a silo (None = plaintext, only with ``--insecure``)."""
    return _settings(
        args,
        f"{command} calls the silo over mutual TLS: give --tls-cert, --tls-key and --tls-ca (a silo "
        "certificate of the cluster), or --insecure for a plaintext silo",
    )


def _settings(args: argparse.Namespace, plaintext_refusal: str | None) -> TlsSettings | None:
    """``plaintext_refusal``: the error when no TLS flag and no ``--insecure`` is given (None: plaintext then)."""
    given = {"--tls-cert": args.tls_cert, "--tls-key": args.tls_key, "--tls-ca": args.tls_ca}
    if not any(given.values()):
        if args.insecure or plaintext_refusal is None:
            return None
        raise TlsConfigError(plaintext_refusal)
    if args.insecure:
        raise TlsConfigError("--insecure contradicts --tls-cert/--tls-key/--tls-ca; keep one or the other")
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise TlsConfigError(f"TLS needs --tls-cert, --tls-key and --tls-ca together; missing {', '.join(missing)}")
    return TlsSettings(args.tls_cert, args.tls_key, args.tls_ca)


def check_own_certificate(settings: TlsSettings, cluster: str, role: Role, now: datetime | None = None) -> None:
    """Raise ``TlsConfigError`` unless the files make a usable identity of ``role`` in ``cluster``."""
    material = read_material(settings)
    now = now or datetime.now(UTC)
    try:
        cert = x509.load_pem_x509_certificate(material.cert)
        cas = x509.load_pem_x509_certificates(material.ca)
        key = serialization.load_pem_private_key(material.key, password=None)
    except (ValueError, TypeError) as exc:
        raise TlsConfigError(
            f"cannot parse the TLS files ({settings.cert}, {settings.key}, {settings.ca}): {exc}"
        ) from exc
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.PEM, public) != cert.public_key().public_bytes(
        serialization.Encoding.PEM, public
    ):
        raise TlsConfigError(f"--tls-key {settings.key} is not the key of --tls-cert {settings.cert}")
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise TlsConfigError(
            f"--tls-cert {settings.cert} is valid from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now; "
            f"issue a new one: {ISSUE_HINT.format(cluster=cluster)}"
        )
    if not any(_issued_by(cert, ca) for ca in cas):
        raise TlsConfigError(
            f"--tls-cert {settings.cert} was not issued by a CA of --tls-ca {settings.ca}; "
            "give the CA the cluster trusts, or a certificate it issued"
        )
    identity = identity_from_sans(certificate_names(cert))
    if identity.clusters != {cluster}:
        raise TlsConfigError(
            f"--tls-cert {settings.cert} is {identity.describe()}, not of cluster {cluster!r} "
            f"(it needs the SAN {cluster_uri(cluster)}); issue one: {ISSUE_HINT.format(cluster=cluster)}"
        )
    if role not in identity.roles:
        raise TlsConfigError(
            f"--tls-cert {settings.cert} is {identity.describe()}; a {role.value} needs the SAN {role_uri(role)}"
        )


def certificate_names(cert: x509.Certificate) -> list[str]:
    """The URI and DNS subject alternative names of ``cert`` (none if it has no SAN extension)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*sans.get_values_for_type(x509.UniformResourceIdentifier), *sans.get_values_for_type(x509.DNSName)]


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
