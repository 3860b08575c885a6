"""The cert-manager Certificates of ``deploy/kubernetes`` make files the silos and the Spark job accept.

Each Certificate is issued here as cert-manager would issue it (its key algorithm, SANs and
usages, signed by the Issuer's CA), written under the Secret's keys, mounted at the paths the pod
manifests map them to, and then checked by what a silo runs: ``silo run``'s start-up check of its
own certificate, the authorization of the job's calls, and a real mutual-TLS handshake between
the two in which each side verifies the other (OpenSSL checks the extended key usages and the
name callers verify).
"""

from __future__ import annotations

import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto[server] (test dependency group)
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from silo.cli.dev_ca import CA_CERT, CA_KEY, init_ca, sign_certificate
from silo.cli.tls_options import check_own_certificate
from silo.wire.peer_identity import RPC_ROLES, Role, authorize, cluster_dns_name, identity_from_sans
from silo.wire.tls import TlsSettings
from tests.test_deploy import KUBERNETES, containers, manifest, silo_args

CERTIFICATES = KUBERNETES / "silo-certificates.yaml"
CERTIFICATE_FIELDS = {
    "secretName", "commonName", "uris", "dnsNames", "usages", "privateKey", "duration", "renewBefore", "issuerRef",
}  # fmt: skip
"""The fields of cert-manager's v1 CertificateSpec these manifests use (a misspelt one is not among them)."""
USAGES = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}
"""cert-manager's names of the extended key usages ("digital signature" is a key usage)."""
SILO_PODS = ("executor-pod-template.yaml", "silo-daemonset.yaml")
JOB_PODS = ("executor-pod-template.yaml", "executor-pod-template-daemonset.yaml")


def documents() -> dict[str, dict[str, Any]]:
    """The Issuer and the Certificates, by ``kind/name``."""
    loaded = yaml.safe_load_all(CERTIFICATES.read_text())
    return {f"{document['kind']}/{document['metadata']['name']}": document for document in loaded}


def certificate_for(role: Role) -> dict[str, Any]:
    (spec,) = [
        document["spec"]
        for document in documents().values()
        if document["kind"] == "Certificate" and f"silo://role/{role.value}" in document["spec"]["uris"]
    ]
    return spec


def issue_as_cert_manager(spec: dict[str, Any], ca_directory: Path, secret: Path) -> Path:
    """What cert-manager writes into the Certificate's Secret: ``tls.crt``, ``tls.key`` and ``ca.crt``."""
    ca_cert = x509.load_pem_x509_certificate((ca_directory / CA_CERT).read_bytes())
    ca_key = serialization.load_pem_private_key((ca_directory / CA_KEY).read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    assert (spec["privateKey"]["algorithm"], spec["privateKey"]["size"]) == ("ECDSA", 256)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri) for uri in spec["uris"]]
    sans += [x509.DNSName(name) for name in spec.get("dnsNames", [])]
    cert = sign_certificate(
        ca_cert,
        ca_key,
        key.public_key(),
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spec["commonName"])]),
        sans=sans,
        usages=[USAGES[usage] for usage in spec["usages"] if usage in USAGES],
        valid_from=now - timedelta(minutes=1),
        valid_until=now + timedelta(hours=int(spec["duration"].removesuffix("h"))),
    )
    secret.mkdir(parents=True)
    (secret / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (secret / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (secret / "ca.crt").write_bytes((ca_directory / CA_CERT).read_bytes())
    return secret


def mount(pod_spec: dict[str, Any], container: dict[str, Any], secrets: dict[str, Path], root: Path) -> None:
    """Write the container's Secret volumes under ``root`` as the kubelet mounts them (``items``: key -> path)."""
    volumes = {volume["name"]: volume for volume in pod_spec["volumes"]}
    for volume_mount in container.get("volumeMounts", []):
        source = volumes[volume_mount["name"]].get("secret")
        if source is None or source["secretName"] not in secrets:
            continue
        directory = root / volume_mount["mountPath"].lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for item in source["items"]:
            (directory / item["path"]).write_bytes((secrets[source["secretName"]] / item["key"]).read_bytes())


def pod_spec_of(name: str) -> dict[str, Any]:
    document = manifest(name)
    spec: dict[str, Any] = document["spec"] if document["kind"] == "Pod" else document["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every Certificate issued from the Issuer's CA, by Secret name."""
    root = tmp_path_factory.mktemp("cert-manager")
    issuer = documents()["Issuer/silo-membership-ca"]
    ca_directory = root / issuer["spec"]["ca"]["secretName"]
    init_ca(ca_directory)
    return {
        document["spec"]["secretName"]: issue_as_cert_manager(
            document["spec"], ca_directory, root / document["spec"]["secretName"]
        )
        for document in documents().values()
        if document["kind"] == "Certificate"
    }


def test_each_certificate_uses_known_fields_and_names_the_issuer_of_the_clusters_ca() -> None:
    found = documents()
    assert {name.split("/")[0] for name in found} == {"Issuer", "Certificate"}
    for name, document in found.items():
        assert document["apiVersion"] == "cert-manager.io/v1", name
        if document["kind"] == "Certificate":
            assert set(document["spec"]) <= CERTIFICATE_FIELDS, name
            reference = document["spec"]["issuerRef"]
            assert f"{reference['kind']}/{reference['name']}" in found, name
            assert set(document["spec"]["usages"]) <= {"digital signature", *USAGES}, name


@pytest.mark.parametrize("pod", SILO_PODS)
def test_a_silo_starts_with_the_certificate_cert_manager_issues(
    pod: str, secrets: dict[str, Path], tmp_path: Path
) -> None:
    spec = pod_spec_of(pod)
    (silo,) = [container for container in containers(spec) if container.get("command", [""])[0] == "silo"]
    _, args, _ = silo_args(silo)
    mount(spec, silo, secrets, tmp_path)
    files = TlsSettings(*(str(tmp_path / path.lstrip("/")) for path in (args.tls_cert, args.tls_key, args.tls_ca)))
    check_own_certificate(files, args.cluster, Role.SILO)  # what `silo run` checks before it binds
    assert cluster_dns_name(args.cluster) in certificate_for(Role.SILO)["dnsNames"]


@pytest.mark.parametrize("pod", JOB_PODS)
def test_the_jobs_certificate_may_read_the_view_and_send_work_and_nothing_more(
    pod: str, secrets: dict[str, Path], tmp_path: Path
) -> None:
    spec = pod_spec_of(pod)
    (executor,) = spec["containers"]
    mount(spec, executor, secrets, tmp_path)
    (directory,) = [tmp_path / volume_mount["mountPath"].lstrip("/") for volume_mount in executor["volumeMounts"]
                    if (tmp_path / volume_mount["mountPath"].lstrip("/")).is_dir()]  # fmt: skip
    assert {path.name for path in directory.iterdir()} == {"ca.pem", "client.pem", "client-key.pem"}
    cert = x509.load_pem_x509_certificate((directory / "client.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    identity = identity_from_sans(sans.get_values_for_type(x509.UniformResourceIdentifier))
    allowed = {method for method in RPC_ROLES if authorize(method, identity, "spark-workers") is None}
    assert allowed == {"GetMembership", "WatchMembership", "Process"}


def test_silo_and_job_verify_each_other_in_a_mutual_tls_handshake(secrets: dict[str, Path]) -> None:
    """OpenSSL checks each side's chain, the silo certificate's serverAuth and the name callers verify,
    and the job certificate's clientAuth."""
    silo_secret = secrets[certificate_for(Role.SILO)["secretName"]]
    job_secret = secrets[certificate_for(Role.CLIENT)["secretName"]]
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=silo_secret / "ca.crt")
    server.load_cert_chain(silo_secret / "tls.crt", silo_secret / "tls.key")
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=job_secret / "ca.crt")
    client.load_cert_chain(job_secret / "tls.crt", job_secret / "tls.key")
    server_socket, client_socket = socket.socketpair()
    peers: dict[str, Any] = {}

    def accept() -> None:
        with server.wrap_socket(server_socket, server_side=True) as tls:
            peers["client"] = tls.getpeercert()

    accepting = threading.Thread(target=accept)
    accepting.start()
    with client.wrap_socket(client_socket, server_hostname=cluster_dns_name("spark-workers")) as tls:
        peers["server"] = tls.getpeercert()
    accepting.join(timeout=10)
    assert ("URI", "silo://role/client") in peers["client"]["subjectAltName"]
    assert ("URI", "silo://role/silo") in peers["server"]["subjectAltName"]
