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

The transaction goes through py-consul's HTTP client with this module's own response handler:
``consul.Consul.txn.put`` sends no ACL token and reports a rollback as a generic ``ClientError``.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import consul
import requests

from membership_tables import codec
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import (
    AccessDeniedError,
    InvalidEntryError,
    InvalidTableUriError,
    InvalidUpdateError,
    MalformedRowError,
    TableUnavailableError,
)
from membership_tables.model import (
    CommittedWrite,
    MalformedRow,
    MembershipEntry,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableVersion,
    ensure_utc,
    validate_cluster_id,
)
from membership_tables.policies import consul_policy
from membership_tables.redaction import remember_secret

DEFAULT_PREFIX = "silo-membership"
DEFAULT_PORT = 8500
DEFAULT_TIMEOUT = 5.0
"""Seconds each request waits for the agent to connect, and then between any two bytes of its
answer (the HTTP timeout of every call); then ``TableUnavailableError``."""

MAX_TXN_OPS = 64
"""Consul's limit on the operations of one ``/v1/txn`` request."""
MAX_TXN_BYTES = 512 * 1024
"""Consul's default limit on the body of one ``/v1/txn`` request (``txn_max_req_len``)."""

HEARTBEAT_ATTEMPTS = 32
"""A heartbeat retries only while concurrent heartbeats of the same silo keep winning its ``cas``."""

_URI_HELP = "expected 'consul://host:port/key/prefix', e.g. consul://127.0.0.1:8500/silo-membership"

T = TypeVar("T")
KVItem = dict[str, Any]


@dataclass(frozen=True)
class ConsulSettings:
    """Where the agent is and how to talk to it, parsed from the URI and the options."""

    host: str
    port: int
    prefix: str
    scheme: str = "http"
    timeout: float = DEFAULT_TIMEOUT
    token: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def parse_consul_uri(uri: str, options: Mapping[str, Any]) -> ConsulSettings:
    """Parse ``consul://host[:port][/key/prefix][?scheme=https&timeout=5]`` plus keyword options.

    Keyword options win over query parameters. The ACL token comes from the ``token`` option or
    the ``CONSUL_HTTP_TOKEN`` environment variable, never from the URI.
    """
    try:
        parts = urlsplit(uri)
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse Consul URI {uri!r} ({exc}); {_URI_HELP}") from exc
    if parts.scheme.lower() != "consul" or not parts.hostname:
        raise InvalidTableUriError(f"Consul URI {uri!r} names no host; {_URI_HELP}")
    if parts.username is not None or parts.password is not None:
        raise InvalidTableUriError(
            f"Consul URI {uri!r} carries credentials; pass the ACL token in CONSUL_HTTP_TOKEN or token=..."
        )
    if parts.fragment:
        raise InvalidTableUriError(f"Consul URI {uri!r} has a fragment (#...); {_URI_HELP}")
    prefix = parts.path.strip("/") or DEFAULT_PREFIX
    if any(segment in ("", ".", "..") for segment in prefix.split("/")):
        raise InvalidTableUriError(
            f"Consul key prefix {prefix!r} in {uri!r} has an empty, '.' or '..' segment; "
            "use e.g. consul://127.0.0.1:8500/team/silo-membership"
        )
    settings: dict[str, Any] = {**dict(parse_qsl(parts.query, keep_blank_values=True)), **options}
    unknown = sorted(set(settings) - {"scheme", "timeout", "token"})
    if unknown:
        raise InvalidTableUriError(f"unknown Consul table options {unknown}; supported: scheme, timeout, token")
    scheme = settings.get("scheme", "http")
    if scheme not in ("http", "https"):
        raise InvalidTableUriError(f"Consul option scheme must be 'http' or 'https', got {scheme!r}")
    try:
        timeout = float(settings.get("timeout", DEFAULT_TIMEOUT))
    except (TypeError, ValueError) as exc:
        raise InvalidTableUriError(f"Consul option timeout must be seconds > 0, got {settings['timeout']!r}") from exc
    if not timeout > 0:
        raise InvalidTableUriError(f"Consul option timeout must be seconds > 0, got {settings['timeout']!r}")
    token = settings.get("token") or os.environ.get("CONSUL_HTTP_TOKEN") or None
    if token is not None and not isinstance(token, str):
        raise InvalidTableUriError(f"Consul option token must be a str, got {type(token).__name__}")
    remember_secret(token)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return ConsulSettings(host, port, prefix, scheme, timeout, token)


@dataclass(frozen=True)
class ConsulLayout:
    """The keys of one cluster; every key of the cluster starts with ``root`` (which ends in '/')."""

    root: str

    @property
    def version(self) -> str:
        return f"{self.root}version"

    def member(self, silo: SiloAddress | str) -> str:
        return f"{self.root}members/{silo}"

    def alive(self, silo: SiloAddress | str) -> str:
        return f"{self.root}alive/{silo}"


@dataclass
class _Tree:
    """One recursive read of a cluster, split by kind; ``members``/``alive`` keyed by address text."""

    version: KVItem | None = None
    members: dict[str, KVItem] = field(default_factory=dict)
    alive: dict[str, KVItem] = field(default_factory=dict)


def _op(verb: str, key: str, value: bytes | None = None, index: int = 0, flags: int = 0) -> KVItem:
    """One KV operation of ``/v1/txn`` (values travel base64-encoded)."""
    op: KVItem = {"Verb": verb, "Key": key, "Index": index, "Flags": flags}
    if value is not None:
        op["Value"] = base64.b64encode(value).decode("ascii")
    return op


def _modify_index(etag: str) -> int | None:
    """The ModifyIndex an etag stands for; ``None`` if no key can have it (so the write just loses).

    Index 0 is refused too: to Consul ``cas`` at 0 means "create", which would let a stale or empty
    token create a version key or resurrect a removed row.
    """
    if not (isinstance(etag, str) and etag.isascii() and etag.isdigit()):
        return None
    return int(etag) or None


def _silos(updates: Sequence[RowUpdate]) -> str:
    return ", ".join(str(entry.silo_address) for entry, _ in updates)


def _version_value(number: int) -> bytes:
    return json.dumps({"version": number}).encode()


def _txn_answer(response: Any) -> tuple[list[KVItem], list[KVItem]]:
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


class ConsulMembershipTable(MembershipTable):
    """A cluster's membership table in Consul's KV store; see the module docstring for the layout."""

    max_rows_per_update = MAX_TXN_OPS - 1
    """``update_rows`` is one transaction of a ``cas`` per row plus one of the version key (the
    ``get`` reads before it are a transaction of their own, one per row)."""

    def __init__(self, settings: ConsulSettings, cluster_id: str) -> None:
        super().__init__(validate_cluster_id(cluster_id))
        self.settings = settings
        self.layout = ConsulLayout(f"{settings.prefix}/{cluster_id}/")
        self._local = threading.local()
        self._clients: list[Any] = []
        self._clients_lock = threading.Lock()
        self._documents: dict[str, tuple[int, datetime]] = {}
        """Per member key, the ModifyIndex of the document this handle last read or wrote there
        and that document's own IAmAlive time (``_replace_rows``). A ModifyIndex names one
        document forever, so the pair never goes stale; it is only replaced by a newer one."""

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> ConsulMembershipTable:
        return cls(parse_consul_uri(uri, options), cluster_id)

    def __repr__(self) -> str:
        return f"ConsulMembershipTable({self.settings.address}/{self.layout.root!r})"

    # --- talking to Consul -------------------------------------------------------------------

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

    def _call(self, what: str, action: Callable[[Any], T]) -> T:
        """Run ``action(client)``; map every driver failure to ``TableUnavailableError``."""
        try:
            return action(self._client())
        except consul.ACLPermissionDenied as exc:
            raise AccessDeniedError(
                f"Consul at {self.settings.address} refused to {what} for cluster {self.cluster_id!r} ({exc}): "
                f"the ACL token ({'none' if self.settings.token is None else 'from CONSUL_HTTP_TOKEN or token='}) "
                f"needs the policy {' '.join(consul_policy(self.settings.prefix).split())} (see docs/consul.md)"
            ) from exc
        except (requests.RequestException, consul.ConsulException) as exc:
            raise TableUnavailableError(
                f"Consul at {self.settings.address} failed to {what} for cluster {self.cluster_id!r}: {exc}"
            ) from exc

    def _txn(self, what: str, ops: list[KVItem]) -> list[KVItem]:
        """Run ``ops`` as one transaction: ``[]`` if committed, else why it was rolled back."""
        return self._txn_answer(what, ops)[1]

    def _txn_answer(self, what: str, ops: list[KVItem]) -> tuple[list[KVItem], list[KVItem]]:
        """Run ``ops`` as one transaction: ``(results, [])`` if committed, ``([], errors)`` if not.

        ``consistent``: a transaction of reads only is answered by the leader after it confirmed
        its leadership, like a consistent ``GET``.
        """
        body = json.dumps([{"KV": op} for op in ops])
        answer: tuple[list[KVItem], list[KVItem]] = self._call(
            what,
            lambda client: client.http.put(
                _txn_answer, "/v1/txn", params=[("consistent", "")], data=body, headers=client.prepare_headers()
            ),
        )
        return answer

    def _read_tree(self) -> _Tree:
        _, items = self._call(
            "read the table", lambda client: client.kv.get(self.layout.root, recurse=True, consistency="consistent")
        )
        tree = _Tree()
        for item in items or ():
            name = item["Key"][len(self.layout.root) :]
            kind, _, silo = name.partition("/")
            if name == "version":
                tree.version = item
            elif kind in ("members", "alive") and silo:
                getattr(tree, kind)[silo] = item
        return tree

    # --- decoding ------------------------------------------------------------------------------

    @staticmethod
    def _version(item: KVItem | None) -> TableVersion:
        if item is None:
            return UNINITIALIZED_VERSION
        try:
            number = json.loads(item["Value"] or b"")["version"]
            return TableVersion(number, str(item["ModifyIndex"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise MalformedRowError(
                f'Consul key {item["Key"]!r} must hold {{"version": N}} with N >= 0, got {item["Value"]!r} ({exc}). '
                "Repair or delete it by hand; nothing was changed"
            ) from exc

    @staticmethod
    def _alive_time(item: KVItem) -> datetime:
        try:
            return codec.parse_time((item["Value"] or b"").decode(), "IAmAlive time")
        except (InvalidEntryError, UnicodeDecodeError) as exc:
            raise MalformedRowError(
                f"Consul key {item['Key']!r} must hold an ISO-8601 time, got {item['Value']!r} ({exc}). "
                "Repair or delete it by hand; nothing was changed"
            ) from exc

    def _heartbeat_is_newer(self, beat: KVItem, when: datetime) -> bool:
        """True if ``beat`` holds a time at or after ``when``; a malformed one is overwritten by the next beat."""
        try:
            return self._alive_time(beat) >= when
        except MalformedRowError:
            return False

    def _row(self, tree: _Tree, silo: str) -> tuple[MembershipEntry, str] | MalformedRow:
        """The row stored for ``silo`` with its heartbeat merged in, and its etag; or how it is malformed."""
        item = tree.members[silo]
        key = f"Consul key {item['Key']!r}"
        try:
            entry = codec.bytes_to_entry(item["Value"] or b"")
        except InvalidEntryError as exc:
            return MalformedRow(key, str(exc))
        if str(entry.silo_address) != silo:
            return MalformedRow(key, f"holds the row of silo {entry.silo_address}, not of {silo}")
        self._documents[item["Key"]] = (item["ModifyIndex"], entry.i_am_alive_time)
        beat = tree.alive.get(silo)
        if beat is not None:
            try:
                alive = self._alive_time(beat)
            except MalformedRowError as exc:
                return MalformedRow(f"Consul key {beat['Key']!r}", str(exc))
            if alive > entry.i_am_alive_time:
                entry = entry.replace(i_am_alive_time=alive)
        return entry, str(item["ModifyIndex"])

    def _snapshot(self, only: SiloAddress | None = None) -> MembershipTableData:
        tree = self._read_tree()
        if only is None:  # forget the documents of rows removed since (a cleanup's)
            present = {item["Key"] for item in tree.members.values()}
            self._documents = {key: pair for key, pair in self._documents.items() if key in present}
        read = [self._row(tree, silo) for silo in tree.members if only is None or silo == str(only)]
        return MembershipTableData.from_parsed(read, self._version(tree.version))

    # --- the contract --------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        if try_init_version:
            # cas=0 creates only: racing initializers agree, and an existing version is never touched.
            self._call("create the version key", lambda c: c.kv.put(self.layout.version, _version_value(0), cas=0))
        else:
            self._call("reach the agent", lambda c: c.kv.get(self.layout.version))

    def read_all(self) -> MembershipTableData:
        return self._snapshot()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self._snapshot(silo_address)

    def read_version(self) -> TableVersion:
        _, item = self._call(
            "read the version", lambda client: client.kv.get(self.layout.version, consistency="consistent")
        )
        return self._version(item)

    def _committed(
        self, what: str, ops: list[KVItem], version: TableVersion, rows: list[MembershipEntry]
    ) -> CommittedWrite | None:
        """Run the write ``ops``: ``None`` if rolled back, else the ModifyIndex of each key as its etag.

        Consul answers a committed transaction with one result per ``set`` and ``cas``, each the
        key's metadata after the write (its ``ModifyIndex`` is the transaction's raft index).
        """
        results, errors = self._txn_answer(what, ops)
        if errors:
            return None
        written = {item.get("Key"): item.get("ModifyIndex") for item in results}

        def etag(key: str) -> str:
            index = written.get(key)
            if isinstance(index, bool) or not isinstance(index, int):
                raise TableUnavailableError(
                    f"Consul at {self.settings.address} committed the transaction to {what} but its answer "
                    f"holds no ModifyIndex of {key!r}; read the table to learn the etags"
                ) from consul.ConsulException(f"transaction results: {results!r}")
            return str(index)

        return CommittedWrite(
            TableVersion(version.version, etag(self.layout.version)),
            tuple((entry, etag(self.layout.member(entry.silo_address))) for entry in rows),
        )

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        based_on = _modify_index(version.etag)
        if based_on is None:
            return None
        silo = entry.silo_address
        ops = [
            _op("cas", self.layout.version, _version_value(version.version), based_on, flags=based_on),
            _op("cas", self.layout.member(silo), codec.dumps(entry), 0, flags=based_on),
            _op("set", self.layout.alive(silo), codec.format_time(entry.i_am_alive_time).encode()),
        ]
        return self._committed(f"insert row {silo}", ops, version, [entry])

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        batch = checked_updates(updates, self.max_rows_per_update)
        ops = [{"KV": _op("cas", self.layout.member(entry.silo_address), codec.dumps(entry))} for entry, _ in batch]
        size = len(json.dumps(ops))  # the write transaction's body, but for the version key's few bytes
        if size > MAX_TXN_BYTES:
            raise InvalidUpdateError(
                f"update_rows would send a {size}-byte Consul transaction, more than {MAX_TXN_BYTES} (the agent's "
                "default txn_max_req_len); split the batch"
            )
        return self._replace_rows(batch, version)

    def _replace_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """One transaction: ``cas`` of the version key and of every member key at its etag.

        Each new document keeps the later of the stored and the given IAmAlive time: the ``cas``
        at the etag's ModifyIndex proves which document it replaces, so that document's time is
        known without a read when this handle read or wrote it (``_documents``: a vote after a
        read, a write after a write); otherwise the documents are read first (one read-only
        transaction, a round trip more). The ``alive/`` keys are left alone: reads merge them,
        so a newer heartbeat is kept too.
        """
        based_on = _modify_index(version.etag)
        parsed = [_modify_index(etag) for _, etag in updates]
        indexes = [index for index in parsed if index is not None]
        if based_on is None or len(indexes) != len(parsed):
            return None
        members = [self.layout.member(entry.silo_address) for entry, _ in updates]
        stored = self._stored_alive(members, indexes, updates)
        if stored is None:
            return None
        ops = [_op("cas", self.layout.version, _version_value(version.version), based_on, flags=based_on)]
        written = []
        for (entry, _), key, index, current in zip(updates, members, indexes, stored, strict=True):
            written.append(entry.replace(i_am_alive_time=max(entry.i_am_alive_time, current)))
            ops.append(_op("cas", key, codec.dumps(written[-1]), index, flags=based_on))
        committed = self._committed(f"update rows {_silos(updates)}", ops, version, [entry for entry, _ in updates])
        if committed is not None:
            for key, document, (_, etag) in zip(members, written, committed.rows, strict=True):
                self._documents[key] = (int(etag), document.i_am_alive_time)
        return committed

    def _stored_alive(
        self, members: Sequence[str], indexes: Sequence[int], updates: Sequence[RowUpdate]
    ) -> list[datetime] | None:
        """The IAmAlive time of the document at each member key and ModifyIndex, or ``None`` if one is
        gone or was replaced (a lost race): from ``_documents`` if all are known, else read."""
        known = [self._documents.get(key) for key in members]
        if all(pair is not None and pair[0] == index for pair, index in zip(known, indexes, strict=True)):
            return [pair[1] for pair in known if pair is not None]
        stored, errors = self._txn_answer(f"read rows {_silos(updates)}", [_op("get", key) for key in members])
        if errors:  # "get" of a missing key rolls back: a row is gone
            return None
        by_key = {item["Key"]: item for item in stored}
        times = []
        for key, index in zip(members, indexes, strict=True):
            item = by_key.get(key)
            if item is None or item["ModifyIndex"] != index:
                return None
            times.append(codec.loads(base64.b64decode(item["Value"] or ""), f"at Consul key {key!r}").i_am_alive_time)
        return times

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        when = ensure_utc(when, "IAmAlive time")
        member, alive = self.layout.member(silo_address), self.layout.alive(silo_address)
        for _ in range(HEARTBEAT_ATTEMPTS):
            _, beat = self._call("read a heartbeat", lambda c: c.kv.get(alive, consistency="consistent"))
            if beat is not None and self._heartbeat_is_newer(beat, when):
                return
            # "get" fails the transaction if the row is absent: a heartbeat never creates a row.
            ops = [
                _op("get", member),
                _op("cas", alive, codec.format_time(when).encode(), beat["ModifyIndex"] if beat else 0),
            ]
            errors = self._txn(f"write the heartbeat of {silo_address}", ops)
            if not errors or any(error.get("OpIndex") == 0 for error in errors):
                return

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        tree = self._read_tree()
        rows = {silo: self._row(tree, silo) for silo in tree.members}  # parse all before deleting any
        removed = 0
        for silo, row in rows.items():
            if isinstance(row, MalformedRow):
                continue  # its age is unknown: keep it
            entry, etag = row
            if entry.status is not SiloStatus.DEAD or entry.last_activity >= before:
                continue
            member, alive, beat = self.layout.member(silo), self.layout.alive(silo), tree.alive.get(silo)
            # check-index first: delete-cas of a key that is already gone succeeds, which would
            # count a row that a concurrent cleanup removed.
            ops = [
                _op("check-index", member, index=int(etag)),
                _op("delete-cas", member, index=int(etag)),
                _op("delete-cas", alive, index=beat["ModifyIndex"]) if beat else _op("check-not-exists", alive),
            ]
            if not self._txn(f"remove defunct row {silo}", ops):
                removed += 1
        return removed

    def delete_cluster_entries(self) -> None:
        self._call("delete the cluster", lambda c: c.kv.delete(self.layout.root, recurse=True))

    def close(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.http.session.close()
