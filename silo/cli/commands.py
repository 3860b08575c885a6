"""The ``silo`` command line (also ``python -m silo``).

``silo run`` runs one silo until it is signalled (SIGTERM/SIGINT: graceful stop, exit 0)
or declared dead (exit 3); ``silo status`` prints a cluster's membership table;
``silo dashboard`` serves a read-only web page of the cluster; ``silo certs`` makes a
development CA and certificates for mutual TLS (``--tls-cert/--tls-key/--tls-ca``);
``silo table init URI`` creates a store's schema (the only DDL); ``silo drain ADDRESS`` asks a
silo to drain and exit, as SIGTERM does. Bad
arguments, options or table URIs print one ``silo: error: ...`` line and exit 2. See
``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime

from membership_tables import MembershipTable, MembershipTableData, MembershipTableError, open_table
from membership_tables.redaction import redact
from silo.cli import certs, tls_options
from silo.cli.arguments import duration, handler_spec, key_value, port_number, repeatable
from silo.cli.dashboard import add_arguments as add_dashboard_arguments
from silo.cli.dashboard import run as run_dashboard
from silo.cli.demo import add_arguments as add_demo_arguments
from silo.cli.demo import run as run_demo
from silo.cli.drain import add_arguments as add_drain_arguments
from silo.cli.drain import run as run_drain
from silo.cli.log_format import LOG_FORMATS, configure_logging
from silo.cli.status import render_json, render_text, status_document
from silo.cli.status_watch import CLEAR_SCREEN, watch
from silo.cli.table import add_arguments as add_table_arguments
from silo.cli.table import run as run_table
from silo.errors import OptionsError
from silo.exit_codes import ExitCode
from silo.membership.options import PRESETS, SiloOptions
from silo.wire.peer_identity import Role
from silo.work.registry import HandlerRegistry

log = logging.getLogger("silo")

DEFAULT_SHUTDOWN_GRACE = 10.0
"""``--shutdown-grace`` in seconds: within Kubernetes' default 30 s termination grace and
systemd's ``TimeoutStopSec``."""

STATUS_FAILED = 1
"""``silo status`` could not read the table (it is unreachable or a row is malformed)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(getattr(args, "log_level", "INFO"), getattr(args, "log_format", "text"))
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "demo":
            return run_demo(args)
        if args.command == "dashboard":
            return run_dashboard(args, build_options)
        if args.command == "certs":
            return certs.run(args)
        if args.command == "table":
            return run_table(args)
        if args.command == "drain":
            return run_drain(args)
        return _status(args)
    except (OptionsError, MembershipTableError) as exc:
        # Configuration and URI errors; the table being down is handled per command.
        print(f"silo: error: {redact(str(exc))}", file=sys.stderr)
        return int(ExitCode.BAD_CONFIGURATION)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--table", required=True, metavar="URI", help="membership table URI, e.g. sqlite:///m.db")
    common.add_argument("--cluster", required=True, metavar="ID", help="cluster id (the table may hold several)")
    common.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default INFO",
    )
    common.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text (default) or json: one JSON object per line, membership events as structured fields",
    )
    parser = argparse.ArgumentParser(prog="silo", description="Orleans-style cluster membership silos.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", parents=[common], help="run one silo until signalled or declared dead")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default 127.0.0.1)")
    run.add_argument("--port", type=port_number, default=0, help="gRPC port; 0 picks a free one (default)")
    run.add_argument(
        "--gateway-port", type=port_number, default=0, help="client gateway port to listen on and advertise; 0 = none"
    )
    run.add_argument("--name", default=None, help="silo name (default: silo-PORT)")
    run.add_argument(
        "--preset", choices=sorted(PRESETS), default="production", help="option preset (default production)"
    )
    repeatable(
        run,
        "--set",
        "overrides",
        key_value("OPTION", "probe_timeout=2s"),
        "OPTION=VALUE",
        "override an option, e.g. probe_timeout=2s",
    )
    repeatable(
        run,
        "--property",
        "properties",
        key_value("KEY", "zone=eu-1"),
        "KEY=VALUE",
        "advertise a property in the row, e.g. zone=eu-1",
    )
    run.add_argument(
        "--history-file",
        default=None,
        metavar="PATH",
        help="append every membership change this silo writes to PATH as JSON lines (an audit trail)",
    )
    run.add_argument(
        "--claims-file",
        default=None,
        metavar="PATH",
        help="append what this silo may serve, at every change of it, to PATH as JSON lines "
        "(silo.runtime.claims.check_claims proves no key had two owners)",
    )
    run.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port; default: no metrics)",
    )
    run.add_argument(
        "--health-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve /livez and /readyz over plain HTTP at http://HOST:PORT (for orchestrators, also under TLS; "
        "0 picks a free port; default: none)",
    )
    run.add_argument(
        "--shutdown-grace",
        type=duration,
        default=DEFAULT_SHUTDOWN_GRACE,
        metavar="DURATION",
        help="on SIGTERM, time to write ShuttingDown, let Work calls in flight finish and write Dead before "
        f"exiting, e.g. 30s (default {DEFAULT_SHUTDOWN_GRACE:g}s)",
    )
    repeatable(
        run, "--handler", "handlers", handler_spec, "NAME=MODULE:FUNCTION", "serve a Work handler, e.g. wc=myjobs:count"
    )
    run.add_argument(
        "--no-reflection",
        dest="reflection",
        action="store_false",
        help="do not serve gRPC server reflection (on by default: grpcurl and grpcui list the services)",
    )
    tls_options.add_arguments(run)

    status = commands.add_parser("status", parents=[common], help="print the membership table of a cluster")
    status.add_argument("--json", action="store_true", help="print JSON (see docs/cli.md for the shape)")
    status.add_argument(
        "--watch", action="store_true", help="redraw whenever the version or a row changes, until Ctrl-C"
    )
    status.add_argument(
        "--interval",
        type=duration,
        default=1.0,
        help="with --watch: how often to read the table, e.g. 500ms or 2s (default 1s)",
    )

    dashboard = commands.add_parser(
        "dashboard", parents=[common], help="serve a read-only web page of the cluster (see docs/operations.md)"
    )
    add_dashboard_arguments(dashboard)

    drain = commands.add_parser("drain", help="ask one silo to drain and exit, as SIGTERM does")
    drain.add_argument("--log-level", default="WARNING", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    add_drain_arguments(drain)

    table = commands.add_parser("table", help="create a store's schema: silo table init URI (see docs/security.md)")
    add_table_arguments(table)

    demo = commands.add_parser("demo", help="4 silos, a PySpark job, one silo killed mid-job (see docs/spark.md)")
    add_demo_arguments(demo)

    certs_parser = commands.add_parser("certs", help="a development CA for mutual TLS (see docs/security.md)")
    certs.add_arguments(certs_parser)
    return parser


def build_properties(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``--property`` pairs as a mapping; a key given twice is an ``OptionsError``."""
    properties: dict[str, str] = {}
    for key, value in pairs:
        if key in properties:
            raise OptionsError(f"--property {key} is given twice ({properties[key]!r} and {value!r}); keep one")
        properties[key] = value
    return properties


def build_options(preset: str, overrides: Sequence[tuple[str, str]]) -> SiloOptions:
    """The preset with ``--set`` overrides applied (raises ``OptionsError`` naming the field)."""
    return PRESETS[preset]().with_overrides(dict(overrides))


def _run(args: argparse.Namespace) -> int:
    options = build_options(args.preset, args.overrides)
    properties = build_properties(args.properties)
    handlers = HandlerRegistry.from_specs(args.handlers)
    table = open_table(args.table, args.cluster)
    tls = tls_options.settings_from_args(args)
    if tls is not None:
        tls_options.check_own_certificate(tls, args.cluster, Role.SILO)
    from silo.runtime.process import SiloProcessConfig, run_process  # the runtime and gRPC load only to run

    config = SiloProcessConfig(
        cluster_id=args.cluster,
        host=args.host,
        port=args.port,
        gateway_port=args.gateway_port,
        name=args.name,
        options=options,
        properties=properties,
        handlers=handlers,
        history_file=args.history_file,
        claims_file=args.claims_file,
        metrics_port=args.metrics_port,
        table_uri=args.table,
        tls=tls,
        reflection=args.reflection,
        health_port=args.health_port,
        shutdown_grace=args.shutdown_grace,
    )
    return int(run_process(table, config))


def _status(args: argparse.Namespace) -> int:
    table = open_table(args.table, args.cluster)
    if args.watch:
        return _watch_status(args, table)
    try:
        snapshot = table.read_all()
    except MembershipTableError as exc:
        print(
            f"silo: error: cannot read the membership table at {redact(args.table)}: {redact(str(exc))}",
            file=sys.stderr,
        )
        return STATUS_FAILED
    if args.json:
        print(redact(render_json(args.cluster, snapshot)))
    else:
        print(redact(render_text(args.cluster, snapshot, datetime.now(UTC))))
    return int(ExitCode.OK)


def _watch_status(args: argparse.Namespace, table: MembershipTable) -> int:
    """``silo status --watch``: frames until SIGINT or SIGTERM (exit 0)."""
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    clear = sys.stdout.isatty() and not args.json

    def render(snapshot: MembershipTableData) -> str:
        if args.json:
            return json.dumps(status_document(args.cluster, snapshot))
        return render_text(args.cluster, snapshot, datetime.now(UTC))

    def write(text: str) -> None:
        text = redact(text)
        print(CLEAR_SCREEN + text if clear else text + ("" if args.json else "\n"), flush=True)

    def describe(exc: MembershipTableError) -> str:
        message = f"cannot read the membership table at {redact(args.table)}: {redact(str(exc))}; retrying"
        return json.dumps({"cluster": args.cluster, "error": message}) if args.json else message

    try:
        watch(table.read_all, render, write, stop.wait, args.interval, describe)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        table.close()
    return int(ExitCode.OK)
