"""``silo table init URI [--cluster ID]``: create a store's schema, the only DDL the project runs.

Run it once, as an admin (a role that may create tables, znodes, keys or a DynamoDB table),
before starting silos that run with least privilege (docs/security.md): a silo's
``initialize()`` then finds the schema and creates nothing. With ``--cluster`` it also
creates that cluster's version row (version 0), which a silo would otherwise create.
Idempotent: on an existing schema it changes nothing.
"""

from __future__ import annotations

import argparse
import sys

from membership_tables import TableUnavailableError, open_table
from membership_tables.redaction import redact
from silo.exit_codes import ExitCode

INIT_FAILED = 1
"""The store could not be reached, or failed; the error line says why."""

_ANY_CLUSTER = "silo-table-init"
"""The cluster id a handle needs when no ``--cluster`` is given (no row of it is written)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``silo table`` subcommands."""
    actions = parser.add_subparsers(dest="table_command", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init",
        help="create the schema (tables, root znode, DynamoDB table) with an admin's credentials",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    init.add_argument("uri", metavar="URI", help="membership table URI, with credentials that may create the schema")
    init.add_argument("--cluster", metavar="ID", default=None, help="also create this cluster's version row")
    init.add_argument("--log-level", default="WARNING", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args: argparse.Namespace) -> int:
    """Create the schema; ``MembershipTableError`` (bad URI, access denied) is left to the caller."""
    shown = redact(args.uri)
    with open_table(args.uri, args.cluster or _ANY_CLUSTER) as table:
        try:
            table.initialize(try_init_version=args.cluster is not None)
        except TableUnavailableError as exc:
            print(f"silo: error: cannot initialize the membership table at {shown}: {exc}", file=sys.stderr)
            return INIT_FAILED
    cluster = f"; cluster {args.cluster!r} has its version row" if args.cluster else ""
    print(f"membership schema ready at {shown}{cluster}")
    return int(ExitCode.OK)
