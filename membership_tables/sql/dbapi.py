"""Transactions on the engine's pooled DB-API connection, for the calls silos make all the time.

A ``sa.Connection`` costs about 45 us to check out, begin and commit before any statement
runs, and tens more per statement (execution context, result wrapping, type processors);
the SQLite driver does the whole read or conditional write in 10-40 us. The hot paths
(reads, ``update_row``, heartbeats) therefore run the statements of ``statements``, compiled
once per engine by SQLAlchemy's own compiler, on the pool's DB-API connection. They keep
everything the engine configures: the pool and its liveness checks (``engine``), SQLite's
``BEGIN IMMEDIATE`` for writes, PostgreSQL's ``REPEATABLE READ`` for reads, and driver
errors surface as the same ``sqlalchemy.exc.DBAPIError`` subclasses, so ``dialects`` reads
their codes unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from membership_tables.sql import dialects
from membership_tables.sql.engine import SQLITE_BEGIN
from membership_tables.sql.schema import time_to_db


class _Prepared:
    """One statement compiled for one engine's dialect, and how to lay out its parameters."""

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler), f"not a SQL statement: {statement}"
        self.sql = compiled.string
        self._dialect = dialect.name
        # positional paramstyles (SQLite's ``?``) name the parameters in order, repeats included
        self._order = tuple(compiled.positiontup) if compiled.positiontup is not None else None

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """``values`` as the driver takes them; datetimes converted as ``UtcDateTime`` would."""
        converted = {
            name: time_to_db(value, self._dialect) if isinstance(value, datetime) else value
            for name, value in values.items()
        }
        return converted if self._order is None else tuple(converted[name] for name in self._order)


class Transaction:
    """The statements of one open transaction; ``execute`` returns the DB-API cursor."""

    def __init__(self, driver: Driver, cursor: Any) -> None:
        self._driver = driver
        self._cursor = cursor
        self.statement = ""

    def execute(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Any:
        prepared = self._driver.prepared(statement)
        self.statement = prepared.sql
        self._cursor.execute(prepared.sql, prepared.parameters(values))
        return self._cursor


class Driver:
    """Runs transactions for one engine on its pooled DB-API connections."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect
        self._prepared: dict[sa.ClauseElement, _Prepared] = {}

    def prepared(self, statement: sa.ClauseElement) -> _Prepared:
        """``statement`` compiled for this engine, once (after the first connection, which
        tells the dialect the server's version)."""
        prepared = self._prepared.get(statement)
        if prepared is None:
            prepared = self._prepared[statement] = _Prepared(statement, self._dialect)
        return prepared

    @contextlib.contextmanager
    def transaction(self, *, write: bool) -> Iterator[Transaction]:
        """One transaction: committed if the block returns, rolled back if it raises.

        Driver errors are raised as ``sqlalchemy.exc.DBAPIError``; a connection the error
        shows to be dead is dropped from the pool instead of being returned to it.
        """
        dialect = self._dialect
        error = dialect.loaded_dbapi.Error
        options = dialects.write_options(dialect.name) if write else dialects.read_options(dialect.name)
        isolation = options.get("isolation_level")
        transaction: Transaction | None = None
        try:
            connection = self._engine.raw_connection()
        except error as exc:
            raise sa.exc.DBAPIError.instance("connect", None, exc, error, dialect=dialect) from exc
        dbapi_connection = connection.dbapi_connection
        assert dbapi_connection is not None, "the pool hands out open connections"
        try:
            if isolation is not None:  # PostgreSQL: the driver sends BEGIN with this level
                dialect.set_isolation_level(dbapi_connection, isolation)
            cursor = connection.cursor()
            transaction = Transaction(self, cursor)
            if dialect.name == "sqlite":  # the driver leaves transactions to us (see engine)
                cursor.execute(f"BEGIN {options.get(SQLITE_BEGIN, 'DEFERRED')}")
            try:
                yield transaction
            except BaseException:
                connection.rollback()
                raise
            connection.commit()
            if isolation is not None:
                dialect.reset_isolation_level(dbapi_connection)
                isolation = None
        except error as exc:
            invalidated = dialect.is_disconnect(exc, dbapi_connection, None)
            if invalidated:
                connection.invalidate(exc)
            statement = transaction.statement if transaction is not None else "BEGIN"
            raise sa.exc.DBAPIError.instance(
                statement, None, exc, error, connection_invalidated=invalidated, dialect=dialect
            ) from exc
        finally:
            if isolation is not None and connection.is_valid:  # rolled back: back to the default level
                try:
                    dialect.reset_isolation_level(dbapi_connection)
                except error as exc:
                    connection.invalidate(exc)
            connection.close()
