"""How ``silo`` commands write their log: ``--log-format text`` (default) or ``json``.

JSON puts one object per line, for log shippers: ``time`` (ISO 8601 UTC), ``level``,
``logger``, ``message``, and for membership events (logger ``silo.events``) the observing
``silo`` and the ``event`` itself (``silo.events.MembershipEvent.to_json``: ``kind``, ``silo``,
``name``, ``version``, ``at``, ``observed_at``, ``by``, ``properties``).

Both formats pass every line through ``membership_tables.redaction.redact``, so no password,
token or digest credential reaches the log, whoever logged it (a driver's error included).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from membership_tables.redaction import redact

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")
STRUCTURED_FIELDS = ("silo", "event")
"""Record attributes (passed as ``extra=``) copied into a JSON line when present."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in STRUCTURED_FIELDS:
            if hasattr(record, name):
                document[name] = getattr(record, name)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with every secret masked (``redact``)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self._inner.format(record))


def configure_logging(level: str, log_format: str) -> None:
    """Log to stderr at ``level`` in ``log_format`` (``text`` or ``json``), secrets masked."""
    handler = logging.StreamHandler(sys.stderr)
    inner = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(RedactingFormatter(inner))
    logging.basicConfig(level=level, handlers=[handler])
