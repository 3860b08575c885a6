"""The deployment examples in ``deploy/`` stay in step with the ``silo`` command and each other."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from argparse import Namespace
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto[server] (test dependency group)
from sqlalchemy.engine import make_url

from silo.cli.commands import build_parser
from silo.cli.configuration import resolve
from silo.spark import SIDECAR_ENV

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def substitute(text: str, values: dict[str, str], pattern: str) -> str:
    return re.sub(pattern, lambda match: values[match.group(1)], text)


def test_the_pod_template_runs_a_valid_silo_that_the_executor_names_as_its_sidecar() -> None:
    pod: dict[str, Any] = yaml.safe_load((DEPLOY / "kubernetes" / "executor-pod-template.yaml").read_text())
    (silo,) = pod["spec"]["initContainers"]
    assert silo["restartPolicy"] == "Always"  # a native sidecar: up before the executor, down after it
    values = {"POD_IP": "10.1.2.3", "POD_NAME": "p", "NODE_NAME": "n"}
    env = {
        variable["name"]: variable.get("value") or values["POD_IP"]  # the one fieldRef, status.podIP
        for variable in silo["env"]
    }
    argv = [substitute(arg, values, r"\$\((\w+)\)") for arg in [*silo["command"][1:], *silo["args"]]]
    args = resolve(build_parser, argv, env).args
    assert (args.command, args.host, args.port, args.cluster) == ("run", "10.1.2.3", 11111, "spark-workers")
    assert_runs_tls_and_probes_over_http(pod, silo, args)
    assert_no_secret_in_argv(argv, args)
    mounts = {mount["name"]: mount["mountPath"] for mount in silo["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    (password_mount,) = [name for name, path in mounts.items() if args.table_password_file == f"{path}/password"]
    assert volumes[password_mount]["secret"]["items"] == [{"key": "password", "path": "password"}]
    (executor,) = pod["spec"]["containers"]
    executor_env = {variable["name"]: variable.get("value") for variable in executor["env"]}
    assert substitute(executor_env[SIDECAR_ENV], values, r"\$\((\w+)\)") == f"{args.host}:{args.port}"


def assert_no_secret_in_argv(argv: list[str], args: argparse.Namespace) -> None:
    """The table URI has no password, and neither it nor anything secret is on the command line."""
    assert make_url(args.table).password is None, "the table URI must not carry the password"
    assert args.table_password_file, "the password comes from a file"
    assert not any("--table" in arg and "password" not in arg for arg in argv), argv


def assert_runs_tls_and_probes_over_http(pod: dict[str, Any], silo: dict[str, Any], args: Namespace) -> None:
    """Mutual TLS on the silo port with files from the mounted Secret; the kubelet probes the plain-HTTP
    health port (startup and readiness on /readyz, liveness on /livez); the drain fits the pod's grace."""
    assert not args.insecure
    mounts = {mount["name"]: Path(mount["mountPath"]) for mount in silo["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    for path in (args.tls_cert, args.tls_key, args.tls_ca):
        (name,) = [name for name, mounted in mounts.items() if Path(path).parent == mounted]
        assert Path(path).name in {item["path"] for item in volumes[name]["secret"]["items"]}
    ports = {port["name"]: port["containerPort"] for port in silo["ports"]}
    assert ports["health"] == args.health_port != args.port
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert silo[probe]["httpGet"] == {"path": path, "port": "health"}, probe
    assert args.shutdown_grace < pod["spec"]["terminationGracePeriodSeconds"]


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


def test_the_grafana_dashboard_queries_only_exported_metrics_and_uses_every_family() -> None:
    from silo.observability.catalogue import METRICS

    dashboard: dict[str, Any] = json.loads((DEPLOY / "grafana" / "silo-membership.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for query in queries for name in re.findall(r"\bsilo_[a-z_]+", query)}
    samples = {spec.name for spec in METRICS} | {f"{spec.name}_bucket" for spec in METRICS}
    assert used <= samples, f"queries name metrics no silo exports: {sorted(used - samples)}"
    assert {spec.name for spec in METRICS} <= {name.removesuffix("_bucket") for name in used}
