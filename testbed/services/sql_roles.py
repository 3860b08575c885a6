"""Least-privilege SQL roles on the throwaway PostgreSQL and MariaDB servers, for tests.

``role_database`` makes a fresh database, its schema created by the admin, and a login role
holding exactly ``membership_tables.sql.grants.grant_statements`` (or nothing on the tables).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa

from membership_tables import open_table
from membership_tables.sql import dialects
from membership_tables.sql.grants import grant_statements

PASSWORD = "lp-Secret-7f3a"


class SqlServer(Protocol):
    def create_database(self, name: str) -> str: ...
    def run_as_admin(self, database: str, statements: Sequence[str]) -> None: ...
    def create_login_role(self, database: str, role: str, password: str) -> str: ...


@dataclass(frozen=True)
class RoleDatabase:
    dialect: str
    database: str
    admin_url: str
    role: str
    role_url: str


def initialize_as_admin(admin_url: str) -> None:
    """Create the schema the way ``silo table init URI`` does, in process."""
    with open_table(admin_url, "admin") as admin:
        admin.initialize(try_init_version=False)


def role_database(
    server: SqlServer, dialect: str, *, create_schema: Callable[[str], None] | None, granted: bool
) -> RoleDatabase:
    """A fresh database, its schema made by ``create_schema(admin_url)`` (none if ``None``), and a
    login role holding ``grant_statements`` if ``granted`` (else nothing on the tables)."""
    suffix = uuid.uuid4().hex[:10]
    database, role = f"lp_{suffix}", f"silo_lp_{suffix}"
    admin_url = server.create_database(database)
    if create_schema is not None:
        create_schema(admin_url)
    role_url = server.create_login_role(database, role, PASSWORD)
    if granted:
        server.run_as_admin(database, grant_statements(dialect, database, role))
    elif dialect == "mysql":  # may connect to the database (and read it), not create tables
        server.run_as_admin(database, [f"GRANT SELECT ON `{database}`.* TO '{role}'@'%'"])
    return RoleDatabase(dialect, database, admin_url, role, role_url)


def refused(url: str, statement: str) -> bool:
    """True if the server refuses ``statement`` to the URL's role for lack of a privilege."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(statement)
    except sa.exc.DBAPIError as exc:
        return dialects.is_access_denied(engine.dialect.name, exc)
    finally:
        engine.dispose()
    return False
