"""The deployment examples in ``deploy/`` stay in step with the ``silo`` command and each other."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from argparse import Namespace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto[server] (test dependency group)
from kubernetes.client import ApiClient  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from membership_tables import SiloAddress, SiloStatus
from silo.cli.commands import build_parser
from silo.cli.configuration import resolve
from silo.client.topology import ClusterView, SiloInfo
from silo.spark import SIDECAR_ENV
from silo.spark.sidecar import SIDECAR_HOST_ENV, executor_sidecar

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
FIELDS = {"status.podIP": "10.1.2.3", "status.hostIP": "10.0.0.7", "spec.nodeName": "node-7", "metadata.name": "p"}
"""What the downward API gives each pod in these tests."""
IMAGE_USER = 10001
"""The uid of deploy/docker/Dockerfile's USER."""
MODELS = {("v1", "Pod"): "V1Pod", ("apps/v1", "DaemonSet"): "V1DaemonSet", ("v1", "Service"): "V1Service"}
"""The Kubernetes API model of each kind the manifests hold (the official client's)."""


def substitute(text: str, values: dict[str, str], pattern: str) -> str:
    return re.sub(pattern, lambda match: values[match.group(1)], text)


def manifest(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((KUBERNETES / name).read_text())
    return loaded


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: downward-API fields (``FIELDS``), then
    ``$(VAR)`` of a variable defined above expanded."""
    env: dict[str, str] = {}
    for variable in container.get("env", []):
        value = variable["value"] if "value" in variable else FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        env[variable["name"]] = substitute(value, env, r"\$\((\w+)\)")
    return env


def silo_args(container: dict[str, Any]) -> tuple[list[str], Namespace, dict[str, str]]:
    """A silo container's argv (``$(VAR)`` expanded as the kubelet does), what ``silo run`` makes of it
    with the container's environment, and that environment."""
    env = container_env(container)
    argv = [substitute(arg, env, r"\$\((\w+)\)") for arg in [*container["command"][1:], *container["args"]]]
    assert container["command"][0] == "silo"
    return argv, resolve(build_parser, argv, env).args, env


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def test_the_pod_template_runs_a_valid_silo_that_the_executor_names_as_its_sidecar() -> None:
    pod = manifest("executor-pod-template.yaml")
    (silo,) = pod["spec"]["initContainers"]
    assert silo["restartPolicy"] == "Always"  # a native sidecar: up before the executor, down after it
    argv, args, _ = silo_args(silo)
    assert (args.command, args.host, args.port, args.cluster) == ("run", FIELDS["status.podIP"], 11111, "spark-workers")
    assert_runs_tls_and_probes_over_http(pod["spec"], silo, args)
    assert_no_secret_in_argv(argv, args)
    mounts = {mount["name"]: mount["mountPath"] for mount in silo["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    (password_mount,) = [name for name, path in mounts.items() if args.table_password_file == f"{path}/password"]
    assert volumes[password_mount]["secret"]["items"] == [{"key": "password", "path": "password"}]
    (executor,) = pod["spec"]["containers"]
    assert container_env(executor)[SIDECAR_ENV] == f"{args.host}:{args.port}"


def assert_no_secret_in_argv(argv: list[str], args: argparse.Namespace) -> None:
    """The table URI has no password, and neither it nor anything secret is on the command line."""
    assert make_url(args.table).password is None, "the table URI must not carry the password"
    assert args.table_password_file, "the password comes from a file"
    assert not any("--table" in arg and "password" not in arg for arg in argv), argv


def assert_runs_tls_and_probes_over_http(pod_spec: dict[str, Any], silo: dict[str, Any], args: Namespace) -> None:
    """Mutual TLS on the silo port with files from the mounted Secret; the kubelet probes the plain-HTTP
    health port (startup and readiness on /readyz, liveness on /livez); the drain fits the pod's grace."""
    assert not args.insecure
    mounts = {mount["name"]: Path(mount["mountPath"]) for mount in silo["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod_spec["volumes"]}
    for path in (args.tls_cert, args.tls_key, args.tls_ca):
        (name,) = [name for name, mounted in mounts.items() if Path(path).parent == mounted]
        assert Path(path).name in {item["path"] for item in volumes[name]["secret"]["items"]}
    ports = {port["name"]: port["containerPort"] for port in silo["ports"]}
    assert ports["health"] == args.health_port != args.port
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert silo[probe]["httpGet"] == {"path": path, "port": "health"}, probe
    assert args.shutdown_grace < pod_spec["terminationGracePeriodSeconds"]


def test_the_systemd_unit_runs_a_valid_silo_and_spark_env_names_it() -> None:
    unit = (DEPLOY / "systemd" / "silo-sidecar.service").read_text()
    env_file = (DEPLOY / "systemd" / "sidecar.env").read_text()
    values = dict(line.split("=", 1) for line in env_file.splitlines() if line.strip() and not line.startswith("#"))
    unit_env = dict(line.split("=", 1) for line in re.findall(r"^Environment=(.*)$", unit, re.MULTILINE))
    credentials = "/run/credentials/silo-sidecar.service"
    environ = {**values, **{name: value.replace("%d", credentials) for name, value in unit_env.items()}}
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", unit, re.MULTILINE)
    argv = shlex.split(substitute(exec_start.replace("%H", "host-1"), values, r"\$\{(\w+)\}"))
    assert argv[0].endswith("/silo")
    args = resolve(build_parser, argv[1:], environ).args
    assert (args.command, args.host, args.port, args.cluster) == ("run", "10.0.0.5", 11111, "spark-workers")
    assert (args.tls_cert, args.tls_key, args.tls_ca) == (
        values["SILO_TLS_CERT"],
        values["SILO_TLS_KEY"],
        values["SILO_TLS_CA"],
    )
    assert_no_secret_in_argv(argv, args)
    (credential,) = re.findall(r"^LoadCredential=([^:]+):", unit, re.MULTILINE)
    assert args.table_password_file == f"{credentials}/{credential}"
    spark_env = (DEPLOY / "systemd" / "spark-env.sh").read_text()
    assert f'export {SIDECAR_ENV}="${{SILO_HOST}}:${{SILO_PORT}}"' in spark_env
    assert "RestartPreventExitStatus=2" in unit  # a configuration error is not retried
    assert args.tls_cert
    assert not args.insecure
    assert args.health_port == 8080
    assert "Type=notify" in unit  # READY=1 once Active: the Spark worker ordered after it waits for that
    (stop_timeout,) = re.findall(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE)
    assert args.shutdown_grace < int(stop_timeout)


def test_the_decommission_script_reads_the_settings_the_sidecars_env_file_defines() -> None:
    """It drains the silo that ``sidecar.env`` configures, with the same certificate, where the unit reads it."""
    script = (DEPLOY / "spark" / "decommission-worker.sh").read_text()
    unit = (DEPLOY / "systemd" / "silo-sidecar.service").read_text()
    env_file = (DEPLOY / "systemd" / "sidecar.env").read_text()
    (path,) = re.findall(r"^EnvironmentFile=(.*)$", unit, re.MULTILINE)
    assert f'. "${{SILO_ENV_FILE:-{path}}}"' in script
    defined = {line.split("=", 1)[0] for line in env_file.splitlines() if line.strip() and not line.startswith("#")}
    read = set(re.findall(r"\$\{(SILO_[A-Z_]+)", script)) - {"SILO_ENV_FILE", "SILO_BIN", "SILO_DRAIN_WAIT"}
    optional = {"SILO_ADVERTISE_HOST", "SILO_ADVERTISE_PORT"}  # when the silo advertises another address
    assert read - optional <= defined, sorted(read - optional - defined)
    assert {"SILO_HOST", "SILO_PORT", "SILO_CLUSTER", "SILO_TLS_CERT", "SILO_TLS_KEY", "SILO_TLS_CA"} <= read
    (shutdown_grace,) = re.findall(r"^SILO_SHUTDOWN_GRACE=(\d+)s$", env_file, re.MULTILINE)
    (drain_wait,) = re.findall(r"SILO_DRAIN_WAIT:-(\d+)s", script)
    assert int(shutdown_grace) < int(drain_wait)  # the wait outlasts the drain


def test_the_grafana_dashboard_queries_only_exported_metrics_and_uses_every_family() -> None:
    from silo.observability.catalogue import METRICS

    dashboard: dict[str, Any] = json.loads((DEPLOY / "grafana" / "silo-membership.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for query in queries for name in re.findall(r"\bsilo_[a-z_]+", query)}
    samples = {spec.name for spec in METRICS} | {f"{spec.name}_bucket" for spec in METRICS}
    assert used <= samples, f"queries name metrics no silo exports: {sorted(used - samples)}"
    assert {spec.name for spec in METRICS} <= {name.removesuffix("_bucket") for name in used}


def test_the_daemonset_runs_a_valid_silo_on_the_nodes_address_named_by_the_node() -> None:
    daemonset = manifest("silo-daemonset.yaml")
    spec = daemonset["spec"]["template"]["spec"]
    assert (
        daemonset["spec"]["selector"]["matchLabels"].items()
        <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    )
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # the table's Service name still resolves
    (silo,) = spec["containers"]
    argv, args, _ = silo_args(silo)
    assert (args.command, args.host, args.port, args.cluster) == (
        "run",
        FIELDS["status.hostIP"],
        11111,
        "spark-workers",
    )
    assert args.advertise_host in (None, args.host)
    assert dict(args.properties)["spark.host"] == FIELDS["spec.nodeName"]
    assert_runs_tls_and_probes_over_http(spec, silo, args)
    assert_no_secret_in_argv(argv, args)
    ports = {port["name"]: port["containerPort"] for port in silo["ports"]}
    assert (ports["silo"], ports["gateway"], ports["metrics"]) == (args.port, args.gateway_port, args.metrics_port)
    assert len(set(ports.values())) == len(ports)  # hostNetwork: each is a distinct port of the node


def test_the_daemonset_executor_template_names_its_nodes_silo() -> None:
    (silo,) = manifest("silo-daemonset.yaml")["spec"]["template"]["spec"]["containers"]
    _, args, silo_env = silo_args(silo)
    (executor,) = manifest("executor-pod-template-daemonset.yaml")["spec"]["containers"]
    env = container_env(executor)
    assert env[SIDECAR_ENV] == f"{args.host}:{args.port}"
    assert env[SIDECAR_HOST_ENV] == silo_env["NODE_NAME"] == FIELDS["spec.nodeName"]
    properties = {"spark.host": FIELDS["spec.nodeName"]}
    node_silo = SiloInfo(SiloAddress(args.host, args.port, 1), "n", SiloStatus.ACTIVE, 0, properties, datetime.now(UTC))
    other = SiloInfo(SiloAddress("10.0.0.8", args.port, 1), "o", SiloStatus.ACTIVE, 0, {}, datetime.now(UTC))
    view = ClusterView("spark-workers", 1, (node_silo, other))
    without_address = {name: value for name, value in env.items() if name != SIDECAR_ENV}
    for environ in (env, without_address):  # by its address, and by the node's name alone
        assert executor_sidecar(environ, lambda: "executor-pod", lambda _: False).find(view) == node_silo.address


def test_the_gateway_service_is_headless_over_the_daemonsets_silos_and_their_ports() -> None:
    service = manifest("silo-gateway-service.yaml")
    template = manifest("silo-daemonset.yaml")["spec"]["template"]
    (silo,) = template["spec"]["containers"]
    _, args, _ = silo_args(silo)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    named = {port["name"]: port["containerPort"] for port in silo["ports"]}
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert named[ports["gateway"]["targetPort"]] == ports["gateway"]["port"] == args.gateway_port
    assert named[ports["metrics"]["targetPort"]] == ports["metrics"]["port"] == args.metrics_port


def test_the_servicemonitor_scrapes_the_metrics_port_of_the_gateway_service() -> None:
    monitor = manifest("silo-servicemonitor.yaml")
    service = manifest("silo-gateway-service.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")


def kubernetes_manifests(*kinds: str) -> list[Any]:
    """Every document of ``deploy/kubernetes`` (of ``kinds``, if given), as pytest params named by file."""
    return [
        pytest.param(document, id=f"{path.stem}-{index}" if index else path.stem)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for index, document in enumerate(yaml.safe_load_all(path.read_text()))
        if not kinds or document["kind"] in kinds
    ]


@pytest.mark.parametrize("document", kubernetes_manifests(*(kind for _, kind in MODELS)))
def test_every_manifest_is_a_valid_object_of_its_kubernetes_api_model(document: dict[str, Any]) -> None:
    """The official client's model takes every field (a missing required field raises) and gives the
    same document back: a misspelt or misplaced field would be dropped, and the comparison fails."""
    model = MODELS[(document["apiVersion"], document["kind"])]
    client = ApiClient()
    parsed = client.deserialize(_Response(document), model)
    assert client.sanitize_for_serialization(parsed) == document


def test_every_manifest_is_of_a_kind_this_file_checks() -> None:
    kinds = {(param.values[0]["apiVersion"], param.values[0]["kind"]) for param in kubernetes_manifests()}
    # cert-manager's kinds are issued and checked by tests/test_deploy_certificates.py
    checked_elsewhere = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
    assert kinds <= {*MODELS, ("monitoring.coreos.com/v1", "ServiceMonitor"), *checked_elsewhere}


@pytest.mark.parametrize("document", kubernetes_manifests("Pod", "DaemonSet"))
def test_every_container_runs_as_a_user_without_privileges_on_a_read_only_root(document: dict[str, Any]) -> None:
    spec = document["spec"] if document["kind"] == "Pod" else document["spec"]["template"]["spec"]
    pod_context = spec["securityContext"]
    assert pod_context["runAsNonRoot"] is True
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    mounted = {volume["name"] for volume in spec["volumes"] if "emptyDir" in volume}
    for container in containers(spec):
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        if container.get("command", [""])[0] == "silo":
            assert context.get("runAsUser", pod_context.get("runAsUser")) == IMAGE_USER, container["name"]
            assert pod_context["fsGroup"] == IMAGE_USER  # the 0400 Secret files are the silo's group's
        else:  # Spark writes scratch files: on volumes of their own
            scratch = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
            assert {scratch.get("/tmp"), scratch.get("/opt/spark/work-dir")} <= mounted, container["name"]


class _Response:
    """What ``ApiClient.deserialize`` reads: a response whose body is the document as JSON."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.data = json.dumps(document)
