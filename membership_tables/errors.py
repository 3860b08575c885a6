"""The exceptions of ``membership_tables``.

Every error this package raises on purpose derives from one root::

    MembershipTableError
    ├── InvalidTableUriError     the URI names no backend, or cannot be parsed
    ├── InvalidClusterIdError    the cluster id is not a short printable name
    ├── InvalidEntryError        a MembershipEntry or SiloAddress built from bad values
    ├── InvalidUpdateError       an ``update_rows`` batch that is empty, names a silo twice,
    │                            or is larger than the store's ``max_rows_per_update``
    ├── MalformedRowError        a cluster's version row cannot be parsed;
    │                            malformed member rows are skipped and reported instead
    ├── BackendNotInstalledError the backend's driver is not installed (names the extra)
    ├── AccessDeniedError        the store refused the credentials or the operation
    │                            (a missing schema the role may not create names
    │                            ``silo table init URI`` as the fix)
    ├── TableUnavailableError    the store cannot be reached or failed; ``__cause__`` is
    │                            the driver's own exception
    ├── ReadOnlyTableError       a write on a handle opened with ``read_only=True`` (refused
    │                            by the handle, or by the database: nothing was written)
    ├── LostRaceError            membership_tables.sql.transactions: a conditional write's
    │                            precondition failed; caught inside (the write returns False)
    ├── MalformedHistoryError    membership_tables.history: a history line cannot be parsed
    │                            (also a ValueError)
    └── ConformanceError         membership_tables.testing.checks: a backend broke the
                                 contract (also an AssertionError)

No message carries a secret: every error passes its text through
``membership_tables.redaction.redact`` (URI passwords, tokens and credentials the backends
registered become ``***``).

Losing an optimistic-concurrency race is *not* an error: writes return ``False``.
The "invalid value" errors also derive from ``ValueError`` (``InvalidClusterIdError``
from ``TypeError`` too when the type is wrong) so callers that validate input
generically still catch them.
"""

from __future__ import annotations

from membership_tables.redaction import redact


class MembershipTableError(Exception):
    """Root of every exception raised on purpose by ``membership_tables``.

    Text arguments are redacted on the way in, so neither ``str()`` nor a traceback of any
    error of this package shows a password, token or digest credential.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class InvalidTableUriError(MembershipTableError, ValueError):
    """The table URI has an unknown scheme or cannot be parsed."""


class InvalidClusterIdError(MembershipTableError, ValueError):
    """The cluster id is empty, too long, or has characters a store cannot hold."""


class InvalidEntryError(MembershipTableError, ValueError):
    """A model value (address, entry, version) was built from invalid fields."""


class InvalidUpdateError(MembershipTableError, ValueError):
    """``update_rows`` was called with a batch no store could apply; nothing was sent to the store."""


class MalformedRowError(MembershipTableError):
    """A stored value that a read cannot do without cannot be parsed: a cluster's version row.

    Member rows never raise it from a read: they are skipped and reported in
    ``MembershipTableData.malformed``. The store is left untouched; the message names the
    key and the field so an admin can repair or delete it by hand.
    """


class BackendNotInstalledError(MembershipTableError, ImportError):
    """The driver a backend needs is not installed."""


class AccessDeniedError(MembershipTableError):
    """The store refused the credentials or the operation (a permission error of its driver).

    Silos run with a least-privilege role that can read and write rows but not create the
    schema (docs/security.md); when the schema is missing such a role gets this error, and
    the message names the fix: ``silo table init URI`` run once with an admin's credentials.
    The driver's exception is chained as ``__cause__``.
    """


SCHEMA_MISSING_FIX = (
    "run `silo table init URI` once with credentials that may create it (see docs/security.md), "
    "then start the silos again"
)
"""The sentence every backend's ``AccessDeniedError`` for a missing schema ends with."""


class TableUnavailableError(MembershipTableError):
    """The store could not be reached or failed while serving a request.

    The driver's exception is chained as ``__cause__``. The outcome of a write that
    raised this is unknown: read the table again before deciding what happened.
    """


class ReadOnlyTableError(MembershipTableError):
    """A write was attempted on a handle opened read-only (``open_table(..., read_only=True)``,
    as ``silo status``, ``status --watch`` and ``silo dashboard`` open it): nothing was written.

    Raised by the handle before anything reaches the store, or mapped from the database's own
    refusal (a SQL session opened read-only); then the driver's exception is ``__cause__``.
    """
