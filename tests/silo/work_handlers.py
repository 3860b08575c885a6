"""Handlers for tests that load them by spec (``--handler NAME=tests.silo.work_handlers:FUNCTION``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from silo.work.handlers import checksum_handler, columnar

NOT_A_FUNCTION = 42


def reverse(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Each payload reversed."""
    return [payload[::-1] for _, payload in items]


def crash(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    raise RuntimeError("crash handler always fails")


@columnar
def key_lengths(batch: pa.RecordBatch) -> pa.Array:
    """A columnar handler: each routing key's length (4 bytes, big-endian), as a binary Arrow array."""
    lengths = pc.utf8_length(batch.column(0)).to_pylist()
    return pa.array([length.to_bytes(4, "big") for length in lengths], pa.binary())


@columnar
def columns_seen(batch: pa.RecordBatch) -> list[bytes]:
    """A columnar handler: each row's column names and values as JSON, to show what it received."""
    return [json.dumps(row, default=bytes.decode).encode() for row in batch.to_pylist()]


def short(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Returns one result too few."""
    return [payload for _, payload in items][1:]


KILL_ORDER_ENV = "SILO_TEST_KILL_ORDER"
"""A file the test writes ``KEY PID`` into: ``checksum_or_kill`` SIGKILLs process group PID when it meets KEY."""


def checksum_or_kill(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """``example.checksum``, and once the key named in the kill order arrives, SIGKILL that process group.

    Lets a test kill a silo in the middle of a job from inside the job, whatever the machine's speed.
    """
    order = Path(os.environ.get(KILL_ORDER_ENV, "/nonexistent"))
    with contextlib.suppress(FileNotFoundError):
        key, pid = order.read_text().split()
        if any(item_key == key for item_key, _ in items):
            order.unlink()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)
    return checksum_handler(items)


_SINKS: dict[str, object] = {}


def token_sink(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Store each payload in a ``TokenSink`` (SQLite file ``$SILO_TEST_SINK``) under the call's
    fencing token: ``stored``, or ``refused`` when a newer owner of the key wrote first."""
    from silo.work.fencing import current_token
    from silo.work.token_sink import TokenSink

    path = os.environ["SILO_TEST_SINK"]
    sink = _SINKS.get(path)
    if sink is None:
        sink = _SINKS[path] = TokenSink(f"sqlite:///{path}")
    assert isinstance(sink, TokenSink)
    token = current_token()
    return [b"stored" if sink.write(key, token, payload) else b"refused" for key, payload in items]


def sleep_for_payload(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Sleeps for the seconds in the first payload (e.g. ``b"3"``): a call still in flight when a test drains."""
    import time

    time.sleep(float(items[0][1]) if items else 0.0)
    return [payload for _, payload in items]


CALLS_ENV = "SILO_TEST_CALLS"
"""A file ``checksum_and_record`` appends one line per call to: the pid, the wall-clock time and the keys."""


def _record_call(items: Sequence[tuple[str, bytes]]) -> None:
    """Append this call (pid, wall-clock start, keys) to ``$SILO_TEST_CALLS``, then pause briefly
    (a job that takes a while)."""
    import time

    started = time.time()
    with Path(os.environ[CALLS_ENV]).open("a") as calls:
        calls.write(json.dumps({"pid": os.getpid(), "at": started, "keys": [key for key, _ in items]}) + "\n")
    time.sleep(0.02)


def checksum_and_record(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """``example.checksum``, recording which silo ran which keys when, so a test can tell which
    calls reached a draining silo."""
    _record_call(items)
    return checksum_handler(items)


def echo_and_record(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """``example.echo``, recording calls as ``checksum_and_record`` does."""
    _record_call(items)
    return [payload for _, payload in items]


def pause_own_silo(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Stops its own silo process (SIGSTOP: every thread, as a long GC pause or a stalled VM would);
    once the test resumes it (SIGCONT), returns each payload."""
    os.kill(os.getpid(), signal.SIGSTOP)
    return [payload for _, payload in items]
