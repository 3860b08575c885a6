"""From a table URI and options to a configured SQLAlchemy engine, and dialect quirks.

Only the drivers the project tests are accepted: SQLite (``sqlite:///file.db``, the standard
library's ``sqlite3``), PostgreSQL through psycopg 3 and MySQL/MariaDB through PyMySQL. A URI
without a driver gets the supported one (``postgresql://`` means ``postgresql+psycopg://``).
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from membership_tables.errors import BackendNotInstalledError, InvalidTableUriError
from membership_tables.redaction import remember_secret
from membership_tables.registry import DISTRIBUTION
from membership_tables.sql.watchdog import Watchdog, guarded_psycopg_connect

# backend -> (the one supported driver, the pip extra that installs it)
_DRIVERS: dict[str, tuple[str, str]] = {
    "sqlite": ("pysqlite", "sql"),
    "postgresql": ("psycopg", "postgres"),
    "mysql": ("pymysql", "mysql"),
    "mariadb": ("pymysql", "mysql"),
}

# SQLite begins transactions itself (see _configure_sqlite); writes pass this execution option.
SQLITE_BEGIN = "silo_sqlite_begin"


@dataclass(frozen=True)
class SqlOptions:
    """Options of the SQL backend, passed as ``open_table(uri, cluster_id, **options)``."""

    connect_timeout: float = 5.0
    """Seconds to wait for a connection, so an unreachable server fails fast."""
    statement_timeout: float = 10.0
    """Seconds a statement or lock wait may take (SQLite: the busy timeout) before failing. With
    ``network_timeout`` it bounds a call's wait for an answer to 15 s, the default detection
    time (``SiloOptions.detection_time``): a vote never waits on the store longer than a death takes."""
    network_timeout: float = 5.0
    """Seconds the network to a database server may stay silent: a request gets no more than
    ``answer_timeout`` (``statement_timeout`` plus this) to be answered, and PostgreSQL's TCP
    keepalives and ``tcp_user_timeout`` end a connection whose packets go unacknowledged for
    about this long."""
    pool_size: int = 5
    """Connections kept open per handle."""
    max_overflow: int = 10
    """Extra connections a busy handle may open beyond ``pool_size``."""
    ping_after_idle: float = 1.0
    """Seconds a pooled connection may sit unused before it is checked (pinged) on checkout;
    0 checks it every time. A connection in steady use is not pinged: the ping is a whole
    round trip, as long as the statement itself on a local server."""

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> SqlOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidTableUriError(f"unknown SQL table options {unknown}; supported: {sorted(known)}")
        for name, value in options.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidTableUriError(f"SQL table option {name} must be a non-negative number, got {value!r}")
            if name == "network_timeout" and not 0 < value < math.inf:
                raise InvalidTableUriError(f"SQL table option {name} must be a positive number, got {value!r}")
        return cls(**options)

    @property
    def answer_timeout(self) -> float:
        """Seconds a call waits for the server to answer one request before giving the connection
        up: the server's own limit on the statement, plus ``network_timeout`` for the answer."""
        return self.statement_timeout + self.network_timeout


def parse_url(uri: str) -> URL:
    """The SQLAlchemy URL of ``uri`` with its driver made explicit; refuses what we do not support."""
    try:
        url = make_url(uri)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise InvalidTableUriError(f"cannot parse SQL table URI {uri!r}: {exc}") from exc
    remember_secret(url.password if isinstance(url.password, str) else None)
    backend, _, driver = url.drivername.partition("+")
    backend = "postgresql" if backend == "postgres" else backend
    shown = url.render_as_string(hide_password=True)
    if backend not in _DRIVERS:
        raise InvalidTableUriError(f"unsupported SQL database {backend!r} in {shown}; use sqlite, postgresql or mysql")
    supported = _DRIVERS[backend][0]
    if driver not in ("", supported):
        raise InvalidTableUriError(
            f"unsupported driver {driver!r} in {shown}; the {backend} table uses {backend}+{supported}://"
        )
    url = url.set(drivername=f"{backend}+{supported}")
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        raise InvalidTableUriError(
            f"{shown} is an in-memory SQLite database, which other handles cannot share; "
            "name a file (sqlite:///membership.db) or use memory://NAME"
        )
    if backend in ("mysql", "mariadb") and not url.database:
        raise InvalidTableUriError(
            f"{shown} names no database; add it after the host: mysql+pymysql://HOST:3306/DATABASE"
        )
    return url


def create_engine(
    url: URL, options: SqlOptions, clock: Callable[[], float] = time.monotonic, *, read_only: bool = False
) -> sa.Engine:
    """An engine with short connect timeouts, bounded lock waits, a deadline on every answer of a
    server (see ``SqlOptions.network_timeout``) and liveness checks on checkout.

    ``clock`` (seconds) times how long pooled connections sit idle (see ``_ping_idle_connections``).
    ``read_only``: every connection's session refuses writes (``_open_sessions_read_only``).
    """
    backend = url.get_backend_name()
    if read_only and backend == "sqlite":
        url = _sqlite_read_only_url(url)
    timeout = math.ceil(options.statement_timeout)
    connect_args: dict[str, Any]
    isolation: dict[str, str] = {}
    if backend == "sqlite":
        connect_args = {"timeout": options.statement_timeout}
    elif backend == "postgresql":
        # libpq counts whole seconds and treats less than 2 as 2
        connect_args = {"connect_timeout": max(2, math.ceil(options.connect_timeout))}
        server_limits = f"-c statement_timeout={timeout * 1000} -c lock_timeout={timeout * 1000}"
        given = {"options": server_limits, **_tcp_keepalives(options.network_timeout)}
        connect_args.update((name, value) for name, value in given.items() if name not in url.query)
    else:
        isolation = {"isolation_level": "REPEATABLE READ"}  # whatever the server's default, for snapshot reads
        if "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
        connect_args = {
            "connect_timeout": options.connect_timeout,
            "read_timeout": options.answer_timeout,
            "write_timeout": options.answer_timeout,
            "init_command": f"SET SESSION innodb_lock_wait_timeout = {max(1, timeout)}",
        }
    try:
        engine = sa.create_engine(
            url,
            connect_args=connect_args,
            pool_size=options.pool_size,
            max_overflow=options.max_overflow,
            pool_timeout=options.statement_timeout,
            **isolation,
        )
    except ImportError as exc:
        extra = _DRIVERS[backend][1]
        raise BackendNotInstalledError(
            f"the {backend} membership table needs a driver that is not installed ({exc}); "
            f"install it with: pip install '{DISTRIBUTION}[{extra}]'"
        ) from exc
    if backend == "sqlite":
        _configure_sqlite(engine, read_only=read_only)
    elif backend == "postgresql":
        _guard_round_trips(engine, Watchdog(options.answer_timeout))
    if read_only and backend != "sqlite":
        _open_sessions_read_only(engine)
    _ping_idle_connections(engine, options.ping_after_idle, clock)
    return engine


def _sqlite_read_only_url(url: URL) -> URL:
    """A SQLite file opened ``mode=ro``: the file can be neither created nor written. A URL that is
    already a SQLite URI (``file:...``) or has a query of its own is kept (``query_only`` still holds)."""
    database = url.database or ""
    if url.query or database.startswith("file:"):
        return url
    return url.set(database=f"file:{quote(database)}", query={"mode": "ro", "uri": "true"})


_READ_ONLY_SESSION = {
    "postgresql": "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    "mysql": "SET SESSION TRANSACTION READ ONLY",
    "mariadb": "SET SESSION TRANSACTION READ ONLY",
}


def _open_sessions_read_only(engine: sa.Engine) -> None:
    """PostgreSQL, MySQL/MariaDB: every new connection's transactions (autocommit statements
    included) are READ ONLY, so the server refuses any write on it (a guard against mistakes: a
    session could turn it off; a role that may only read is the access control, docs/security.md)."""
    statement = _READ_ONLY_SESSION[engine.dialect.name]

    @sa.event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(statement)
        cursor.close()
        dbapi_connection.commit()


def _tcp_keepalives(network_timeout: float) -> dict[str, int]:
    """libpq settings that end a connection silent for about ``network_timeout`` seconds.

    Data the server has not acknowledged for that long ends it (``tcp_user_timeout``), and so
    do keepalive probes left unanswered that long, sent after a third of it without traffic:
    a server busy with a long statement still answers them, a lost network does not. (libpq
    counts the keepalive settings in whole seconds, at least 1.)
    """
    probe = max(1, round(network_timeout / 3))
    return {
        "keepalives": 1,
        "keepalives_idle": probe,
        "keepalives_interval": probe,
        "keepalives_count": 3,
        "tcp_user_timeout": max(1, round(network_timeout * 1000)),
    }


def _guard_round_trips(engine: sa.Engine, watchdog: Watchdog) -> None:
    """Make ``engine`` open psycopg connections whose every round trip ``watchdog`` bounds."""
    connect = guarded_psycopg_connect(watchdog)

    @sa.event.listens_for(engine, "do_connect")
    def on_connect(_dialect: sa.Dialect, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> Any:
        return connect(*cargs, **cparams)


_LAST_USED = "silo_last_used"


class Liveness:
    """When a pooled connection is checked (pinged) before use, and the check.

    This is SQLAlchemy's ``pool_pre_ping`` (a dead connection is replaced by a fresh one, so
    a handle keeps working after the database restarts) without the round trip on every
    checkout, which doubled the cost of a read on a local PostgreSQL: only a connection
    unused for more than ``idle`` seconds is pinged. One that dies while in steady use fails
    its statement instead; the pool then drops it, and reads retry.
    """

    def __init__(self, dialect: sa.Dialect, idle: float, clock: Callable[[], float]) -> None:
        self._dialect = dialect
        self._idle = idle
        self._clock = clock

    def _ping(self, dbapi_connection: Any) -> None:
        """One round trip that opens no transaction (so none has to be ended by another).

        PostgreSQL runs ``SELECT 1`` in autocommit (psycopg would send BEGIN first and need a
        ROLLBACK after: three round trips); PyMySQL sends COM_PING; SQLite's driver, which the
        engine leaves to begin transactions itself, runs the SELECT alone.
        """
        if self._dialect.name != "postgresql":
            self._dialect.do_ping(dbapi_connection)
            return
        dbapi_connection.autocommit = True
        try:
            self._dialect.do_ping(dbapi_connection)
        finally:
            dbapi_connection.autocommit = False

    def used(self, info: dict[Any, Any]) -> None:
        """Note that the connection whose ``info`` this is was just used."""
        info[_LAST_USED] = self._clock()

    def check(self, dbapi_connection: Any, info: dict[Any, Any]) -> None:
        """Ping the connection if it sat unused too long; ``DisconnectionError`` if it is dead."""
        last_used = info.get(_LAST_USED)
        if last_used is None or self._clock() - last_used <= self._idle:  # new, or in steady use
            return
        try:
            self._ping(dbapi_connection)
        except self._dialect.loaded_dbapi.Error as exc:
            info.pop(_LAST_USED, None)
            raise sa.exc.DisconnectionError(f"a pooled connection failed its liveness check: {exc}") from exc


_LIVENESS: weakref.WeakKeyDictionary[sa.Engine, Liveness] = weakref.WeakKeyDictionary()


def liveness(engine: sa.Engine) -> Liveness:
    """The liveness check ``create_engine`` gave ``engine`` (the default one for other engines)."""
    found = _LIVENESS.get(engine)
    return found if found is not None else Liveness(engine.dialect, SqlOptions.ping_after_idle, time.monotonic)


def _ping_idle_connections(engine: sa.Engine, idle: float, clock: Callable[[], float]) -> None:
    """Check pooled connections that sat idle on checkout (see ``Liveness``)."""
    check = _LIVENESS[engine] = Liveness(engine.dialect, idle, clock)

    @sa.event.listens_for(engine.pool, "checkin")
    def on_checkin(_dbapi_connection: Any, record: Any) -> None:
        check.used(record.info)

    @sa.event.listens_for(engine.pool, "checkout")
    def on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        check.check(dbapi_connection, record.info)


def _configure_sqlite(engine: sa.Engine, *, read_only: bool) -> None:
    """WAL (readers never block the writer), and transactions we begin ourselves; ``read_only``:
    ``query_only`` instead, so SQLite refuses every write on the connection.

    The ``sqlite3`` module would start transactions lazily and as DEFERRED; two writers could
    then both hold read locks and deadlock on the upgrade. Writes use ``BEGIN IMMEDIATE``
    instead (taking the write lock up front, waiting up to the busy timeout); reads use a
    plain ``BEGIN``, which in WAL mode reads one consistent snapshot.
    """

    @sa.event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        pragmas = ("query_only=ON",) if read_only else ("journal_mode=WAL", "synchronous=NORMAL")
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def on_begin(connection: sa.Connection) -> None:
        mode = connection.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")
