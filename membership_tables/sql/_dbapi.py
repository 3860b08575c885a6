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

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import IsolationLevel
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler

from membership_tables.sql import dialects
from membership_tables.sql.engine import SQLITE_BEGIN, liveness
from membership_tables.sql.schema import UtcDateTime, time_to_db

T = TypeVar("T")

_KEEP = 2
"""Connections a handle keeps checked out between transactions on the hot paths."""


Script = tuple[sa.ClauseElement, ...]
"""Statements sent as one request and run as one transaction (``Transaction.execute_script``)."""


class _Prepared:
    """One statement (or a ``Script``) compiled for one engine's dialect, and how to lay out its parameters."""

    def __init__(self, statement: sa.ClauseElement | Script, dialect: sa.Dialect) -> None:
        statements = statement if isinstance(statement, tuple) else (statement,)
        compiled: list[SQLCompiler] = []
        for one in statements:
            compiled_one = one.compile(dialect=dialect)
            assert isinstance(compiled_one, SQLCompiler), f"not a SQL statement: {one}"
            compiled.append(compiled_one)
        self.sql = ";\n".join(one.string for one in compiled)
        self._dialect = dialect.name
        self._times = tuple(
            dict.fromkeys(
                name for one in compiled for name, bind in one.binds.items() if isinstance(bind.type, UtcDateTime)
            )
        )
        self._pick: Callable[[Mapping[str, Any]], Any] | None = None
        order = compiled[0].positiontup
        assert not order or len(compiled) == 1, "a script binds its parameters by name"
        if order:  # positional paramstyles (SQLite's ``?``) take the values in order, repeats included
            pick = operator.itemgetter(*order)
            self._pick = pick if len(order) > 1 else lambda values: (pick(values),)

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """``values`` as the driver takes them; times converted as ``UtcDateTime`` would."""
        if self._times:
            values = dict(values)
            for name in self._times:
                values[name] = time_to_db(values[name], self._dialect)
        return values if self._pick is None else self._pick(values)


class Transaction:
    """The statements of one open transaction; ``execute`` returns the DB-API cursor."""

    def __init__(self, driver: Driver, cursor: Any, connection: Any) -> None:
        self._driver = driver
        self._cursor = cursor
        self._connection = connection
        self.statement = ""

    def execute(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Any:
        prepared = self._driver.prepared(statement)
        self.statement = prepared.sql
        self._cursor.execute(prepared.sql, prepared.parameters(values))
        return self._cursor

    def execute_script(self, script: Script, values: Mapping[str, Any]) -> Any:
        """PostgreSQL: the statements of ``script`` as one request, their parameters bound on the
        client (psycopg's ``ClientCursor``): the simple query protocol, which takes several
        statements (the extended one, which binds on the server, takes one). The server runs them
        one after the other as one transaction (in autocommit: ``Driver.run(single=True)``), and
        rolls them all back if one fails. Returns the cursor on the first statement's result."""
        prepared = self._driver.prepared(script)
        self.statement = prepared.sql
        cursor = self._driver.client_cursor(self._connection)
        cursor.execute(prepared.sql, prepared.parameters(values))
        return cursor


class Driver:
    """Runs transactions for one engine on its pooled DB-API connections."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect
        self._prepared: dict[sa.ClauseElement | Script, _Prepared] = {}
        self._liveness = liveness(engine)
        self._kept: list[PoolProxiedConnection] = []
        self._error = self._dialect.loaded_dbapi.Error
        # per kind of transaction (write or not), worked out once: a SQLite write costs ~20 us
        self._isolation: dict[bool, IsolationLevel | None] = {}
        self._begin: dict[bool, str | None] = {}
        for write in (False, True):
            options = dialects.transaction_options(self._dialect.name, write=write)
            self._isolation[write] = options.get("isolation_level")
            # SQLite: the driver leaves transactions to us (see ``engine``)
            self._begin[write] = (
                f"BEGIN {options.get(SQLITE_BEGIN, 'DEFERRED')}" if self._dialect.name == "sqlite" else None
            )

    @property
    def integrity_error(self) -> type[Exception]:
        """The driver's ``IntegrityError`` (PEP 249), as a statement in a ``Transaction`` raises it."""
        error: type[Exception] = self._dialect.loaded_dbapi.IntegrityError
        return error

    def close(self) -> None:
        """Give the connections kept between transactions back to the pool."""
        while self._kept:
            self._kept.pop().close()

    def _checkout(self) -> PoolProxiedConnection:
        """A connection kept from a previous transaction (checked as the pool would), or the pool's.

        A pool checkout and checkin cost about 10 us (weak-reference finalizers, the queue's
        lock, events, the reset), more than SQLite's whole read; so up to ``_KEEP``
        connections stay checked out between transactions. ``list.pop``/``append`` are
        atomic, so no two threads get the same one.
        """
        while self._kept:
            try:
                connection = self._kept.pop()
            except IndexError:  # another thread took the last one
                break
            try:
                self._liveness.check(connection.dbapi_connection, connection.info)
            except sa.exc.DisconnectionError as exc:
                connection.invalidate(exc)
                connection.close()
                continue
            return connection
        return self._engine.raw_connection()

    def _checkin(self, connection: PoolProxiedConnection) -> None:
        if connection.is_valid and len(self._kept) < _KEEP:
            self._liveness.used(connection.info)
            self._kept.append(connection)
        else:
            connection.close()

    def client_cursor(self, dbapi_connection: Any) -> Any:
        """A cursor of ``dbapi_connection`` that binds parameters on the client (psycopg only)."""
        assert self._dialect.name == "postgresql", "scripts of several statements are for psycopg"
        return self._dialect.loaded_dbapi.ClientCursor(dbapi_connection)

    def prepared(self, statement: sa.ClauseElement | Script) -> _Prepared:
        """``statement`` compiled for this engine, once (after the first connection, which
        tells the dialect the server's version)."""
        prepared = self._prepared.get(statement)
        if prepared is None:
            prepared = self._prepared[statement] = _Prepared(statement, self._dialect)
        return prepared

    def run(self, work: Callable[[Transaction], T], *, write: bool, single: bool = False) -> T:
        """``work`` in one transaction: committed if it returns, rolled back if it raises.

        ``single``: ``work`` runs one statement, which is atomic and reads one snapshot on its
        own, so no transaction is begun around it where that saves round trips: PostgreSQL runs
        it in autocommit (psycopg sends BEGIN and COMMIT as round trips of their own) and
        SQLite without BEGIN; MySQL begins its transactions implicitly and still commits.
        Driver errors are raised as ``sqlalchemy.exc.DBAPIError``; a connection the error
        shows to be dead is dropped from the pool instead of being returned to it. (A plain
        call rather than a context manager: the generator behind one costs a few us, a
        tenth of a conditional write on SQLite.)
        """
        dialect = self._dialect
        error = self._error
        autocommit = single and dialect.name == "postgresql"
        isolation = None if single else self._isolation[write]
        begin = None if single else self._begin[write]
        transaction: Transaction | None = None
        try:
            connection = self._checkout()
        except error as exc:
            raise sa.exc.DBAPIError.instance("connect", None, exc, error, dialect=dialect) from exc
        dbapi_connection = connection.dbapi_connection
        assert dbapi_connection is not None, "the pool hands out open connections"
        try:
            if isolation is not None:  # PostgreSQL: the driver sends BEGIN with this level
                dialect.set_isolation_level(dbapi_connection, isolation)
            if autocommit:  # no round trip: psycopg only notes it
                dbapi_connection.autocommit = True
            cursor = dbapi_connection.cursor()
            transaction = Transaction(self, cursor, dbapi_connection)
            if begin is not None:
                cursor.execute(begin)
            try:
                result = work(transaction)
            except BaseException:
                connection.rollback()
                raise
            dbapi_connection.commit()
            if isolation is not None:
                dialect.reset_isolation_level(dbapi_connection)
                isolation = None
            return result
        except error as exc:
            invalidated = dialect.is_disconnect(exc, dbapi_connection, None)
            if invalidated:
                connection.invalidate(exc)
            statement = transaction.statement if transaction is not None else "BEGIN"
            raise sa.exc.DBAPIError.instance(
                statement, None, exc, error, connection_invalidated=invalidated, dialect=dialect
            ) from exc
        finally:
            if (isolation is not None or autocommit) and connection.is_valid:
                try:
                    if isolation is not None:  # rolled back: back to the default level
                        dialect.reset_isolation_level(dbapi_connection)
                    if autocommit:
                        dbapi_connection.autocommit = False
                except error as exc:
                    connection.invalidate(exc)
            self._checkin(connection)
