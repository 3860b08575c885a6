"""``silo dashboard``: serve the read-only cluster page until signalled.

The table is read every ``--interval`` by one background thread however many browsers
watch; the page gets each new state over server-sent events (see ``silo.dashboard``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from membership_tables import MembershipTable
from membership_tables.redaction import redact
from silo.cli.arguments import duration, key_value, port_number, repeatable
from silo.dashboard import ClusterMonitor, DashboardServer
from silo.exit_codes import ExitCode
from silo.membership.options import PRESETS, SiloOptions

log = logging.getLogger("silo.dashboard")

DEFAULT_PORT = 8080


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``silo dashboard`` flags (``--table``, ``--cluster`` and logging come from the common parser)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to serve the page on (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"HTTP port; 0 picks a free one (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--interval", type=duration, default=1.0, help="how often to read the table, e.g. 500ms or 2s (default 1s)"
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="production",
        help="the silos' option preset: how many rings they probe and how long votes stay fresh (default production)",
    )
    repeatable(
        parser,
        "--set",
        "overrides",
        key_value("OPTION", "num_probed_silos=3"),
        "OPTION=VALUE",
        "an option the silos were started with, e.g. num_probed_silos=3",
    )


def run(
    args: argparse.Namespace,
    build_options: Callable[[str, Sequence[tuple[str, str]]], SiloOptions],
    open_table: Callable[[], MembershipTable],
) -> int:
    """Serve until SIGINT or SIGTERM; exit code 2 if the port cannot be bound. ``open_table``: the
    table of ``--table`` and ``--cluster`` (with its secret and options)."""
    options = build_options(args.preset, args.overrides)
    table = open_table()
    monitor = ClusterMonitor(table, options, interval=args.interval)
    try:
        server = DashboardServer(monitor, args.host, args.port)
    except OSError as exc:
        print(
            f"silo: error: cannot serve the dashboard on {args.host}:{args.port}: {exc}; pick a free --port (0 = any)",
            file=sys.stderr,
        )
        return int(ExitCode.BAD_CONFIGURATION)
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        monitor.start()
        server.start()
        log.info("dashboard of cluster %s (%s) at %s", args.cluster, redact(args.table), server.url)
        stop.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.close()
        monitor.stop()
        table.close()
    return int(ExitCode.OK)
