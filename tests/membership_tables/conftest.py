"""Fixtures shared by the SQL backend's tests: a new database on each SQL store, and an admin's engine on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from testbed.services.sql_server import ThrowawayServer

SERVERS = {"postgresql": "postgres_server", "mariadb": "mariadb_server"}
"""The session fixtures of the SQL servers, by dialect."""


@pytest.fixture(
    params=["sqlite", *(pytest.param(name, marks=pytest.mark.slow) for name in SERVERS)],
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty database on each of the three SQL stores."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'membership.db'}"
    server: ThrowawayServer = request.getfixturevalue(SERVERS[request.param])
    return server.create_database(f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def admin(url: str) -> Iterator[sa.Engine]:
    """A plain SQLAlchemy engine, as an administrator with a SQL prompt (or a silo of an older release) would use."""
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()
