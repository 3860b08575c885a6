"""What differs between SQLite, PostgreSQL and MySQL/MariaDB: isolation, schema locks, errors.

Driver errors are recognised by their codes (psycopg ``sqlstate``, PyMySQL ``args[0]``,
``sqlite3`` ``sqlite_errorcode``) so no driver needs importing here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from membership_tables.sql.engine import SQLITE_BEGIN
from membership_tables.sql.schema import (
    LIVE_VIEW,
    LIVE_VIEW_SELECT,
    MEMBERSHIP_TABLE,
    WRITTEN_COLUMNS,
    membership_table,
    metadata,
)

# Deadlock, serialization failure, lock wait timeout: nothing was committed, a retry may pass.
_TRANSIENT: dict[str, frozenset[object]] = {
    "postgresql": frozenset({"40001", "40P01", "55P03"}),
    "mysql": frozenset({1205, 1213}),
    "sqlite": frozenset({5, 6}),  # SQLITE_BUSY, SQLITE_LOCKED
}
_PG_UNDEFINED_TABLE = "42P01"
_MYSQL_NO_SUCH_TABLE = 1146
_PG_UNDEFINED_COLUMN = "42703"
_MYSQL_BAD_FIELD = 1054
# Refused credentials or a missing privilege: a retry cannot pass, an admin must act.
_DENIED: dict[str, frozenset[object]] = {
    # insufficient_privilege, invalid_authorization_specification, invalid_password
    "postgresql": frozenset({"42501", "28000", "28P01"}),
    # DBACCESS_DENIED, ACCESS_DENIED (login), TABLEACCESS_DENIED, COLUMNACCESS_DENIED,
    # SPECIFIC_ACCESS_DENIED, PROCACCESS_DENIED
    "mysql": frozenset({1044, 1045, 1142, 1143, 1227, 1370}),
    "sqlite": frozenset({23}),  # SQLITE_AUTH
}
# A write on a session opened read-only: read_only_sql_transaction, ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION,
# SQLITE_READONLY (a mode=ro file or query_only).
_READ_ONLY: dict[str, frozenset[object]] = {
    "postgresql": frozenset({"25006"}),
    "mysql": frozenset({1792}),
    "sqlite": frozenset({8}),
}

_PG_SCHEMA_LOCK_KEY = 7_297_115_001  # any constant bigint that every process agrees on
_MYSQL_SCHEMA_LOCK = "silo_membership_schema"


def read_options(dialect: str) -> dict[str, Any]:
    """Execution options of a read transaction: one consistent snapshot of version and rows.

    SQLite (WAL) and MySQL (``REPEATABLE READ`` for every connection, see ``engine``) read one
    snapshot anyway; PostgreSQL's default ``READ COMMITTED`` would take one per statement.
    """
    return {"isolation_level": "REPEATABLE READ"} if dialect == "postgresql" else {}


def write_options(dialect: str) -> dict[str, Any]:
    """Execution options of a write transaction.

    SQLite takes the write lock up front. On PostgreSQL and MySQL the last statement, a
    conditional UPDATE of the version row, locks that row and sees the latest committed
    version whatever the isolation level, which serialises the writers of one cluster; each
    conditional UPDATE of a member row before it likewise waits for a writer of that row and
    then sees its committed etag.
    """
    return {SQLITE_BEGIN: "IMMEDIATE"} if dialect == "sqlite" else {}


def transaction_options(dialect: str, *, write: bool) -> dict[str, Any]:
    """``write_options`` or ``read_options``: the execution options of one kind of transaction."""
    return write_options(dialect) if write else read_options(dialect)


def skips_locked_rows(dialect: sa.Dialect) -> bool:
    """Whether a writer can lose at once instead of waiting for the version row another writer
    holds (``statements.BUMP_UNLOCKED_VERSION``): PostgreSQL. MySQL refuses a subquery on the
    table an UPDATE changes; SQLite takes its write lock up front."""
    return dialect.name == "postgresql"


def _error_code(dialect: str, exc: sa.exc.DBAPIError) -> object:
    orig = exc.orig
    if dialect == "postgresql":
        return getattr(orig, "sqlstate", None)
    if dialect == "sqlite":
        code = getattr(orig, "sqlite_errorcode", None)
        return code & 0xFF if isinstance(code, int) else None  # the primary code, without extended bits
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_transient(dialect: str, exc: sa.exc.DBAPIError) -> bool:
    """A deadlock, lock timeout or serialization failure: the transaction was rolled back."""
    return _error_code(dialect, exc) in _TRANSIENT.get(dialect, _TRANSIENT["mysql"])


def is_access_denied(dialect: str, exc: sa.exc.DBAPIError) -> bool:
    """The server refused the login or the statement for lack of a privilege."""
    return _error_code(dialect, exc) in _DENIED.get(dialect, _DENIED["mysql"])


def is_read_only(dialect: str, exc: sa.exc.DBAPIError) -> bool:
    """The server refused a write because the session (or the SQLite file) is read-only."""
    return _error_code(dialect, exc) in _READ_ONLY.get(dialect, _READ_ONLY["mysql"])


def is_missing_table(dialect: str, exc: sa.exc.DBAPIError) -> bool:
    """The schema does not exist (yet): ``initialize()`` was never run on this database."""
    if dialect == "sqlite":
        return "no such table" in str(exc.orig)
    return _error_code(dialect, exc) == (_PG_UNDEFINED_TABLE if dialect == "postgresql" else _MYSQL_NO_SUCH_TABLE)


def is_missing_column(dialect: str, exc: sa.exc.DBAPIError) -> bool:
    """A statement named a column the table does not have: a table of an older release
    (``schema.WRITTEN_COLUMNS``) that ``initialize()`` has not upgraded."""
    if dialect == "sqlite":
        return "no such column" in str(exc.orig)
    return _error_code(dialect, exc) == (_PG_UNDEFINED_COLUMN if dialect == "postgresql" else _MYSQL_BAD_FIELD)


@contextlib.contextmanager
def _schema_lock(connection: sa.Connection) -> Iterator[None]:
    """Serialise schema creation across processes (``CREATE ... IF NOT EXISTS`` still races)."""
    dialect = connection.dialect.name
    if dialect == "sqlite":  # the write transaction (BEGIN IMMEDIATE) is the lock
        yield
    elif dialect == "postgresql":  # released at the end of the transaction
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SCHEMA_LOCK_KEY})
        yield
    else:  # MySQL DDL commits implicitly, so the lock is a named session lock
        got = connection.execute(
            sa.text("SELECT GET_LOCK(:name, @@innodb_lock_wait_timeout)"), {"name": _MYSQL_SCHEMA_LOCK}
        ).scalar_one()
        if got != 1:
            raise sa.exc.OperationalError("SELECT GET_LOCK", {}, RuntimeError("timed out waiting for the schema lock"))
        try:
            yield
        finally:
            connection.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_SCHEMA_LOCK})


def schema_exists(connection: sa.Connection) -> bool:
    """Both tables exist: catalog reads that a role with row privileges on them may make.

    The live view is for people, not silos, and is not checked: MySQL hides it from a role
    with no privilege on it (``silo table init`` creates it with the tables).
    """
    inspector = sa.inspect(connection)
    return all(inspector.has_table(table.name) for table in metadata.sorted_tables)


def missing_columns(connection: sa.Connection) -> tuple[str, ...] | None:
    """``None`` if a table is missing (``schema_exists``), else the ``schema.WRITTEN_COLUMNS`` that
    ``silo_membership`` lacks (a table made by release 0.1.0): catalog reads, as ``schema_exists``'s."""
    if not schema_exists(connection):
        return None
    present = {column["name"] for column in sa.inspect(connection).get_columns(MEMBERSHIP_TABLE)}
    return tuple(name for name in WRITTEN_COLUMNS if name not in present)


def add_columns(connection: sa.Connection) -> None:
    """Add the ``missing_columns`` to ``silo_membership`` (``ALTER TABLE ... ADD COLUMN``, nullable,
    with their comments), inside a write transaction; serialised like ``create_schema``."""
    dialect = connection.dialect
    with _schema_lock(connection):
        for name in missing_columns(connection) or ():  # again, under the lock: another process may have added them
            column = membership_table.c[name]
            spec = sa.schema.CreateColumn(column).compile(dialect=dialect)  # MySQL: with its COMMENT
            connection.exec_driver_sql(f"ALTER TABLE {MEMBERSHIP_TABLE} ADD COLUMN {spec}")
            if column.comment and dialect.supports_comments and not dialect.inline_comments:  # PostgreSQL
                connection.execute(sa.schema.SetColumnComment(column))


def create_schema(connection: sa.Connection) -> None:
    """Create the tables and the live view if missing, inside a write transaction."""
    with _schema_lock(connection):
        metadata.create_all(connection, checkfirst=True)
        if not sa.inspect(connection).has_table(LIVE_VIEW):
            # MySQL views run as their creator by default, and break if that account goes away
            invoker = "" if connection.dialect.name in ("sqlite", "postgresql") else "SQL SECURITY INVOKER "
            connection.exec_driver_sql(f"CREATE {invoker}VIEW {LIVE_VIEW} AS {LIVE_VIEW_SELECT}")
