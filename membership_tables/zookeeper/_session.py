"""One table handle's kazoo client: connected on first use, the driver boundary (every kazoo
failure becomes a ``MembershipTableError``), waits bounded by ``timeout`` and multi-op outcomes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState

from membership_tables.errors import AccessDeniedError, TableUnavailableError
from membership_tables.zookeeper._settings import DIGEST_ENV, ZooKeeperSettings

_RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.4, "max_delay": 2.0}
"""kazoo reconnects forever with at most 2 s between attempts (its default backs off to an
hour), so a handle kept open across a ZooKeeper restart is usable again soon after it."""
_LOST_RACE = (BadVersionError, NoNodeError, NodeExistsError, NotEmptyError)
"""A transaction failing on these lost a race: its preconditions no longer hold."""
_NOT_THE_CAUSE = (RolledBackError, RuntimeInconsistency)
"""What the other operations of a failed transaction report."""


class ZooKeeperSession:
    """The kazoo client of one handle, shared by its threads."""

    def __init__(self, settings: ZooKeeperSettings, cluster_id: str, cluster_path: str) -> None:
        self.settings = settings
        self.cluster_id = cluster_id
        self.cluster_path = cluster_path
        self._lock = threading.Lock()
        self._client: Any = None
        self._closed = False

    def connected(self) -> Any:
        """The connected kazoo client; fails fast instead of queueing while disconnected.

        The first use starts the client and waits ``connect_timeout`` for it to connect. The
        client is never stopped here (kazoo's ``start`` stops a client that timed out, which
        waits for its connection attempt, up to ``timeout`` more): it keeps connecting in the
        background, and later calls fail at once until it is connected.
        """
        with self._lock:
            if self._closed:
                raise TableUnavailableError("this ZooKeeper table handle is closed; open a new one") from (
                    ConnectionClosedError("handle closed")
                )
            client = self._client
            if client is None:
                digest = self.settings.digest
                client = self._client = KazooClient(
                    hosts=self.settings.hosts,
                    timeout=self.settings.timeout,
                    connection_retry=dict(_RECONNECT),
                    auth_data=digest.auth_data if digest else None,
                    default_acl=digest.acl if digest else None,
                )
                if not client.start_async().wait(self.settings.connect_timeout):
                    raise TableUnavailableError(
                        f"cannot connect to ZooKeeper at {self.settings.hosts} within "
                        f"{self.settings.connect_timeout}s; is it running and reachable? The handle keeps trying"
                    ) from KazooTimeoutError("Connection time-out")
        if client.client_state == KeeperState.AUTH_FAILED:
            raise AccessDeniedError(
                f"ZooKeeper at {self.settings.hosts} refused the credentials of this handle; check them"
            ) from AuthFailedError()
        if not client.connected:
            raise TableUnavailableError(
                f"not connected to ZooKeeper at {self.settings.hosts}; the handle keeps reconnecting in the background"
            ) from ConnectionLoss(f"client state {client.state}")
        return client

    @contextlib.contextmanager
    def driver_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (NoAuthError, AuthFailedError) as exc:
            who = f"user {self.settings.digest.user!r}" if self.settings.digest else "an unauthenticated client"
            raise AccessDeniedError(
                f"ZooKeeper at {self.settings.hosts} refused {action} of {self.cluster_path} to {who} "
                f"({type(exc).__name__}): the znodes' digest ACL grants another identity; use its credentials "
                f"('user:password@' before the hosts, or {DIGEST_ENV})"
            ) from exc
        except (KazooException, KazooTimeoutError) as exc:
            raise TableUnavailableError(
                f"ZooKeeper at {self.settings.hosts} failed during {action} of cluster {self.cluster_id!r}: {exc!r}"
            ) from exc

    def wait(self, pending: Any) -> Any:
        """The result of one asynchronous kazoo request, waiting at most ``timeout``."""
        return pending.get(timeout=self.settings.timeout)

    def commit(self, transaction: Any) -> list[Any] | None:
        """The results of a multi-op that succeeded (stats of its ``set_data``), ``None`` for a lost race."""
        results = self.wait(transaction.commit_async())
        return list(results) if self.outcome(results) else None

    @staticmethod
    def outcome(results: Sequence[object]) -> bool:
        """True if every operation succeeded, False for a lost race; raises any other failure."""
        errors = [result for result in results if isinstance(result, Exception)]
        if not errors:
            return True
        causes = [error for error in errors if not isinstance(error, _NOT_THE_CAUSE)]
        if causes and all(isinstance(cause, _LOST_RACE) for cause in causes):
            return False
        raise (causes or errors)[0]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                client.stop()
            client.close()
