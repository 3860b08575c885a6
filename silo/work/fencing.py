"""Fencing tokens: what lets a downstream system refuse a stale owner's writes.

Every ``Work.Process`` call runs its handler under a **token**: the table version at the last
change of the answering silo's serving ring (``silo.runtime.ownership``). When a key moves to
another silo, the new owner serves it under a larger token than the old owner ever used. So a
sink that stores, per key, the largest token it has accepted and refuses smaller ones (as
Kafka refuses a fenced producer epoch) never takes a write from an owner that has been
replaced, however late that write arrives: a paused silo that resumes, a handler that ran past
its silo's lease, a request delayed in the network.

In a handler::

    from silo.work.fencing import current_token

    def handle(items):
        token = current_token()
        for key, payload in items:
            sink.write(key, token, payload)   # refused (False) if a newer owner wrote this key

``silo.work.token_sink.TokenSink`` is such a sink over any SQLAlchemy database (docs/spark.md, "Fencing tokens").
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from silo.errors import SiloError

__all__ = ["NoTokenError", "current_token", "running_under"]

_TOKEN: contextvars.ContextVar[int] = contextvars.ContextVar("silo_fencing_token")


class NoTokenError(SiloError, LookupError):
    """``current_token()`` was called outside a handler call."""


def current_token() -> int:
    """The fencing token of the handler call running now (in the silo's worker thread)."""
    try:
        return _TOKEN.get()
    except LookupError:
        raise NoTokenError(
            "current_token() is only defined inside a Work handler called by a silo; "
            "pass the token explicitly (Process responses carry it as fencing_token)"
        ) from None


@contextlib.contextmanager
def running_under(token: int) -> Iterator[None]:
    """Make ``token`` the current token for the code in the block (the silo wraps each handler call)."""
    reset = _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(reset)
