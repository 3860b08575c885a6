"""``--log-format json``: one JSON object per record, membership events as structured fields."""

from __future__ import annotations

import json
import logging

from silo.cli.log_format import JsonFormatter


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
