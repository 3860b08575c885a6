"""Process exit codes of a silo, so supervisors (systemd, Kubernetes) can tell why it stopped.

A supervisor should restart a silo on ``DECLARED_DEAD`` (a new process is a new
generation and may join again), and should *not* blindly restart on
``BAD_CONFIGURATION`` (the same configuration fails the same way).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    """Graceful stop: the silo wrote ShuttingDown then Dead for itself."""

    BAD_CONFIGURATION = 2
    """Bad options or command-line usage, or the store refused the silo's credentials
    (``TableAccessDeniedError``); nothing was written to the table."""

    DECLARED_DEAD = 3
    """The silo read itself Dead, missing after it joined, or superseded by a newer
    generation of the same host:port; it stopped serving at once."""

    JOIN_FAILED = 4
    """The silo could not reach every Active silo within ``max_join_attempt_time``."""

    TABLE_UNAVAILABLE_AT_START = 5
    """The membership table could not be reached to join within ``max_join_attempt_time``."""
