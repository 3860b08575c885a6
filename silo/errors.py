"""The exceptions of the silo runtime.

Every error the runtime raises on purpose derives from one root::

    SiloError
    ├── OptionsError                    an option is unknown, malformed or inconsistent
    │                                   (also a ValueError); exit code 2
    ├── TableAccessDeniedError          the store refused the silo's credentials or a
    │                                   privilege it needs (e.g. the schema is missing and
    │                                   the role may not create it); exit code 2
    ├── JoinError                       the silo could not join; exit code 4
    │   └── TableUnavailableAtStartError the table was unreachable for the whole
    │                                   join attempt; exit code 5
    └── DeclaredDeadError               the silo found itself Dead or superseded by a newer
                                        generation while starting; exit code 3

Table errors (``membership_tables.TableUnavailableError``) are never turned into silo
errors while running: the runtime retries them and never treats an unreachable table as
evidence that a silo died.
"""

from __future__ import annotations

from collections.abc import Iterable

from membership_tables import SiloAddress
from silo.exit_codes import ExitCode


class SiloError(Exception):
    """Root of every exception raised on purpose by the silo runtime."""

    exit_code: ExitCode = ExitCode.BAD_CONFIGURATION


class OptionsError(SiloError, ValueError):
    """An option is unknown, has a bad value, or contradicts another option."""

    exit_code = ExitCode.BAD_CONFIGURATION


class TableAccessDeniedError(SiloError):
    """The store refused the silo (``membership_tables.AccessDeniedError`` while joining).

    A configuration problem an admin must fix (credentials, GRANTs, ``silo table init``), so
    the silo does not retry and a supervisor should not restart it blindly.
    """

    exit_code = ExitCode.BAD_CONFIGURATION


class JoinError(SiloError):
    """The silo could not join the cluster; ``unreachable`` names the silos it could not ping."""

    exit_code = ExitCode.JOIN_FAILED

    def __init__(self, message: str, unreachable: Iterable[SiloAddress] = ()) -> None:
        super().__init__(message)
        self.unreachable = tuple(unreachable)


class TableUnavailableAtStartError(JoinError):
    """The membership table could not be reached within ``max_join_attempt_time``."""

    exit_code = ExitCode.TABLE_UNAVAILABLE_AT_START


class DeclaredDeadError(SiloError):
    """While starting, the silo read itself Dead or found a newer generation of itself."""

    exit_code = ExitCode.DECLARED_DEAD
