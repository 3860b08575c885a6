"""Throwaway stores for the benchmarks, started with the test suite's own server classes.

Each function is a context manager that starts one server in a temp dir on a free
127.0.0.1 port and stops it (and removes its files) afterwards. ``postgres(stats=True)``
also loads ``pg_stat_statements``, so a benchmark can count the statements silos run.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import psycopg

from testbed.services.consul import ConsulServerProcess
from testbed.services.dynamodb import MotoServer
from testbed.services.mariadb import MariaDbServer
from testbed.services.postgres import PostgresServer
from testbed.services.process import free_port
from testbed.services.zookeeper import ZooKeeperServer


class BenchPostgresServer(PostgresServer):
    """The test suite's PostgreSQL, optionally with ``pg_stat_statements`` preloaded."""

    def __init__(self, stats: bool, max_connections: int = 200) -> None:
        self.stats = stats
        super().__init__(max_connections=max_connections)

    def _argv(self) -> list[str]:
        extra = ["-c", "shared_preload_libraries=pg_stat_statements"] if self.stats else []
        return [*super()._argv(), *extra]

    def connect(self, database: str) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit superuser connection to ``database``."""
        return self._connect(database)


class _Server(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Server)


@contextlib.contextmanager
def running(server: S, close: Callable[[], None] | None = None) -> Iterator[S]:
    """``server`` started, then stopped (``close`` instead of ``stop`` when given) whatever happens."""
    try:
        server.start()
        yield server
    finally:
        (close or server.stop)()


def postgres(stats: bool = False, max_connections: int = 200) -> contextlib.AbstractContextManager[BenchPostgresServer]:
    server = BenchPostgresServer(stats, max_connections)
    return running(server, server.close)


def mariadb() -> contextlib.AbstractContextManager[MariaDbServer]:
    server = MariaDbServer()
    return running(server, server.close)


def zookeeper(workdir: Path) -> contextlib.AbstractContextManager[ZooKeeperServer]:
    path = workdir / "zookeeper"
    path.mkdir(exist_ok=True)
    return running(ZooKeeperServer(path, free_port()))


def moto(workdir: Path) -> contextlib.AbstractContextManager[MotoServer]:
    return running(MotoServer(workdir))


def consul(workdir: Path) -> contextlib.AbstractContextManager[ConsulServerProcess]:
    """The Consul test server as its own process (its threads do not share the benchmark's GIL)."""
    return running(ConsulServerProcess(workdir / "consul.log"))


@contextlib.contextmanager
def table_uris(backend: str, root: Path, stats: bool = False) -> Iterator[Callable[[], str]]:
    """A maker of fresh, empty table URIs on ``sqlite`` (files under ``root``) or ``postgres`` (one server)."""
    if backend == "sqlite":
        yield lambda: f"sqlite:///{root / unique('table')}.db"
    elif backend == "postgres":
        with postgres(stats) as server:
            yield lambda: server.create_database(unique("bench"))
    else:
        raise ValueError(f"no silo benchmark backend {backend!r}; use sqlite or postgres")


def unique(prefix: str) -> str:
    """A fresh name for a database, table or chroot."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
