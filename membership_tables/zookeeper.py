"""ZooKeeper membership table (``zookeeper://[user:password@]host:port[,host:port]/chroot``), through kazoo.

With credentials (in the URI, or ``user:password`` in the ``SILO_ZOOKEEPER_DIGEST``
environment variable when the URI has none) the handle authenticates with ZooKeeper's
``digest`` scheme and creates every znode (the chroot's missing parents too) with an ACL
that grants all permissions to that identity alone: another identity can neither read nor
write the cluster. A denial (``NoAuth``) raises ``AccessDeniedError``.

Layout under the chroot (default ``/silo-membership``)::

    <chroot>/<cluster_id>                          {"version": N}    data version = version etag
    <chroot>/<cluster_id>/<host:port@generation>   the row (codec)   "czxid.version" = row etag
    <chroot>/<cluster_id>/<host:port@generation>/alive   {"i_am_alive_time": ISO}

Why this honours the contract:

* Every canonical write is one multi-op transaction that sets the cluster node at the
  expected data version and creates (insert) or sets (update) the silo node at the
  expected version, so rows and the version move together or not at all.
* Etags are fresh forever, not only for one znode's life. The cluster node is never
  deleted: ``delete_cluster_entries`` removes the rows and turns it into a marker
  (``{"version": null}``, read as "no version row") with one more ``setData``, so its data
  version never restarts and is the version etag as is. A silo node is deleted by cleanup
  and may be created again, restarting its data version, so a row etag pairs the data
  version (what the multi-op checks) with the node's creation zxid (``czxid``, never
  reused): an update first reads the node and refuses an etag of another incarnation.
  A node re-created between that read and the commit got there through an insert, which
  moved the version etag the commit checks.
* Heartbeats write only the ``alive`` child. A child's writes change neither the silo
  node's data version (its etag) nor the cluster node, so tokens read before a
  heartbeat still work; reads report the later of the row's and the alive node's time.
* ZooKeeper has no multi-node read, so reads are *fenced*: read the cluster node, the
  rows, then the cluster node again, and retry if its version moved in between.
  Heartbeats do not touch the cluster node, so they never cause a retry.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

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
from kazoo.security import make_digest_acl

from membership_tables import codec
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import (
    SCHEMA_MISSING_FIX,
    AccessDeniedError,
    InvalidEntryError,
    InvalidTableUriError,
    InvalidUpdateError,
    MalformedRowError,
    TableUnavailableError,
)
from membership_tables.model import (
    MAX_PORT,
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
from membership_tables.redaction import remember_secret

DEFAULT_CHROOT = "/silo-membership"
DEFAULT_PORT = 2181
DIGEST_ENV = "SILO_ZOOKEEPER_DIGEST"
"""``user:password`` for the digest ACLs when the URI carries no credentials."""
ALIVE_NODE = "alive"

_FENCE_ATTEMPTS = 100
"""Fenced reads retried this often while canonical writes keep moving the version."""
_CAS_ATTEMPTS = 20
"""Heartbeat compare-and-set and cluster deletion retries under concurrent writes."""
MAX_MULTI_ROW_BYTES = 512 * 1024
"""The most row data one ``update_rows`` multi-op carries: half of ZooKeeper's default
``jute.maxbuffer`` (1 MiB, the largest request a server accepts), leaving room for paths and
framing. A larger request would make the server drop the connection."""
_RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.4, "max_delay": 2.0}
"""kazoo reconnects forever with at most 2 s between attempts (its default backs off to an
hour), so a handle kept open across a ZooKeeper restart is usable again soon after it."""

_HOST_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]/\s]+))(?::(?P<port>[^:]*))?$")
_BAD_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\s]")
_LOST_RACE = (BadVersionError, NoNodeError, NodeExistsError, NotEmptyError)
"""A transaction failing on these lost a race: its preconditions no longer hold."""
_NOT_THE_CAUSE = (RolledBackError, RuntimeInconsistency)
"""What the other operations of a failed transaction report."""


@dataclass(frozen=True)
class ZooKeeperSettings:
    """Where the table lives and how patient the client is.

    ``timeout`` (seconds, default 10): the ZooKeeper session timeout and the longest one
    request may wait for its answer. ``connect_timeout`` (seconds, default 5): how long
    the first use of a handle waits for a connection before raising
    ``TableUnavailableError`` (the client then keeps connecting in the background); a handle
    does not connect until it is first used.
    """

    hosts: str
    chroot: str = DEFAULT_CHROOT
    timeout: float = 10.0
    connect_timeout: float = 5.0
    digest: DigestCredentials | None = field(default=None, repr=False)
    """Who the handle is, for ZooKeeper's ``digest`` ACLs; ``None``: no authentication, open ACLs."""


@dataclass(frozen=True)
class DigestCredentials:
    """A ZooKeeper ``digest`` identity; the password never shows in a repr."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str) -> DigestCredentials:
        """``user:password`` (from ``source``, named in errors) as credentials."""
        user, _, password = text.partition(":")
        return cls.checked(user, password, source)

    @classmethod
    def checked(cls, user: str, password: str, source: str) -> DigestCredentials:
        """Credentials, once the password is registered for redaction and both parts are valid."""
        remember_secret(password)
        if not user or not password or ":" in user:
            raise InvalidTableUriError(
                f"ZooKeeper credentials in {source} must be 'user:password': both parts non-empty, no ':' in the user"
            )
        return cls(user, password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What kazoo sends to add this identity to the session."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[Any]:
        """Every permission for this identity, none for anyone else."""
        return [make_digest_acl(self.user, self.password, all=True)]


_OPTIONS = ("timeout", "connect_timeout")
_EXAMPLE = "zookeeper://127.0.0.1:2181,10.0.0.2:2181/silo-membership"


def parse_uri(uri: str, options: Mapping[str, object]) -> ZooKeeperSettings:
    """Settings from ``zookeeper://host:port[,host:port...][/chroot][?timeout=S]`` and options.

    Options may come from the query string or from keyword arguments (these win).
    """
    try:
        parts = urlsplit(uri)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse ZooKeeper URI {uri!r} ({exc}); expected e.g. {_EXAMPLE}") from exc
    if parts.fragment:
        raise InvalidTableUriError(f"ZooKeeper URI {uri!r} must not have a '#fragment'; expected e.g. {_EXAMPLE}")
    given: dict[str, object] = dict(query)
    given.update(options)
    unknown = sorted(set(given) - set(_OPTIONS))
    if unknown:
        raise InvalidTableUriError(
            f"unknown ZooKeeper table option(s) {unknown} in {uri!r}; supported: {', '.join(_OPTIONS)} (seconds)"
        )
    timeouts = {name: _positive_seconds(name, value) for name, value in given.items()}
    userinfo, at, netloc = parts.netloc.rpartition("@")
    digest = _parse_digest(userinfo, uri) if at else None
    if digest is None and os.environ.get(DIGEST_ENV):
        digest = DigestCredentials.parse(os.environ[DIGEST_ENV], f"${DIGEST_ENV}")
    return ZooKeeperSettings(
        hosts=_parse_hosts(netloc, uri), chroot=_parse_chroot(parts.path, uri), digest=digest, **timeouts
    )


def _parse_digest(userinfo: str, uri: str) -> DigestCredentials:
    user, colon, password = userinfo.partition(":")
    if not colon:
        raise InvalidTableUriError(
            f"ZooKeeper URI {uri!r} names a user but no password; put 'user:password@' before the hosts "
            f"(percent-encode ':', '@' and '/' in them) or set {DIGEST_ENV}=user:password"
        )
    return DigestCredentials.checked(unquote(user), unquote(password), "the URI")


def _parse_hosts(netloc: str, uri: str) -> str:
    hosts = []
    for item in netloc.split(","):
        match = _HOST_RE.match(item.strip())
        if not item.strip() or match is None:
            raise InvalidTableUriError(
                f"ZooKeeper URI {uri!r} has no valid host in {item!r}; list servers as host:port, e.g. {_EXAMPLE}"
            )
        port_text = match.group("port")
        if port_text is None:
            port = DEFAULT_PORT
        elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) <= MAX_PORT:
            port = int(port_text)
        else:
            raise InvalidTableUriError(f"ZooKeeper URI {uri!r} has a bad port {port_text!r}; use 1..{MAX_PORT}")
        host = f"[{match.group('v6')}]" if match.group("v6") else match.group("host")
        hosts.append(f"{host}:{port}")
    return ",".join(hosts)


def _parse_chroot(path: str, uri: str) -> str:
    if path in ("", "/"):
        return DEFAULT_CHROOT
    components = path.strip("/").split("/")
    if any(c in ("", ".", "..") for c in components) or _BAD_PATH_CHARS.search(path):
        raise InvalidTableUriError(
            f"ZooKeeper URI {uri!r} has an invalid chroot {path!r}: use /name[/name...] without empty, '.' or '..' "
            "parts, spaces or control characters"
        )
    return "/" + "/".join(components)


def _positive_seconds(name: str, value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidTableUriError(f"ZooKeeper option {name} must be a positive number of seconds, got {value!r}")
    return seconds


def node_name(silo_address: SiloAddress) -> str:
    """The silo's child name: ``host:port@generation`` (a ``/`` or ``%`` in a host is escaped)."""
    return quote(str(silo_address), safe=":@[]")


def _version_document(version: int | None) -> bytes:
    """The cluster node's data; ``None`` marks a deleted cluster (no version row)."""
    return json.dumps({"version": version}).encode()


def _alive_document(when: datetime) -> bytes:
    return json.dumps({"i_am_alive_time": codec.format_time(when)}).encode()


def _json_field(data: bytes, field: str, path: str) -> object:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedRowError(f"znode {path} is not valid JSON ({exc}); repair or delete it by hand") from exc
    if not isinstance(document, dict) or field not in document:
        raise MalformedRowError(f"znode {path} must hold a JSON object with {field!r}; repair or delete it by hand")
    return document[field]


def _parse_version(data: bytes, path: str) -> int | None:
    """The version number the cluster node holds, ``None`` for a deleted cluster's marker."""
    version = _json_field(data, "version", path)
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise MalformedRowError(f"znode {path} has a bad version {version!r}; repair or delete it by hand")
    return version


def _parse_alive(data: bytes, path: str) -> datetime:
    try:
        return codec.parse_time(_json_field(data, "i_am_alive_time", path), "i_am_alive_time")
    except InvalidEntryError as exc:
        raise MalformedRowError(f"znode {path} cannot be parsed: {exc}; repair or delete it by hand") from exc


def _znode_version(etag: str) -> int | None:
    """The znode data version a version etag names, or ``None`` if no znode could carry it."""
    return int(etag) if etag.isascii() and etag.isdigit() else None


def _row_etag(stat: Any) -> str:
    """A silo node's etag: its creation zxid and its data version (see the module docstring)."""
    return f"{stat.czxid}.{stat.version}"


def _version_of(version: TableVersion, cluster_stat: Any) -> TableVersion:
    """The version a write set: its number, and the cluster node's data version after it as the etag."""
    return TableVersion(version.version, str(cluster_stat.version))


def _parse_row_etag(etag: str) -> tuple[int, int] | None:
    """``(czxid, data version)`` of a row etag, or ``None`` if no silo node could carry it."""
    czxid, dot, version = etag.partition(".")
    if not dot or (parsed := _znode_version(czxid)) is None or (data_version := _znode_version(version)) is None:
        return None
    return parsed, data_version


@dataclass(frozen=True)
class _StoredRow:
    entry: MembershipEntry
    """With IAmAlive already merged from the alive node."""
    row_version: int
    row_czxid: int
    alive_version: int | None
    stored_alive: datetime
    """The IAmAlive time in the silo node's own document (before the alive node's is merged)."""

    @property
    def etag(self) -> str:
        return f"{self.row_czxid}.{self.row_version}"


@dataclass(frozen=True)
class _Snapshot:
    version: TableVersion
    rows: tuple[_StoredRow, ...]
    malformed: tuple[MalformedRow, ...] = ()

    def data(self) -> MembershipTableData:
        return MembershipTableData(tuple((row.entry, row.etag) for row in self.rows), self.version, self.malformed)


class ZooKeeperMembershipTable(MembershipTable):
    """A cluster's table in ZooKeeper; one kazoo client per handle, shared by its threads."""

    max_rows_per_update = 100
    """One multi-op must fit ``jute.maxbuffer`` (1 MiB by default): 100 rows of up to 5 KiB on
    average (a row is typically well under 1 KiB) stay within ``MAX_MULTI_ROW_BYTES``."""

    def __init__(self, settings: ZooKeeperSettings, cluster_id: str) -> None:
        super().__init__(validate_cluster_id(cluster_id))
        self.settings = settings
        self.cluster_path = f"{settings.chroot}/{cluster_id}"
        self._lock = threading.Lock()
        self._client: Any = None
        self._closed = False
        self._documents: dict[str, tuple[str, tuple[int, int], datetime]] = {}
        """Per silo node, what this handle last read or wrote there: the version etag then, the
        node's ``(czxid, data version)`` and its document's own IAmAlive time (``_replace_rows``)."""

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> ZooKeeperMembershipTable:
        return cls(parse_uri(uri, options), cluster_id)

    def row_path(self, silo_address: SiloAddress) -> str:
        return f"{self.cluster_path}/{node_name(silo_address)}"

    # -- connection and driver boundary -------------------------------------------------

    def _connected(self) -> Any:
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

    def __repr__(self) -> str:
        identity = f", user={self.settings.digest.user!r}" if self.settings.digest else ""
        return f"ZooKeeperMembershipTable({self.settings.hosts!r}, {self.cluster_path!r}{identity})"

    @contextlib.contextmanager
    def _driver_errors(self, action: str) -> Iterator[None]:
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

    def _wait(self, pending: Any) -> Any:
        """The result of one asynchronous kazoo request, waiting at most ``timeout``."""
        return pending.get(timeout=self.settings.timeout)

    def _commit(self, transaction: Any) -> list[Any] | None:
        """The results of a multi-op that succeeded (stats of its ``set_data``), ``None`` for a lost race."""
        results = self._wait(transaction.commit_async())
        return list(results) if self._outcome(results) else None

    @staticmethod
    def _outcome(results: Sequence[object]) -> bool:
        """True if every operation succeeded, False for a lost race; raises any other failure."""
        errors = [result for result in results if isinstance(result, Exception)]
        if not errors:
            return True
        causes = [error for error in errors if not isinstance(error, _NOT_THE_CAUSE)]
        if causes and all(isinstance(cause, _LOST_RACE) for cause in causes):
            return False
        raise (causes or errors)[0]

    # -- reads ---------------------------------------------------------------------------

    def _snapshot(self, names: Sequence[str] | None) -> _Snapshot:
        """The named rows (all if ``None``) and the version, fenced by the cluster node."""
        client = self._connected()
        for attempt in range(_FENCE_ATTEMPTS):
            head = client.get_async(self.cluster_path)
            listing = client.get_children_async(self.cluster_path) if names is None else None
            try:
                data, before = self._wait(head)
            except NoNodeError:
                return _Snapshot(UNINITIALIZED_VERSION, ())
            number = _parse_version(data, self.cluster_path)
            if number is None:  # a deleted cluster's marker: no version row, no rows
                return _Snapshot(UNINITIALIZED_VERSION, ())
            try:
                children = names if names is not None else self._wait(listing)
            except NoNodeError:  # the cluster was deleted after the first read
                continue
            pending = []
            for name in children:
                path = f"{self.cluster_path}/{name}"
                pending.append((path, client.get_async(path), client.get_async(f"{path}/{ALIVE_NODE}")))
            tail = client.exists_async(self.cluster_path)
            read = [row for path, *results in pending if (row := self._row(path, *results)) is not None]
            after = self._wait(tail)
            if after is not None and (after.czxid, after.version) == (before.czxid, before.version):
                self._remember(str(before.version), read, full=names is None)
                return _Snapshot(
                    TableVersion(number, str(before.version)),
                    tuple(row for row in read if isinstance(row, _StoredRow)),
                    tuple(row for row in read if isinstance(row, MalformedRow)),
                )
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise TableUnavailableError(
            f"the version of {self.cluster_path} kept moving during {_FENCE_ATTEMPTS} reads; too many concurrent writes"
        )

    def _remember(self, version_etag: str, read: Sequence[_StoredRow | MalformedRow], *, full: bool) -> None:
        """Note the silo nodes of a read at ``version_etag`` (all of them if ``full``: forget the others)."""
        known = {} if full else dict(self._documents)
        for row in read:
            if isinstance(row, _StoredRow):
                path = self.row_path(row.entry.silo_address)
                known[path] = (version_etag, (row.row_czxid, row.row_version), row.stored_alive)
        self._documents = known

    def _row(self, path: str, row_result: Any, alive_result: Any) -> _StoredRow | MalformedRow | None:
        """The row at ``path`` (``None`` if it is gone), or how it is malformed."""
        try:
            data, stat = self._wait(row_result)
        except NoNodeError:  # removed by a cleanup, which does not move the version
            return None
        try:
            entry = codec.bytes_to_entry(data)
        except InvalidEntryError as exc:
            return MalformedRow(f"znode {path}", str(exc))
        if self.row_path(entry.silo_address) != path:
            return MalformedRow(
                f"znode {path}",
                f"holds the row of {entry.silo_address}, which belongs at {self.row_path(entry.silo_address)}",
            )
        try:
            alive_data, alive_stat = self._wait(alive_result)
        except NoNodeError:
            return _StoredRow(entry, stat.version, stat.czxid, None, entry.i_am_alive_time)
        try:
            alive = max(entry.i_am_alive_time, _parse_alive(alive_data, f"{path}/{ALIVE_NODE}"))
        except MalformedRowError as exc:
            return MalformedRow(f"znode {path}/{ALIVE_NODE}", str(exc))
        return _StoredRow(
            entry.replace(i_am_alive_time=alive), stat.version, stat.czxid, alive_stat.version, entry.i_am_alive_time
        )

    def read_all(self) -> MembershipTableData:
        with self._driver_errors("read_all"):
            return self._snapshot(None).data()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        with self._driver_errors("read_row"):
            return self._snapshot([node_name(silo_address)]).data()

    def read_version(self) -> TableVersion:
        with self._driver_errors("read_version"):
            try:
                data, stat = self._wait(self._connected().get_async(self.cluster_path))
            except NoNodeError:
                return UNINITIALIZED_VERSION
            number = _parse_version(data, self.cluster_path)
            return UNINITIALIZED_VERSION if number is None else TableVersion(number, str(stat.version))

    # -- writes --------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        with self._driver_errors("initialize"):
            client = self._connected()
            if self._wait(client.exists_async(self.settings.chroot)) is None:  # checked first: usually there
                try:
                    self._wait(client.ensure_path_async(self.settings.chroot))
                except NoAuthError as exc:
                    raise AccessDeniedError(
                        f"the chroot {self.settings.chroot} does not exist on ZooKeeper at {self.settings.hosts}, "
                        f"and this identity may not create it; {SCHEMA_MISSING_FIX}"
                    ) from exc
            if not try_init_version:
                return
            for _ in range(_CAS_ATTEMPTS):
                try:
                    self._wait(client.create_async(self.cluster_path, _version_document(0)))
                    return
                except NodeExistsError:
                    pass
                try:
                    data, stat = self._wait(client.get_async(self.cluster_path))
                    if _parse_version(data, self.cluster_path) is not None:
                        return  # initialized already: never touched
                    # A deleted cluster's marker: version 0 again, at a data version never used before.
                    self._wait(client.set_async(self.cluster_path, _version_document(0), version=stat.version))
                    return
                except (NoNodeError, BadVersionError):  # removed by hand, or another initializer won: look again
                    continue
        raise TableUnavailableError(f"{self.cluster_path} kept changing while it was being initialized; try again")

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        expected = _znode_version(version.etag)
        if expected is None:
            return None
        path = self.row_path(entry.silo_address)
        with self._driver_errors("insert_row"):
            transaction = self._connected().transaction()
            transaction.set_data(self.cluster_path, _version_document(version.version), version=expected)
            transaction.create(path, codec.dumps(entry))
            transaction.create(f"{path}/{ALIVE_NODE}", _alive_document(entry.i_am_alive_time))
            results = self._commit(transaction)
        if results is None:
            return None
        # A multi-op commits at one zxid: the new node's czxid is the cluster node's new mzxid
        # (a create in a multi-op returns only the path), and its data version is 0.
        cluster = results[0]
        return CommittedWrite(_version_of(version, cluster), ((entry, f"{cluster.mzxid}.0"),))

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        batch = checked_updates(updates, self.max_rows_per_update)
        size = sum(len(codec.dumps(entry)) for entry, _ in batch)
        if size > MAX_MULTI_ROW_BYTES:
            raise InvalidUpdateError(
                f"update_rows would send {size} bytes of rows in one ZooKeeper multi-op, more than "
                f"{MAX_MULTI_ROW_BYTES} (the server's jute.maxbuffer is 1 MiB by default); split the batch"
            )
        with self._driver_errors("update_rows"):
            return self._replace_rows(batch, version)

    def _replace_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """One multi-op: the cluster node at ``version.etag`` and every row at its etag's data version.

        The etags it returns come from the stats the multi-op returns for each ``set_data``.
        """
        expected_version = _znode_version(version.etag)
        tokens = [_parse_row_etag(etag) for _, etag in updates]
        if expected_version is None or None in tokens:
            return None
        client = self._connected()
        paths = [self.row_path(entry.silo_address) for entry, _ in updates]
        stored = self._stored_alive(client, paths, tokens, version.etag)
        if stored is None:
            return None
        transaction = client.transaction()
        transaction.set_data(self.cluster_path, _version_document(version.version), version=expected_version)
        written = []
        for (entry, _), path, token, alive in zip(updates, paths, tokens, stored, strict=True):
            assert token is not None
            # The multi-op checks the data version, so ``alive`` is that of exactly the row it replaces.
            written.append(entry.replace(i_am_alive_time=max(entry.i_am_alive_time, alive)))
            transaction.set_data(path, codec.dumps(written[-1]), version=token[1])
        results = self._commit(transaction)
        if results is None:
            return None
        committed = CommittedWrite(
            _version_of(version, results[0]),
            tuple((entry, _row_etag(stat)) for (entry, _), stat in zip(updates, results[1:], strict=True)),
        )
        known = dict(self._documents)
        for path, document, stat in zip(paths, written, results[1:], strict=True):
            known[path] = (committed.version.etag, (stat.czxid, stat.version), document.i_am_alive_time)
        self._documents = known
        return committed

    def _stored_alive(
        self, client: Any, paths: Sequence[str], tokens: Sequence[tuple[int, int] | None], version_etag: str
    ) -> list[datetime] | None:
        """The IAmAlive time in the document of each silo node at its token, ``None`` if one is not there.

        Known without a read if this handle read or wrote every one of them at ``version_etag``
        (``_documents``): a multi-op that checks that version then proves that no insert re-created
        a node since, so the data version it checks names the incarnation of the token. Else the
        nodes are read (pipelined: one round trip more) and their incarnations checked.
        """
        known = [self._documents.get(path) for path in paths]
        if all(
            pair is not None and pair[:2] == (version_etag, token) for pair, token in zip(known, tokens, strict=True)
        ):
            return [pair[2] for pair in known if pair is not None]
        pending = [client.get_async(path) for path in paths]  # pipelined: one round trip for every row
        times = []
        for path, token, result in zip(paths, tokens, pending, strict=True):
            assert token is not None
            stored = self._stored_row(client, path, token, result)
            if stored is None:
                return None
            times.append(stored.i_am_alive_time)
        return times

    def _stored_row(self, client: Any, path: str, token: tuple[int, int], pending: Any) -> MembershipEntry | None:
        """The row at ``path`` if it is the incarnation and data version ``token`` names, else ``None``.

        This server may lag behind the one a token came from (ZooKeeper reads are not
        linearizable across sessions): a node older than the token, or none, is read again
        after a ``sync``, so a current token is never refused because of a lagging follower.
        """
        for attempt in range(2):
            try:
                data, stat = self._wait(pending)
                seen = (stat.czxid, stat.version)
            except NoNodeError:
                seen = None
            if seen == token:
                return codec.loads(data, path)
            if attempt or (seen is not None and seen > token):
                return None
            self._wait(client.sync_async(path))
            pending = client.get_async(path)
        return None

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        when = ensure_utc(when, "IAmAlive time")
        path = f"{self.row_path(silo_address)}/{ALIVE_NODE}"
        with self._driver_errors("update_i_am_alive"):
            client = self._connected()
            for _ in range(_CAS_ATTEMPTS):
                if self._compare_and_set_alive(client, path, when):
                    return
        raise TableUnavailableError(f"heartbeat of {silo_address} lost {_CAS_ATTEMPTS} races in a row at {path}")

    def _compare_and_set_alive(self, client: Any, path: str, when: datetime) -> bool:
        """One attempt to move the alive node forward to ``when``; False means retry."""
        try:
            data, stat = self._wait(client.get_async(path))
        except NoNodeError:
            try:  # the row exists without an alive node (written by hand): add one
                self._wait(client.create_async(path, _alive_document(when)))
            except NoNodeError:  # no row: a heartbeat never creates one
                return True
            except NodeExistsError:
                return False
            return True
        try:
            if _parse_alive(data, path) >= when:
                return True
        except MalformedRowError:
            pass  # a malformed heartbeat (written by hand): the silo's own heartbeat replaces it
        try:
            self._wait(client.set_async(path, _alive_document(when), version=stat.version))
        except NoNodeError:
            return True
        except BadVersionError:
            return False
        return True

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        with self._driver_errors("cleanup_defunct_entries"):
            client = self._connected()
            pending = []
            for row in self._snapshot(None).rows:
                if row.entry.status is SiloStatus.DEAD and row.entry.last_activity < before:
                    # Checking both versions keeps a concurrent update or heartbeat from being lost.
                    path = self.row_path(row.entry.silo_address)
                    transaction = client.transaction()
                    if row.alive_version is not None:
                        transaction.delete(f"{path}/{ALIVE_NODE}", version=row.alive_version)
                    transaction.delete(path, version=row.row_version)
                    pending.append(transaction.commit_async())
            return sum(self._outcome(self._wait(result)) for result in pending)

    def delete_cluster_entries(self) -> None:
        with self._driver_errors("delete_cluster_entries"):
            client = self._connected()
            for _ in range(_CAS_ATTEMPTS):
                try:
                    data, stat = self._wait(client.get_async(self.cluster_path))
                except NoNodeError:
                    return
                try:
                    descendants = self._descendants(client, self.cluster_path)
                    if _parse_version(data, self.cluster_path) is None and not descendants:
                        return
                    # One transaction, deepest first: readers never see a half-deleted cluster. The
                    # cluster node stays as a marker so its data version (the version etag) never restarts.
                    transaction = client.transaction()
                    for path in descendants:
                        transaction.delete(path)
                    transaction.set_data(self.cluster_path, _version_document(None), version=stat.version)
                    if self._commit(transaction) is not None:
                        return
                except NoNodeError:  # a row removed by a concurrent cleanup: look again
                    continue
        raise TableUnavailableError(f"{self.cluster_path} kept changing while it was being deleted; try again")

    def _descendants(self, client: Any, path: str) -> list[str]:
        """Every node below ``path``, children after their own children."""
        found = []
        for child in self._wait(client.get_children_async(path)):
            child_path = f"{path}/{child}"
            found.extend(self._descendants(client, child_path))
            found.append(child_path)
        return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                client.stop()
            client.close()
