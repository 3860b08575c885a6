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
    └── TableUnavailableError    the store cannot be reached or failed; ``__cause__`` is
                                 the driver's own exception

Losing an optimistic-concurrency race is *not* an error: writes return ``False``.
The "invalid value" errors also derive from ``ValueError`` (``InvalidClusterIdError``
from ``TypeError`` too when the type is wrong) so callers that validate input
generically still catch them.
"""

from __future__ import annotations


class MembershipTableError(Exception):
    """Root of every exception raised on purpose by ``membership_tables``."""


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


class TableUnavailableError(MembershipTableError):
    """The store could not be reached or failed while serving a request.

    The driver's exception is chained as ``__cause__``. The outcome of a write that
    raised this is unknown: read the table again before deciding what happened.
    """
