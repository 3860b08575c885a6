"""The ``silo`` command line (also ``python -m silo``).

``silo run`` runs one silo until it is signalled (SIGTERM/SIGINT: graceful stop, exit 0)
or declared dead (exit 3); ``silo status`` prints a cluster's membership table;
``silo dashboard`` serves a read-only web page of the cluster; ``silo certs`` makes a
development CA and certificates for mutual TLS (``--tls-cert/--tls-key/--tls-ca``);
``silo table init URI`` creates a store's schema (the only DDL); ``silo drain ADDRESS`` asks a
silo to drain and exit, as SIGTERM does; ``silo kill`` and ``silo cleanup`` are an operator's
writes (``admin``); ``silo config show COMMAND ...`` prints the settings a command would run
with, and where each came from (``configuration``: every option of run/status/dashboard/kill/
cleanup from a flag, a ``SILO_*`` variable or a TOML file). Bad arguments, options or table URIs
print one ``silo: error: ...`` line and exit 2. See ``docs/cli.md`` and ``docs/operations.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from membership_tables import UNINITIALIZED_VERSION, MembershipTable, MembershipTableData, MembershipTableError
from membership_tables.redaction import MASK, redact
from membership_tables.registry import DISTRIBUTION
from silo.cli import admin, certs, configuration, table_access, tls_options
from silo.cli.arguments import duration, handler_spec, key_value, port_number, repeatable
from silo.cli.dashboard import add_arguments as add_dashboard_arguments
from silo.cli.dashboard import run as run_dashboard
from silo.cli.demo import add_arguments as add_demo_arguments
from silo.cli.demo import run as run_demo
from silo.cli.drain import add_arguments as add_drain_arguments
from silo.cli.drain import run as run_drain
from silo.cli.log_format import LOG_FORMATS, configure_logging
from silo.cli.status import render_json, render_text, status_document
from silo.cli.status_watch import CLEAR_SCREEN, membership_key, watch
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
"""``silo status`` could not read the table (it is unreachable or a row is malformed), the SQLite
file it names does not exist, or the cluster has no version row (no such cluster)."""

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})
"""Bind addresses that listen on every interface, and so cannot be advertised."""


def package_version() -> str:
    """The installed distribution's version (package metadata), or a note that it is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the command line; returns the process exit code. ``environ``: the ``SILO_*`` variables (default
    ``os.environ``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    environ = os.environ if environ is None else environ
    try:
        args = configuration.resolve(build_parser, argv, environ).args
    except OptionsError as exc:
        print(f"silo: error: {redact(str(exc))}", file=sys.stderr)
        return int(ExitCode.BAD_CONFIGURATION)
    configure_logging(getattr(args, "log_level", "INFO"), getattr(args, "log_format", "text"))
    try:
        if args.command == "run":
            return _run(args, environ)
        if args.command == "demo":
            return run_demo(args)
        if args.command == "dashboard":
            return run_dashboard(
                args, build_options, lambda: table_access.open_configured_table(args, environ, read_only=True)
            )
        if args.command == "certs":
            return certs.run(args)
        if args.command == "table":
            return run_table(args)
        if args.command == "drain":
            return run_drain(args)
        if args.command == "config":
            return _config_show(args.arguments, environ)
        if args.command in ("kill", "cleanup"):
            return admin.run(args, _open_existing(args, environ))
        return _status(args, environ)
    except (OptionsError, MembershipTableError) as exc:
        # Configuration and URI errors; the table being down is handled per command.
        print(f"silo: error: {redact(str(exc))}", file=sys.stderr)
        return int(ExitCode.BAD_CONFIGURATION)


class MissingTableError(OptionsError):
    """A command that reads an existing table was given a SQLite file that does not exist."""


def _open_existing(
    args: argparse.Namespace, environ: Mapping[str, str], *, read_only: bool = False, watching: bool = False
) -> MembershipTable:
    """The table of a command that reads (or administers) an existing one: a missing SQLite file is an
    error, not a new empty database; ``read_only``: a handle that may only read (``open_table``).
    ``watching`` (``status --watch``: it reads until stopped) accepts a SQLite file that does not exist
    yet: read-only, it reports it unreadable and retries until a silo creates it."""
    missing = table_access.missing_sqlite_file(args.table)
    if missing is not None and not (watching and read_only):
        raise MissingTableError(
            f"there is no SQLite database at {missing} (from --table {redact(args.table)}); check the path "
            "(a relative one is relative to the current directory: sqlite:////abs/path.db for an absolute one)"
        )
    return table_access.open_configured_table(args, environ, read_only=read_only)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="a TOML file of settings (see docs/operations.md); flags win over SILO_* variables, which win over it",
    )
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
    table_access.add_arguments(common)
    parser = argparse.ArgumentParser(
        prog="silo",
        description="Orleans-style cluster membership silos.",
        epilog="Every option of run, status, dashboard, kill and cleanup may also come from a SILO_* environment "
        "variable or a --config TOML file: silo config show COMMAND ... prints the settings and their sources.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", parents=[common], help="run one silo until signalled or declared dead")
    run.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on, and to advertise unless --advertise-host (default 127.0.0.1)",
    )
    run.add_argument("--port", type=port_number, default=0, help="gRPC port; 0 picks a free one (default)")
    run.add_argument(
        "--advertise-host",
        default=None,
        metavar="HOST",
        help="address peers and clients reach this silo at, written in its row (default: --host); "
        "needed when --host is 0.0.0.0 or behind NAT",
    )
    run.add_argument(
        "--advertise-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="port advertised in the row when something forwards it to --port (default: the bound port)",
    )
    gateway = run.add_mutually_exclusive_group()
    gateway.add_argument(
        "--gateway-port",
        type=port_number,
        default=None,
        help="also serve clients on this port, advertised in the row; 0 picks a free one (default: no gateway)",
    )
    gateway.add_argument(
        "--no-gateway",
        dest="gateway_port",
        action="store_const",
        const=None,
        help="no gateway port (the default; overrides a gateway_port from the environment or --config)",
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
        action="store_true",
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
    status.add_argument(
        "--heartbeats",
        action="store_true",
        help="with --watch --json: also print a line when only a heartbeat moved (default: membership changes only)",
    )

    kill = commands.add_parser(
        "kill", parents=[common], help="declare one silo Dead by hand (a conditional write, see docs/operations.md)"
    )
    admin.add_kill_arguments(kill)
    cleanup = commands.add_parser("cleanup", parents=[common], help="remove Dead rows older than --older-than")
    admin.add_cleanup_arguments(cleanup)

    config = commands.add_parser(
        "config", help="silo config show COMMAND [ARGS]: the settings COMMAND would use, and their sources"
    )
    config_actions = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    show = config_actions.add_parser(
        "show", help="print the effective settings of COMMAND (run, status, dashboard, kill, cleanup), secrets masked"
    )
    show.add_argument("arguments", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS]")

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


def _config_show(arguments: Sequence[str], environ: Mapping[str, str]) -> int:
    """``silo config show COMMAND ARGS``: COMMAND's settings as TOML, each with its source, secrets masked."""
    if not arguments or arguments[0] not in configuration.CONFIGURED_COMMANDS:
        raise OptionsError(
            f"silo config show takes a command and its arguments, e.g. silo config show run --config silo.toml; "
            f"commands: {', '.join(configuration.CONFIGURED_COMMANDS)}"
        )
    resolved = configuration.resolve(build_parser, arguments, environ)
    extra = []
    if table_access.table_secret(resolved.args, environ) is not None and environ.get(table_access.PASSWORD_ENV):
        extra.append(("# table password", json.dumps(MASK), f"env {table_access.PASSWORD_ENV}"))
    print(redact(configuration.render(resolved, extra)))
    return int(ExitCode.OK)


def _run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    options = build_options(args.preset, args.overrides)
    properties = build_properties(args.properties)
    handlers = HandlerRegistry.from_specs(args.handlers)
    if args.host in WILDCARD_HOSTS and not args.advertise_host:
        raise OptionsError(
            f"--host {args.host} listens on every address, which peers cannot reach it at; "
            "give --advertise-host, the address they reach this silo at"
        )
    if args.gateway_port == 0:
        log.warning(
            "--gateway-port 0 picks a free gateway port (it used to mean no gateway): "
            "for no gateway, omit --gateway-port or give --no-gateway"
        )
    table = table_access.open_configured_table(args, environ)
    tls = tls_options.settings_from_args(args)
    if tls is not None:
        tls_options.check_own_certificate(tls, args.cluster, Role.SILO)
    from silo.runtime.process import SiloProcessConfig, run_process  # the runtime and gRPC load only to run

    config = SiloProcessConfig(
        cluster_id=args.cluster,
        host=args.host,
        port=args.port,
        gateway_port=args.gateway_port,
        advertise_host=args.advertise_host,
        advertise_port=args.advertise_port,
        name=args.name,
        options=options,
        properties=properties,
        handlers=handlers,
        history_file=args.history_file,
        claims_file=args.claims_file,
        metrics_port=args.metrics_port,
        table_uri=args.table,
        tls=tls,
        reflection=not args.no_reflection,
        health_port=args.health_port,
        shutdown_grace=args.shutdown_grace,
    )
    return int(run_process(table, config))


def _status(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        table = _open_existing(args, environ, read_only=True, watching=args.watch)
    except MissingTableError as exc:
        print(f"silo: error: {exc}", file=sys.stderr)
        return STATUS_FAILED
    if args.watch:
        return _watch_status(args, table)
    try:
        with table:
            snapshot = table.read_all()
    except MembershipTableError as exc:
        print(
            f"silo: error: cannot read the membership table at {redact(args.table)}: {redact(str(exc))}",
            file=sys.stderr,
        )
        return STATUS_FAILED
    if snapshot.version == UNINITIALIZED_VERSION and not snapshot.rows and not snapshot.malformed:
        print(
            f"silo: error: there is no cluster {args.cluster!r} in the membership table at {redact(args.table)} "
            "(no version row): check --cluster; a cluster appears when its first silo starts",
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
        key = None if args.heartbeats or not args.json else membership_key
        watch(table.read_all, render, write, stop.wait, args.interval, describe, key)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        table.close()
    return int(ExitCode.OK)
