"""Running the SQL table's transactions: retries of deadlocks, and driver errors mapped to the contract's.

``SqlTransactions`` is the base of ``SqlMembershipTable`` (through ``maintenance.SqlMaintenance``):
the SQLAlchemy path (``_transaction``, for the calls made rarely) and the DB-API path
(``_fast_transaction``, ``_dbapi.Driver``, for the hot ones), each retrying deadlocks and lock
timeouts a few times, reads also on a connection found dead; a missing schema gives the call's
``if_no_schema``, a refused login or privilege ``AccessDeniedError``, a write refused by a session
opened read-only ``ReadOnlyTableError``, anything else ``TableUnavailableError``. A conditional
write whose work raises ``LostRaceError`` is rolled back and returns ``None``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from membership_tables.errors import (
    AccessDeniedError,
    MembershipTableError,
    ReadOnlyTableError,
    TableUnavailableError,
)
from membership_tables.sql import dialects
from membership_tables.sql._dbapi import Driver, Transaction

T = TypeVar("T")

_ATTEMPTS = 3
"""Tries of one transaction that keeps hitting deadlocks or lock timeouts."""


class LostRaceError(MembershipTableError):
    """A precondition of a conditional write failed: roll back and return ``False``."""


class SqlTransactions:
    """Transactions on one engine, with the retries and error mapping of the SQL table."""

    def __init__(self, engine: sa.Engine, *, read_only: bool = False) -> None:
        self._engine = engine
        self._read_only = read_only
        self._dialect = engine.dialect.name
        self._where = engine.url.render_as_string(hide_password=True)
        self._driver = Driver(engine)

    def _transaction(self, work: Callable[[sa.Connection], T], *, write: bool, if_no_schema: T) -> T:
        """Run ``work`` in one transaction, retrying deadlocks; map driver errors."""
        options = dialects.transaction_options(self._dialect, write=write)

        def run() -> T:
            with self._engine.connect() as connection:
                connection.execution_options(**options)
                with connection.begin():
                    return work(connection)

        return self._retrying(run, write=write, if_no_schema=if_no_schema)

    def _fast_transaction(
        self, work: Callable[[Transaction], T], *, write: bool, if_no_schema: T, single: bool = False
    ) -> T:
        """``_transaction`` on the pooled DB-API connection, for the hot paths (see ``_dbapi``);
        ``single``: ``work`` runs one statement (``Driver.run``)."""
        run = self._driver.run
        return self._retrying(lambda: run(work, write=write, single=single), write=write, if_no_schema=if_no_schema)

    def _retrying(self, run: Callable[[], T], *, write: bool, if_no_schema: T) -> T:
        """Retry deadlocks (and reads on a connection found dead); map driver errors."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return run()
            except sa.exc.DBAPIError as exc:
                if dialects.is_missing_table(self._dialect, exc):
                    return if_no_schema
                if self._read_only and dialects.is_read_only(self._dialect, exc):
                    raise self._refused_write(exc) from exc
                if dialects.is_access_denied(self._dialect, exc):
                    raise self._denied(exc) from exc
                retry = dialects.is_transient(self._dialect, exc) or (exc.connection_invalidated and not write)
                if retry and attempt < _ATTEMPTS:
                    time.sleep(random.uniform(0.005, 0.05) * attempt)
                    continue
                raise self._unavailable(exc) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise self._unavailable(exc) from exc

    def _unavailable(self, exc: sa.exc.SQLAlchemyError) -> TableUnavailableError:
        cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
        return TableUnavailableError(
            f"the membership table at {self._where} is unavailable ({type(cause).__name__}: {cause}); "
            "check that the database is up and reachable"
        )

    def _denied(self, exc: sa.exc.DBAPIError) -> AccessDeniedError:
        return AccessDeniedError(
            f"the database at {self._where} refused this role ({type(exc.orig).__name__}: {exc.orig}); "
            "check the user and password, and grant the privileges listed in docs/security.md"
        )

    def _refused_write(self, exc: sa.exc.DBAPIError) -> ReadOnlyTableError:
        return ReadOnlyTableError(
            f"the database at {self._where} refused a write ({type(exc.orig).__name__}: {exc.orig}): this handle "
            "was opened read-only and its session may only read; nothing was written. Open it without read_only "
            "to write"
        )

    def _write(self, work: Callable[[sa.Connection], T]) -> T | None:
        """A conditional write: ``None`` (rolled back) if ``work`` raised ``LostRaceError``."""
        try:
            return self._transaction(work, write=True, if_no_schema=None)
        except LostRaceError:
            return None

    def _fast_write(self, work: Callable[[Transaction], T], *, single: bool = False) -> T | None:
        """``_write`` on the pooled DB-API connection; ``single``: ``work`` runs one statement."""
        try:
            return self._fast_transaction(work, write=True, if_no_schema=None, single=single)
        except LostRaceError:
            return None
