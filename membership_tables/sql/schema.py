"""The two SQL tables and the admin view, portable across SQLite, PostgreSQL and MySQL/MariaDB.

Meant to be read and queried by people with plain SQL (see docs/sql.md): status is stored by
name and guarded by a CHECK, times are real timestamps in UTC, votes and properties are JSON
text. ``silo_membership_version`` holds one row per cluster; every canonical write bumps it in
the same transaction as the member row it writes, and records that version in the row
(``written_version``, with the etag it left, ``written_etag``), so that a reader can ask for the
rows changed since a version (``SqlMembershipTable.read_changes``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect

from membership_tables.model import SiloStatus

VERSION_TABLE = "silo_membership_version"
MEMBERSHIP_TABLE = "silo_membership"
LIVE_VIEW = "silo_membership_live"

WRITTEN_COLUMNS = ("written_version", "written_etag")
"""The columns of ``silo_membership`` that say at which version a row was last written, added
after release 0.1.0 (``dialects.missing_columns`` and ``add_columns`` add them to an older
table). Bookkeeping for ``read_changes``: reads do not return them (``statements.ROW_COLUMNS``)
and the live view does not show them."""

LIVE_STATUSES = (SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN, SiloStatus.STOPPING)
"""Statuses of the silos that are (still) part of the cluster, as shown by the live view."""

_NAME = sa.String(128)
_TEXT = sa.String(255)
_ETAG = sa.String(64)


class _SqliteText(sa.types.UserDefinedType[str]):
    """A ``DATETIME`` column whose text SQLite hands over as it is (``UtcDateTime`` parses it)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "DATETIME"


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """An aware UTC datetime in and out, whatever the store keeps.

    PostgreSQL stores ``timestamptz``. MySQL has no time zones, so it stores the UTC wall time
    as ``DATETIME(6)`` (keeping microseconds). SQLite stores text, ``YYYY-MM-DD HH:MM:SS.ffffff``
    in UTC, which sorts and compares like the times it holds; text that is not a time (typed
    by hand) is passed through so that the row parser reports the row by name.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        if dialect.name == "sqlite":
            return dialect.type_descriptor(_SqliteText())
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        return None if value is None else time_to_db(value, dialect.name)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return time_from_db(value)


def time_to_db(value: datetime, dialect: str) -> Any:
    """An aware datetime as ``dialect``'s driver stores it in a ``UtcDateTime`` column."""
    if value.tzinfo is not UTC:  # entries hold UTC already (``ensure_utc``): skip the conversion
        value = value.astimezone(UTC)
    if dialect == "sqlite":  # YYYY-MM-DD HH:MM:SS.ffffff, without the "+00:00" (cheaper than replace(tzinfo=None))
        return value.isoformat(" ", "microseconds")[:-6]
    return value if dialect == "postgresql" else value.replace(tzinfo=None)


def time_from_db(value: Any) -> Any:
    """A ``UtcDateTime`` column's value as the driver returns it, as an aware UTC datetime.

    Anything that is not a time (text typed by hand) is returned as it is, for the row
    parser to report.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, datetime):
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00, before datetime.min in UTC: the parser reports it
        return value


metadata = sa.MetaData()

_MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

version_table = sa.Table(
    VERSION_TABLE,
    metadata,
    sa.Column("cluster_id", _NAME, primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("etag", _ETAG, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    comment="One row per cluster: the table version that every membership change bumps",
    **_MYSQL,
)

_status_names = ", ".join(f"'{status.name}'" for status in SiloStatus)

membership_table = sa.Table(
    MEMBERSHIP_TABLE,
    metadata,
    sa.Column("cluster_id", _NAME, primary_key=True),
    sa.Column("address", _TEXT, primary_key=True, comment="host name or IP of the silo endpoint"),
    sa.Column("port", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("generation", sa.BigInteger, primary_key=True, autoincrement=False, comment="process start, epoch"),
    sa.Column("silo_name", _TEXT, nullable=False),
    sa.Column("host_name", _TEXT, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, comment="SiloStatus name, e.g. ACTIVE"),
    sa.Column("proxy_port", sa.Integer, nullable=False, comment="gateway port; 0 = not a gateway"),
    sa.Column("role_name", _TEXT, nullable=False),
    sa.Column("update_zone", sa.Integer, nullable=False),
    sa.Column("fault_zone", sa.Integer, nullable=False),
    sa.Column("start_time", UtcDateTime, nullable=False),
    sa.Column("i_am_alive_time", UtcDateTime, nullable=False, comment="last heartbeat (UTC)"),
    sa.Column("suspect_times", sa.Text, nullable=False, comment='JSON: [{"by": "host:port@gen", "at": ISO}]'),
    sa.Column("properties", sa.Text, nullable=False, comment="JSON object of str to str"),
    sa.Column("etag", _ETAG, nullable=False),
    sa.Column(
        "written_version",
        sa.BigInteger,
        nullable=True,
        comment="table version set by the last membership write of this row; NULL: unknown, read as changed",
    ),
    sa.Column(
        "written_etag",
        _ETAG,
        nullable=True,
        comment="etag that write left; if etag differs, a later write (a 0.1.0 silo) did not set written_version",
    ),
    sa.CheckConstraint(f"status IN ({_status_names})", name="ck_silo_membership_status"),
    comment="One row per silo incarnation (cluster_id, address, port, generation)",
    **_MYSQL,
)

_LIVE_COLUMNS = [c.name for c in membership_table.columns if c.name not in ("etag", *WRITTEN_COLUMNS)]
_live_names = ", ".join(f"'{status.name}'" for status in LIVE_STATUSES)
LIVE_VIEW_SELECT = f"SELECT {', '.join(_LIVE_COLUMNS)} FROM {MEMBERSHIP_TABLE} WHERE status IN ({_live_names})"
"""The body of ``silo_membership_live``: constants only, so it is plain SQL on every dialect."""
