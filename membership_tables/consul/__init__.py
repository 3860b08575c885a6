"""Consul KV membership table (``consul://host:port/key/prefix``), through py-consul.

Layout under ``<prefix>/<cluster_id>/`` (the trailing ``/`` keeps cluster ``c1`` away from ``c10``)::

    version                   {"version": N}; its ModifyIndex is the version etag
    members/<host:port@gen>   the row as JSON (membership_tables.codec); its ModifyIndex is the row etag
    alive/<host:port@gen>     the latest heartbeat (ISO-8601 UTC); heartbeats write only this key

* Reads are one consistent recursive GET of the cluster's tree. Consul answers it from a single
  state-store snapshot, so version, rows and heartbeats always agree (no torn read). A row's
  IAmAlive time is the later of its document's and its ``alive/`` key's.
* Canonical writes are one transaction (``PUT /v1/txn``) of check-and-set operations: ``cas`` of
  the version key at its ModifyIndex plus ``cas`` of the row (index 0 = create only). A rolled-back
  transaction (HTTP 409) is a lost race and returns ``False``.
* Consul keeps the ModifyIndex of a write that changes nothing, so each canonical write stores
  the version index it was based on in the keys' ``Flags``: every write is then a change and every
  etag is fresh.
* Heartbeats never touch ``members/``: the row etag survives them.

The package: ``_settings`` parses the URI, ``_keys`` is the key layout and what the keys hold,
``_agent`` talks to Consul (one client per thread, ``/v1/txn``), ``_table`` is the contract.
"""

from membership_tables.consul._keys import ConsulLayout
from membership_tables.consul._settings import (
    DEFAULT_PORT,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    ConsulSettings,
    parse_consul_uri,
)
from membership_tables.consul._table import HEARTBEAT_ATTEMPTS, MAX_TXN_BYTES, MAX_TXN_OPS, ConsulMembershipTable

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "HEARTBEAT_ATTEMPTS",
    "MAX_TXN_BYTES",
    "MAX_TXN_OPS",
    "ConsulLayout",
    "ConsulMembershipTable",
    "ConsulSettings",
    "parse_consul_uri",
]
