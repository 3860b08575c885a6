"""Handlers for tests that load them by spec (``--handler NAME=tests.silo.work_handlers:FUNCTION``)."""

from __future__ import annotations

from collections.abc import Sequence

NOT_A_FUNCTION = 42


def reverse(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Each payload reversed."""
    return [payload[::-1] for _, payload in items]


def crash(items: Sequence[tuple[str, bytes]]) -> list[bytes]:
    raise RuntimeError("crash handler always fails")
