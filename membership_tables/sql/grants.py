"""The least privilege a silo needs in SQL: row privileges on the two tables, nothing else.

Built from ``schema`` so the GRANTs in docs/security.md and docs/sql.md cannot drift from
the tables the silos use (a test compares them). Silos never run DDL on a complete schema
(``initialize`` checks the catalog first); ``silo table init URI`` creates it once, as an
admin, and adds to a table of an older release the columns it lacks (table-level privileges
cover them: nothing to grant again). The live view is for people: grant ``SELECT`` on it to
whoever reads it.
"""

from __future__ import annotations

import re

from membership_tables.errors import InvalidTableUriError
from membership_tables.sql.schema import metadata

ROW_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
SILO_TABLES = tuple(table.name for table in metadata.sorted_tables)
"""The two tables a silo reads and writes."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _identifier(kind: str, name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise InvalidTableUriError(
            f"{kind} {name!r} is not a plain SQL identifier; use letters, digits and '_' (not first), at most 63"
        )
    return name


def grant_statements(dialect: str, database: str, role: str) -> list[str]:
    """The statements that give ``role`` what a silo needs in ``database`` (``postgresql`` or ``mysql``).

    PostgreSQL: ``role`` is a role with LOGIN, the tables live in schema ``public``. MySQL and
    MariaDB: ``role`` is an account name, granted from any host (``'role'@'%'``; narrow the host
    as you like).
    """
    database, role = _identifier("database", database), _identifier("role", role)
    privileges = ", ".join(ROW_PRIVILEGES)
    if dialect == "postgresql":
        return [
            f"GRANT CONNECT ON DATABASE {database} TO {role};",
            f"GRANT USAGE ON SCHEMA public TO {role};",
            f"GRANT {privileges} ON {', '.join(SILO_TABLES)} TO {role};",
        ]
    if dialect in ("mysql", "mariadb"):
        return [f"GRANT {privileges} ON `{database}`.`{table}` TO '{role}'@'%';" for table in SILO_TABLES]
    raise InvalidTableUriError(f"no GRANTs for SQL dialect {dialect!r}: use postgresql or mysql (SQLite has no roles)")
