"""A throwaway MariaDB server for the test session (``mariadb_server`` fixture).

``mariadb-install-db`` creates the data dir; ``mariadbd`` listens on 127.0.0.1 with small
InnoDB settings. The tests connect as a real user (``silo``) with a password, to a
database of their own, as an application would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pymysql  # type: ignore[import-untyped]  # no stubs in the test environment
import pytest

from testbed.services.sql_server import ThrowawayServer, find_binary, run_to_completion

_USER = "silo"
_PASSWORD = "silo-test"
_DATABASE = "silo_test"


class MariaDbServer(ThrowawayServer):
    """``url`` is a SQLAlchemy URL of the ``silo_test`` database as user ``silo``."""

    name = "mariadb"

    def __init__(self) -> None:
        super().__init__()
        self.server_binary = find_binary("mariadbd")
        self.data = self.root / "data"
        self.socket = self.root / "mariadb.sock"
        # mariadbd refuses to run as root unless told to
        self._as_root = ["--user=root"] if os.geteuid() == 0 else []
        run_to_completion(
            [
                str(find_binary("mariadb-install-db")),
                "--no-defaults",
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *self._as_root,
            ],
            self.root / "install-db.log",
        )
        self.url = self.database_url(_DATABASE)
        self._created = False

    def database_url(self, database: str) -> str:
        return f"mysql+pymysql://{_USER}:{_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def _argv(self) -> list[str]:
        return [
            str(self.server_binary),
            "--no-defaults",
            *self._as_root,
            f"--datadir={self.data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket}",
            f"--pid-file={self.root / 'mariadb.pid'}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--performance-schema=OFF",
            "--max-connections=300",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--innodb-use-native-aio=0",
        ]

    def _root(self) -> pymysql.Connection:
        return pymysql.connect(unix_socket=str(self.socket), user="root", connect_timeout=2, autocommit=True)

    def _ready(self) -> bool:
        try:
            connection = self._root()
        except pymysql.err.OperationalError:
            return False
        with connection:
            if not self._created:  # the first start: the application's user and database
                self._grant(connection, _DATABASE)
                self._created = True
        return True

    @staticmethod
    def _grant(connection: pymysql.Connection, database: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4")
            cursor.execute(f"CREATE USER IF NOT EXISTS '{_USER}'@'%' IDENTIFIED BY '{_PASSWORD}'")
            cursor.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{_USER}'@'%'")
            cursor.execute(f"GRANT PROCESS ON *.* TO '{_USER}'@'%'")  # lets tests see InnoDB lock waits

    def create_database(self, name: str) -> str:
        """Create an empty database the ``silo`` user owns and return its SQLAlchemy URL."""
        with self._root() as connection:
            self._grant(connection, name)
        return self.database_url(name)

    def run_as_admin(self, database: str, statements: Sequence[str]) -> None:
        """Run ``statements`` as root in ``database`` (users, GRANTs)."""
        with self._root() as connection, connection.cursor() as cursor:
            cursor.execute(f"USE `{database}`")
            for statement in statements:
                cursor.execute(statement)

    def create_login_role(self, database: str, role: str, password: str) -> str:
        """An account with no privileges yet and the URL of ``database`` as that account."""
        self.run_as_admin(database, [f"CREATE USER '{role}'@'%' IDENTIFIED BY '{password}'"])
        return f"mysql+pymysql://{role}:{password}@127.0.0.1:{self.port}/{database}"


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDbServer]:
    server = MariaDbServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
