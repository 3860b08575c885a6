"""A throwaway PostgreSQL server for the test session (``postgres_server`` fixture).

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
``postgres`` user (through ``runuser``) with a data dir that user owns. It listens on
127.0.0.1 only, keeps its unix socket in the temp dir and runs with ``fsync=off``.

``PostgresServer(namespace=NS, listen_address=A)`` runs it inside a network namespace instead
(``ip netns exec NS``, e.g. a ``testbed.netfaults`` lab host), listening on that host's address
``A``, where clients in the other namespaces of its network reach it (``url``) and network
faults can cut them off from it. The harness itself (readiness, ``create_database``) and
``socket_url`` go through the unix socket in the temp dir: a filesystem socket is reachable
from every network namespace, so the test keeps an eye on the table that no lab fault cuts.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
from collections.abc import Iterator, Sequence

import psycopg
import pytest

from testbed.services.sql_server import ThrowawayServer, find_binary, run_to_completion

_BIN_PATTERN = "/usr/lib/postgresql/*/bin/"
_SUPERUSER = "postgres"


class PostgresServer(ThrowawayServer):
    """``url`` is a SQLAlchemy URL of the ``postgres`` database (trust auth, no password)."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: SIGTERM would wait for every client to leave

    def __init__(
        self, *, namespace: str | None = None, listen_address: str = "127.0.0.1", max_connections: int = 200
    ) -> None:
        """``namespace``: the network namespace to run in (the root one if None); ``listen_address``:
        the address there that clients connect to (a non-loopback one is trusted for its subnet);
        ``max_connections``: PostgreSQL's limit of client connections (a benchmark of thousands of
        silos, dozens of processes with a pool each, needs more than the tests' 200)."""
        super().__init__()
        self.max_connections = max_connections
        self.namespace = namespace
        self.listen_address = listen_address
        if namespace is not None:
            self.command_prefix = ("ip", "netns", "exec", namespace)
        self.bin = find_binary("postgres", _BIN_PATTERN + "postgres").parent
        self.data = self.root / "data"
        self.socket_dir = self.root / "socket"
        if os.geteuid() == 0:
            self.user = "postgres"
            try:
                user = pwd.getpwnam(self.user)
            except KeyError:
                pytest.fail("there is no 'postgres' user to run PostgreSQL as; run `make system-packages` (as root)")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.socket_dir.mkdir()
        if self.user is not None:
            shutil.chown(self.socket_dir, self.user)
        run_to_completion(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", _SUPERUSER, "--auth=trust", "-E", "UTF8", "-N"],
            self.root / "initdb.log",
            user=self.user,
        )
        if listen_address != "127.0.0.1":
            # initdb trusts loopback only; "samenet": any address of a subnet the server is on
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")
        self.url = self.database_url(_SUPERUSER)

    def database_url(self, database: str) -> str:
        """The URL clients use: TCP to ``listen_address`` (from ``namespace``'s network if it has one)."""
        return f"postgresql+psycopg://{_SUPERUSER}@{self.listen_address}:{self.port}/{database}"

    def socket_url(self, database: str) -> str:
        """A URL of ``database`` through the unix socket: works from any network namespace of this machine."""
        return f"postgresql+psycopg://{_SUPERUSER}@:{self.port}/{database}?host={self.socket_dir}"

    def _argv(self) -> list[str]:
        settings = {
            "listen_addresses": self.listen_address,
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": str(self.max_connections),
            "shared_buffers": "32MB",
        }
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        return [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), *options]

    def _connect(self, database: str = _SUPERUSER) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=_SUPERUSER,
            dbname=database,
            connect_timeout=2,
            autocommit=True,
        )

    def _ready(self) -> bool:
        try:
            with self._connect() as connection:
                connection.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def create_database(self, name: str) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        with self._connect() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def run_as_admin(self, database: str, statements: Sequence[str]) -> None:
        """Run ``statements`` as the superuser in ``database`` (roles, GRANTs)."""
        with self._connect(database) as connection:
            for statement in statements:
                connection.execute(statement.encode())

    def create_login_role(self, database: str, role: str, password: str) -> str:
        """A role that may log in (and nothing else yet) and the URL of ``database`` as that role.

        The server trusts every local login, so the password is not checked: it is there to
        show that it never leaks.
        """
        self.run_as_admin(database, [f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"])
        return f"postgresql+psycopg://{role}:{password}@{self.listen_address}:{self.port}/{database}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
