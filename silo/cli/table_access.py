"""Open the table a command names, with its secret from outside argv and its keyword options.

The table's secret (a SQL password, a ZooKeeper digest password, a Consul ACL token) need not be
in the URI, where ``ps`` and shell histories show it: it comes from ``--table-password-file PATH``
(the file's first line) or the ``SILO_TABLE_PASSWORD`` environment variable, and is put into the
connection in-process, after being registered for redaction (``membership_tables.redaction``)
so that no log line, status output or error message can show it.

``--table-option KEY=VALUE`` passes keyword options to the backend (``open_table(uri, cluster,
**options)``), e.g. the SQL table's ``statement_timeout=10``: a number where the value reads as
one, else the text.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import sqlalchemy as sa

from membership_tables import MembershipTable, open_table
from membership_tables.redaction import redact, remember_secret
from membership_tables.registry import uri_scheme
from silo.errors import OptionsError

PASSWORD_ENV = "SILO_TABLE_PASSWORD"
"""The table's secret as an environment variable (``--table-password-file`` is the other way)."""

_SQL = frozenset({"postgresql", "postgres", "mysql", "mariadb"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--table-password-file`` and ``--table-option`` (``--table`` is the command's own)."""
    parser.add_argument(
        "--table-password-file",
        metavar="PATH",
        default=None,
        help=f"read the table's password (SQL), digest password (ZooKeeper) or ACL token (Consul) from PATH; "
        f"or set {PASSWORD_ENV}. Never put it in the URI on a shared host",
    )
    parser.add_argument(
        "--table-option",
        dest="table_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_option,
        help="a keyword option of the table backend, e.g. statement_timeout=10 (SQL) or timeout=5 (Consul) "
        "(repeatable)",
    )


def _option(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. statement_timeout=10, got {text!r}")
    return key.strip(), value.strip()


def table_secret(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str | None:
    """The table's secret from ``--table-password-file`` or ``SILO_TABLE_PASSWORD``; registered for redaction."""
    path: str | None = getattr(args, "table_password_file", None)
    from_env = environ.get(PASSWORD_ENV) or None
    if path and from_env:
        raise OptionsError(f"both --table-password-file and {PASSWORD_ENV} give the table's password; keep one")
    if not path:
        remember_secret(from_env)
        return from_env
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise OptionsError(f"cannot read --table-password-file {path}: {reason}") from None
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise OptionsError(f"--table-password-file {path} is empty; put the password on its first line")
    remember_secret(secret)
    return secret


def with_secret(uri: str, secret: str | None) -> tuple[str, dict[str, Any]]:
    """``uri`` and the backend options that carry ``secret`` to the backend of ``uri``."""
    if secret is None:
        return uri, {}
    scheme = uri_scheme(uri)
    if scheme in _SQL:
        return _sql_with_password(uri, secret), {}
    if scheme == "zookeeper":
        return _zookeeper_with_password(uri, secret), {}
    if scheme == "consul":
        return uri, {"token": secret}
    raise OptionsError(
        f"a {scheme} table takes no password (--table-password-file / {PASSWORD_ENV}); "
        "unset it, or see docs/security.md for how that backend is given credentials"
    )


def _sql_with_password(uri: str, secret: str) -> str:
    try:
        url = sa.engine.make_url(uri)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise OptionsError(f"cannot parse the table URI {redact(uri)}: {exc}") from None
    if url.password:
        raise OptionsError(
            f"the table URI {redact(uri)} has a password and --table-password-file or {PASSWORD_ENV} gives another; "
            "drop the one in the URI"
        )
    if not url.username:
        raise OptionsError(f"the table URI {redact(uri)} names no user for the password; write USER@ before the host")
    return url.set(password=secret).render_as_string(hide_password=False)


def _zookeeper_with_password(uri: str, secret: str) -> str:
    parts = urlsplit(uri)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or not userinfo or ":" in userinfo:
        raise OptionsError(
            f"the ZooKeeper URI {redact(uri)} needs the digest user alone before the hosts (zookeeper://USER@HOST/...) "
            f"for the password of --table-password-file or {PASSWORD_ENV}"
        )
    quoted = quote(secret, safe="")
    remember_secret(quoted)
    return urlunsplit(parts._replace(netloc=f"{userinfo}:{quoted}@{hosts}"))


def backend_options(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``--table-option`` pairs as keyword options: numbers where they read as numbers; a key twice is refused."""
    options: dict[str, Any] = {}
    for key, text in pairs:
        if key in options:
            raise OptionsError(f"--table-option {key} is given twice; keep one")
        options[key] = _number_or_text(text)
    return options


def _number_or_text(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def open_configured_table(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ, *, read_only: bool = False
) -> MembershipTable:
    """The table of ``args.table`` and ``args.cluster``, with the secret and the ``--table-option``s;
    ``read_only`` for a command that only reads: a handle that refuses writes, on a session the store
    keeps from writing where it can (``open_table(..., read_only=True)``)."""
    uri, options = with_secret(args.table, table_secret(args, environ))
    extra = backend_options(getattr(args, "table_options", []))
    clash = sorted(set(options) & set(extra))
    if clash:
        raise OptionsError(f"--table-option {clash[0]} would replace the table's secret; drop that option")
    return open_table(uri, args.cluster, read_only=read_only, **options, **extra)


def missing_sqlite_file(uri: str) -> str | None:
    """The path of a SQLite table whose file does not exist (reading it would create it), else None."""
    if uri_scheme(uri) != "sqlite":
        return None
    try:
        database = sa.engine.make_url(uri).database
    except (sa.exc.ArgumentError, ValueError):
        return None  # open_table reports it
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return None if Path(database).exists() else database
