"""Talking to the Consul agent: one py-consul client per thread, the driver boundary (every
failure becomes a ``MembershipTableError``) and ``/v1/txn`` transactions.

The transaction goes through py-consul's HTTP client with this module's own response handler:
``consul.Consul.txn.put`` sends no ACL token and reports a rollback as a generic ``ClientError``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import consul
import requests

from membership_tables.consul._keys import KeyTree, KVItem
from membership_tables.consul._settings import ConsulSettings
from membership_tables.errors import AccessDeniedError, TableUnavailableError
from membership_tables.policies import consul_policy

T = TypeVar("T")


def txn_response(response: Any) -> tuple[list[KVItem], list[KVItem]]:
    """py-consul callback for ``/v1/txn``: ``(results, [])`` if committed, ``([], errors)`` if rolled back."""
    if response.code in (200, 409):
        try:
            answer = json.loads(response.body)
            results, errors = list(answer.get("Results") or []), list(answer.get("Errors") or [])
        except (ValueError, AttributeError, TypeError) as exc:
            raise consul.ConsulException(f"unreadable transaction answer: {response.body!r}") from exc
        if response.code == 200:
            return [result["KV"] for result in results if isinstance(result, dict) and "KV" in result], []
        # A rollback caused by ACLs is a configuration problem, not a lost race.
        denied = [error for error in errors if "permission denied" in str(error.get("What", "")).lower()]
        if denied:
            raise consul.ACLPermissionDenied(f"transaction rolled back: {denied}")
        if errors:
            return [], errors
    if response.code == 403:
        raise consul.ACLPermissionDenied(response.body)
    raise consul.ConsulException(f"transaction failed with HTTP {response.code}: {response.body}")


class ConsulAgent:
    """The agent as one cluster's table handle sees it; shared by the handle's threads."""

    def __init__(self, settings: ConsulSettings, cluster_id: str) -> None:
        self.settings = settings
        self._cluster_id = cluster_id
        self._local = threading.local()
        self._clients: list[Any] = []
        self._clients_lock = threading.Lock()

    def _client(self) -> Any:
        """This thread's py-consul client (one requests session per thread, so threads never share one)."""
        client = getattr(self._local, "client", None)
        if client is None:
            settings = self.settings
            client = consul.Consul(
                host=settings.host,
                port=settings.port,
                scheme=settings.scheme,
                token=settings.token,
                connections_timeout=settings.timeout,
            )
            client.token = settings.token  # py-consul lets CONSUL_HTTP_TOKEN override an explicit token
            with self._clients_lock:
                self._clients.append(client)
            self._local.client = client
        return client

    def call(self, what: str, action: Callable[[Any], T]) -> T:
        """Run ``action(client)``; map every driver failure to ``TableUnavailableError``."""
        try:
            return action(self._client())
        except consul.ACLPermissionDenied as exc:
            raise AccessDeniedError(
                f"Consul at {self.settings.address} refused to {what} for cluster {self._cluster_id!r} ({exc}): "
                f"the ACL token ({'none' if self.settings.token is None else 'from CONSUL_HTTP_TOKEN or token='}) "
                f"needs the policy {' '.join(consul_policy(self.settings.prefix).split())} (see docs/consul.md)"
            ) from exc
        except (requests.RequestException, consul.ConsulException) as exc:
            raise TableUnavailableError(
                f"Consul at {self.settings.address} failed to {what} for cluster {self._cluster_id!r}: {exc}"
            ) from exc

    def txn(self, what: str, ops: list[KVItem]) -> list[KVItem]:
        """Run ``ops`` as one transaction: ``[]`` if committed, else why it was rolled back."""
        return self.txn_answer(what, ops)[1]

    def txn_answer(self, what: str, ops: list[KVItem]) -> tuple[list[KVItem], list[KVItem]]:
        """Run ``ops`` as one transaction: ``(results, [])`` if committed, ``([], errors)`` if not.

        ``consistent``: a transaction of reads only is answered by the leader after it confirmed
        its leadership, like a consistent ``GET``.
        """
        body = json.dumps([{"KV": op} for op in ops])
        answer: tuple[list[KVItem], list[KVItem]] = self.call(
            what,
            lambda client: client.http.put(
                txn_response, "/v1/txn", params=[("consistent", "")], data=body, headers=client.prepare_headers()
            ),
        )
        return answer

    def read_tree(self, root: str) -> KeyTree:
        """Every key under ``root``, from one consistent recursive GET (one state-store snapshot)."""
        _, items = self.call(
            "read the table", lambda client: client.kv.get(root, recurse=True, consistency="consistent")
        )
        return KeyTree.of(root, items or ())

    def close(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.http.session.close()
