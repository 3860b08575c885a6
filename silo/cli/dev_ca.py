"""A development certificate authority: ``silo certs init DIR`` and ``silo certs issue DIR ...``.

``init`` writes ``DIR/ca.pem`` (the CA certificate every silo and client trusts, ``--tls-ca``)
and ``DIR/ca-key.pem`` (its private key: keep it off the silos). ``issue`` writes
``DIR/NAME.pem`` and ``DIR/NAME-key.pem``, a certificate signed by the CA whose subject
alternative names bind it to one cluster and role (``silo.wire.peer_identity``). Keys are
ECDSA P-256; private keys are written mode 0600. Good enough to turn TLS on in a minute; a
production deployment issues the same SANs from its own PKI.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from membership_tables.model import validate_cluster_id
from silo.errors import OptionsError
from silo.wire.peer_identity import Role, cluster_dns_name, cluster_uri, role_uri

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
CA_DAYS = 3650
CERT_DAYS = 365
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class CertificateError(OptionsError):
    """A CA or certificate cannot be made or used as asked; the message says what to do."""


@dataclass(frozen=True)
class IssuedCertificate:
    cert: Path
    key: Path


def init_ca(directory: Path, *, common_name: str = "silo development CA") -> Path:
    """Create the CA in ``directory`` (made if missing); refuses to overwrite an existing one."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if cert_path.exists() or key_path.exists():
        raise CertificateError(f"{directory} already holds a CA ({CA_CERT}); use another directory or issue from it")
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path


def issue(
    directory: Path,
    *,
    cluster: str,
    name: str,
    roles: tuple[Role, ...],
    valid_from: datetime | None = None,
    valid_until: datetime | None = None,
) -> IssuedCertificate:
    """Issue ``NAME.pem``/``NAME-key.pem`` in ``directory`` from its CA (overwriting an older pair).

    ``valid_from``/``valid_until`` default to now-5min / now+365 days (tests pass a past
    window to make an expired certificate).
    """
    validate_cluster_id(cluster)
    if not _NAME_RE.match(name):
        raise CertificateError(f"bad certificate name {name!r}: use letters, digits, '.', '_' or '-' (e.g. silo-1)")
    if not roles:
        raise CertificateError("a certificate needs a role: --role silo or --role client")
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = sign_certificate(
        ca_cert,
        ca_key,
        key.public_key(),
        subject=x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, name),
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, cluster),
            ]
        ),
        sans=[
            x509.UniformResourceIdentifier(cluster_uri(cluster)),
            *(x509.UniformResourceIdentifier(role_uri(role)) for role in roles),
            x509.DNSName(cluster_dns_name(cluster)),
        ],
        usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        valid_from=valid_from or now - timedelta(minutes=5),
        valid_until=valid_until or now + timedelta(days=CERT_DAYS),
    )
    issued = IssuedCertificate(directory / f"{name}.pem", directory / f"{name}-key.pem")
    _write_key(issued.key, key)
    issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return issued


def sign_certificate(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    public_key: ec.EllipticCurvePublicKey,
    *,
    subject: x509.Name,
    sans: list[x509.GeneralName],
    usages: list[x509.ObjectIdentifier],
    valid_from: datetime,
    valid_until: datetime,
) -> x509.Certificate:
    """A leaf certificate for ``public_key`` signed by the CA: these SANs and extended key usages."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not (cert_path.is_file() and key_path.is_file()):
        raise CertificateError(
            f"no CA in {directory} ({CA_CERT}, {CA_KEY}); create one with: silo certs init {directory}"
        )
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{key_path} is not an ECDSA key made by silo certs init; make a new CA")
    return x509.load_pem_x509_certificate(cert_path.read_bytes()), key


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
