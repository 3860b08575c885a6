"""The old import path of keyed routing; it lives in ``silo.work.routing``."""

from silo.work.routing import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_ATTEMPTS,
    NoLiveSiloError,
    Record,
    Routed,
    Router,
    Send,
    check_positive_int,
    exponential_backoff,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ATTEMPTS",
    "NoLiveSiloError",
    "Record",
    "Routed",
    "Router",
    "Send",
    "check_positive_int",
    "exponential_backoff",
]
