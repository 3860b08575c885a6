"""``TokenSink``: results per key in a SQL table that a replaced owner cannot overwrite (``silo.work.fencing``)."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["TokenSink"]


class TokenSink:
    """A SQL table of results per key that refuses writes under a smaller token than the key's largest.

    One row per key: ``(key, token, value)``. ``write`` inserts the key's first row, or updates it
    with one conditional statement (``... WHERE token <= :token``), so a stale owner's write that
    arrives after the new owner's changes nothing and returns False. The same owner may write a
    key again under the same token (a retried batch): writes are idempotent per token.
    """

    def __init__(self, engine: sa.Engine | str, table: str = "fenced_results") -> None:
        self.engine = sa.create_engine(engine) if isinstance(engine, str) else engine
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("key", sa.String(512), primary_key=True),
            sa.Column("token", sa.BigInteger, nullable=False),
            sa.Column("value", sa.LargeBinary, nullable=False),
        )
        self.table.create(self.engine, checkfirst=True)

    def write(self, key: str, token: int, value: bytes) -> bool:
        """Store ``value`` for ``key`` unless a write under a larger token came first; True if stored."""
        table = self.table
        try:
            with self.engine.begin() as connection:
                connection.execute(table.insert().values(key=key, token=token, value=value))
            return True
        except sa.exc.IntegrityError:
            pass  # the key has a row: replace it only under a token at least as large
        update = table.update().where(table.c.key == key, table.c.token <= token).values(token=token, value=value)
        with self.engine.begin() as connection:
            return connection.execute(update).rowcount == 1

    def read(self, key: str) -> tuple[int, bytes] | None:
        """The key's stored ``(token, value)``, or None."""
        with self.engine.connect() as connection:
            row = connection.execute(
                sa.select(self.table.c.token, self.table.c.value).where(self.table.c.key == key)
            ).first()
        return None if row is None else (int(row.token), bytes(row.value))
