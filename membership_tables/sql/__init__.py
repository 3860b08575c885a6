"""The SQL membership table: SQLite, PostgreSQL (psycopg 3) and MySQL/MariaDB (PyMySQL).

One SQLAlchemy Core implementation. The schema (``schema.py``) is two plain tables and a
view that admins can query by hand; see docs/sql.md.
"""

from membership_tables.sql.engine import SqlOptions
from membership_tables.sql.schema import LIVE_VIEW, MEMBERSHIP_TABLE, VERSION_TABLE
from membership_tables.sql.table import SqlMembershipTable

__all__ = ["LIVE_VIEW", "MEMBERSHIP_TABLE", "VERSION_TABLE", "SqlMembershipTable", "SqlOptions"]
