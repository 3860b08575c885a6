"""``silo certs``: a development CA for mutual TLS (``silo.cli.dev_ca``).

``silo certs init DIR`` creates the CA; ``silo certs issue DIR --cluster ID --name N --role
silo|client`` issues ``DIR/N.pem`` and ``DIR/N-key.pem``. Each prints the files it wrote and
the flags that use them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from silo.cli.dev_ca import CA_CERT, init_ca, issue
from silo.exit_codes import ExitCode
from silo.wire.peer_identity import Role


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="certs_command", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="create a CA in DIR (ca.pem, ca-key.pem)")
    init.add_argument("directory", metavar="DIR", type=Path)
    issue_parser = actions.add_parser("issue", help="issue a certificate and key for a silo or a client")
    issue_parser.add_argument("directory", metavar="DIR", type=Path, help="the CA's directory (silo certs init)")
    issue_parser.add_argument("--cluster", required=True, metavar="ID", help="the cluster the certificate is for")
    issue_parser.add_argument("--name", required=True, help="file name and common name, e.g. silo-1")
    issue_parser.add_argument(
        "--role",
        required=True,
        choices=[role.value for role in Role],
        help="silo: a cluster member; client: may read the membership and send Work only",
    )


def run(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if args.certs_command == "init":
        cert = init_ca(directory)
        print(f"CA written: {cert} (trust it with --tls-ca {cert}) and {directory / 'ca-key.pem'} (keep it private)")
        return int(ExitCode.OK)
    issued = issue(directory, cluster=args.cluster, name=args.name, roles=(Role(args.role),))
    print(
        f"{args.role} certificate for cluster {args.cluster!r} written: "
        f"--tls-cert {issued.cert} --tls-key {issued.key} --tls-ca {directory / CA_CERT}"
    )
    return int(ExitCode.OK)
