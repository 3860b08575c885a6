"""The deployment examples in ``deploy/`` stay in step with the ``silo`` command and each other."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto[server] (test dependency group)

from silo.cli.commands import build_parser
from silo.spark import SIDECAR_ENV

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def substitute(text: str, values: dict[str, str], pattern: str) -> str:
    return re.sub(pattern, lambda match: values[match.group(1)], text)


def test_the_pod_template_runs_a_valid_silo_that_the_executor_names_as_its_sidecar() -> None:
    pod: dict[str, Any] = yaml.safe_load((DEPLOY / "kubernetes" / "executor-pod-template.yaml").read_text())
    (silo,) = pod["spec"]["initContainers"]
    assert silo["restartPolicy"] == "Always"  # a native sidecar: up before the executor, down after it
    values = {
        "SILO_TABLE": "sqlite:///m.db",
        "SILO_CLUSTER": "c",
        "POD_IP": "10.1.2.3",
        "POD_NAME": "p",
        "NODE_NAME": "n",
    }
    argv = [substitute(arg, values, r"\$\((\w+)\)") for arg in [*silo["command"][1:], *silo["args"]]]
    args = build_parser().parse_args(argv)
    assert (args.command, args.host, args.port) == ("run", "10.1.2.3", 11111)
    assert silo["startupProbe"]["grpc"]["port"] == args.port
    (executor,) = pod["spec"]["containers"]
    env = {variable["name"]: variable.get("value") for variable in executor["env"]}
    assert substitute(env[SIDECAR_ENV], values, r"\$\((\w+)\)") == f"{args.host}:{args.port}"


def test_the_systemd_unit_runs_a_valid_silo_and_spark_env_names_it() -> None:
    unit = (DEPLOY / "systemd" / "silo-sidecar.service").read_text()
    env_file = (DEPLOY / "systemd" / "sidecar.env").read_text()
    values = dict(line.split("=", 1) for line in env_file.splitlines() if line.strip() and not line.startswith("#"))
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", unit, re.MULTILINE)
    argv = shlex.split(substitute(exec_start.replace("%H", "host-1"), values, r"\$\{(\w+)\}"))
    assert argv[0].endswith("/silo")
    args = build_parser().parse_args(argv[1:])
    assert (args.command, args.host, args.port, args.cluster) == ("run", "10.0.0.5", 11111, "spark-workers")
    spark_env = (DEPLOY / "systemd" / "spark-env.sh").read_text()
    assert f'export {SIDECAR_ENV}="${{SILO_HOST}}:${{SILO_PORT}}"' in spark_env
    assert "RestartPreventExitStatus=2" in unit  # a configuration error is not retried


def test_the_grafana_dashboard_queries_only_exported_metrics_and_uses_every_family() -> None:
    from silo.observability.catalogue import METRICS

    dashboard: dict[str, Any] = json.loads((DEPLOY / "grafana" / "silo-membership.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for query in queries for name in re.findall(r"\bsilo_[a-z_]+", query)}
    samples = {spec.name for spec in METRICS} | {f"{spec.name}_bucket" for spec in METRICS}
    assert used <= samples, f"queries name metrics no silo exports: {sorted(used - samples)}"
    assert {spec.name for spec in METRICS} <= {name.removesuffix("_bucket") for name in used}
