"""The exceptions of the silo runtime.

Every error ``silo`` raises on purpose derives from one root; the table library's errors derive
from ``membership_tables.MembershipTableError`` (``membership_tables/errors.py`` draws that
tree). Defined here unless a module is named::

    SiloError
    ├── OptionsError                    an option is unknown, malformed or inconsistent
    │   │                               (also a ValueError); exit code 2
    │   ├── TlsConfigError              silo.wire.tls: certificates or keys unusable
    │   ├── AdmissionRefusedError       silo.wire.admission: the cluster would not accept this silo
    │   ├── HandlerSpecError            silo.work.registry: a --handler spec cannot be loaded
    │   ├── CertificateError            silo.cli.dev_ca: the development CA cannot issue
│   └── MissingTableError           silo.cli.commands: a SQLite file to read does not exist
    ├── TableAccessDeniedError          the store refused the silo's credentials or a
    │                                   privilege it needs (e.g. the schema is missing and
    │                                   the role may not create it); exit code 2
    ├── JoinError                       the silo could not join; exit code 4
    │   └── TableUnavailableAtStartError the table was unreachable for the whole
    │                                   join attempt; exit code 5
    ├── DeclaredDeadError               the silo found itself Dead or superseded by a newer
    │                                   generation while starting; exit code 3
    ├── BindError                       silo.wire.server: cannot listen (also an OSError)
    ├── MetricsUnavailableError         silo.runtime.metrics: the metrics port cannot be served
    ├── NotDeliveredError               silo.membership.probing: gossip surely not delivered
    │                                   (also a ConnectionError)
    ├── StreamEndedError                silo.wire.call_streams: a stream ended before the answer
    ├── IntermediaryUnreachableError    silo.wire.prober: an indirect probe was not delivered
    ├── MembershipClientError           silo.client.errors: the membership client
    │   ├── ClientConfigError           bad client arguments (also a ValueError)
    │   ├── WrongClusterError           the gateway serves another cluster
    │   ├── MembershipUnavailableError  no gateway and no table answered
    │   └── ClientClosedError           the client was closed
    ├── WorkError                       silo.work.client: the silo refused the batch or its handler failed
    ├── WorkUnavailableError            silo.work.client: the silo cannot take work now
    ├── WorkNotOwnedError               silo.work.client: the silo does not own the keys
    ├── NoLiveSiloError                 silo.work.routing: no live silo to route to
    ├── EmptyRingError                  silo.work.hashring: a ring with no silo
    ├── NotOwnedError                   silo.work.ownership: the server's ownership check
    ├── NoTokenError                    silo.work.fencing: no fencing token outside a handler
    ├── ColumnarUnavailableError        silo.work.columns: pyarrow is not installed
    ├── BadRequestError                 silo.work.execution: a batch cannot be read
    ├── HandlerFailedError              silo.work.execution: the handler raised
    ├── BadResultsError                 silo.work.execution: not one bytes result per item
    ├── LocalClusterError               silo.cli.local_cluster: a local cluster did not start
    └── DemoError                       silo.cli.demo: the demo could not run

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
