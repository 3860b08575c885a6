"""``silo kill ADDRESS`` and ``silo cleanup --older-than DURATION``: an operator's writes to the table.

``kill`` declares one silo Dead by hand (Orleans' ``TryKill``, Serf's ``force-leave``): a
conditional write of its row through the table contract, conditioned on the row's etag and the
version row like every vote, so it cannot undo a write it did not see (it reads again and
retries on a lost race). The row records why (properties ``kill_reason`` and ``killed_by``). A
silo that is still running reads its row as Dead and exits (code 3, declared dead), as it would
after a vote. The last Active silo is refused unless ``--force``: killing it ends the cluster.

``cleanup`` removes Dead rows whose latest activity is older than ``--older-than``
(``MembershipTable.cleanup_defunct_entries``, what silos run themselves by
``defunct_silo_cleanup_period``); rows in any other status stay.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from membership_tables import (
    InvalidEntryError,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    MembershipTableError,
    SiloAddress,
    SiloStatus,
)
from membership_tables.redaction import redact
from silo.cli.arguments import duration
from silo.exit_codes import ExitCode

ADMIN_FAILED = 1
"""The command could not do what it was asked (the error line says why); the table is unchanged."""

KILL_ATTEMPTS = 5
"""Lost races ``kill`` takes (re-reading each time) before giving up."""

REASON_PROPERTY = "kill_reason"
KILLED_BY_PROPERTY = "killed_by"


def add_kill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "address",
        metavar="ADDRESS",
        help="the silo: host:port@generation as silo status shows it, or host:port for its latest generation",
    )
    parser.add_argument("--reason", default="killed by an operator", help="why, recorded in the row (kill_reason)")
    parser.add_argument("--force", action="store_true", help="kill it even if it is the last Active silo")


def add_cleanup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        type=duration,
        required=True,
        metavar="DURATION",
        help="remove Dead rows whose latest activity is older than this, e.g. 7d, 12h or 30m",
    )


def kill(
    args: argparse.Namespace, table: MembershipTable, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> int:
    """Write the row of ``args.address`` Dead; 0 if it is Dead now (or was), 1 if refused or not found."""
    for _ in range(KILL_ATTEMPTS):
        data = table.read_all()
        try:
            target = find_silo(data, args.address)
        except LookupError as exc:
            return _fail(str(exc))
        entry, etag = target
        if entry.status == SiloStatus.DEAD:
            print(f"silo {entry.silo_address} is already Dead")
            return int(ExitCode.OK)
        others = [e for e in data.entries if e.status == SiloStatus.ACTIVE and e.silo_address != entry.silo_address]
        if entry.status == SiloStatus.ACTIVE and not others and not args.force:
            return _fail(
                f"silo {entry.silo_address} is the last Active silo of cluster {table.cluster_id}; "
                "killing it ends the cluster: add --force if that is what you want"
            )
        dead = entry.replace(
            status=SiloStatus.DEAD,
            i_am_alive_time=max(entry.i_am_alive_time, now()),
            properties={**entry.properties, REASON_PROPERTY: args.reason, KILLED_BY_PROPERTY: _operator()},
        )
        if table.update_row(dead, etag, data.version.next()):
            print(f"silo {entry.silo_address} is Dead ({args.reason})")
            return int(ExitCode.OK)
    return _fail(
        f"lost {KILL_ATTEMPTS} races in a row to write the row of {args.address}: the cluster is changing fast; retry"
    )


def find_silo(data: MembershipTableData, text: str) -> tuple[MembershipEntry, str]:
    """The row (and etag) of ``host:port@generation``, or of the latest generation of ``host:port``."""
    try:
        address = SiloAddress.parse(text)
    except InvalidEntryError:
        address = None
    if address is not None:
        for entry, etag in data.rows:
            if entry.silo_address == address:
                return entry, etag
        raise LookupError(f"no silo {address} in the table; silo status lists the silos")
    generations = [(entry, etag) for entry, etag in data.rows if entry.silo_address.endpoint == text.strip()]
    if not generations:
        raise LookupError(f"no silo at {text!r} in the table; give host:port@generation as silo status shows it")
    return max(generations, key=lambda row: row[0].silo_address.generation)


def cleanup(
    args: argparse.Namespace, table: MembershipTable, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> int:
    """Remove Dead rows older than ``args.older_than`` seconds; prints how many."""
    before = now() - timedelta(seconds=args.older_than)
    removed = table.cleanup_defunct_entries(before)
    print(f"removed {removed} Dead row(s) of cluster {table.cluster_id} last active before {before:%Y-%m-%d %H:%M:%S}Z")
    return int(ExitCode.OK)


def run(args: argparse.Namespace, table: MembershipTable) -> int:
    """``kill`` or ``cleanup`` on ``table`` (closed afterwards); a table error is a clear line and exit 1."""
    with table:
        try:
            return kill(args, table) if args.command == "kill" else cleanup(args, table)
        except MembershipTableError as exc:
            return _fail(f"cannot {args.command} in the membership table at {redact(args.table)}: {redact(str(exc))}")


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _fail(message: str) -> int:
    print(f"silo: error: {message}", file=sys.stderr)
    return ADMIN_FAILED
