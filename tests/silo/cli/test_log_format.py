"""``--log-format json``: one JSON object per record, membership events as structured fields."""

from __future__ import annotations

import json
import logging
import sys

from membership_tables.redaction import remember_secret
from silo.cli.log_format import TEXT_FORMAT, JsonFormatter, RedactingFormatter


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("silo.events", logging.INFO, __file__, 1, message, ("x",), None)
    made.created = 1767225600.25
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_plain_record_is_one_json_object() -> None:
    assert json.loads(JsonFormatter().format(record("hello %s"))) == {
        "time": "2026-01-01T00:00:00.250+00:00",
        "level": "INFO",
        "logger": "silo.events",
        "message": "hello x",
    }


def test_an_event_record_carries_the_observer_and_the_event() -> None:
    event = {"kind": "left", "silo": "127.0.0.1:1@2", "version": 4}
    line = JsonFormatter().format(record("sees %s", silo="127.0.0.1:9@9", event=event))
    assert "\n" not in line
    document = json.loads(line)
    assert (document["silo"], document["event"]) == ("127.0.0.1:9@9", event)


def test_both_formats_mask_uri_passwords_and_registered_secrets_even_in_tracebacks() -> None:
    remember_secret("log-format-token-5e1d")
    try:
        raise RuntimeError("driver said: token log-format-token-5e1d is invalid")
    except RuntimeError:
        failure = sys.exc_info()
    made = logging.LogRecord(
        "silo", logging.ERROR, __file__, 1, "table %s failed", ("mysql+pymysql://u:pw-0a9@h/db",), failure
    )
    for inner in (JsonFormatter(), logging.Formatter(TEXT_FORMAT)):
        line = RedactingFormatter(inner).format(made)
        assert "mysql+pymysql://u:***@h/db" in line
        assert "pw-0a9" not in line
        assert "log-format-token-5e1d" not in line
        assert "driver said: token *** is invalid" in line
