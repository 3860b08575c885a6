"""``ZooKeeperMembershipTable``: the membership contract on ZooKeeper (see the package docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from membership_tables import codec
from membership_tables.contract import UNINITIALIZED_VERSION, MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import (
    SCHEMA_MISSING_FIX,
    AccessDeniedError,
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
from membership_tables.zookeeper._reads import fenced_snapshot
from membership_tables.zookeeper._session import ZooKeeperSession
from membership_tables.zookeeper._settings import ZooKeeperSettings, parse_uri
from membership_tables.zookeeper._znodes import (
    ALIVE_NODE,
    Snapshot,
    StoredRow,
    alive_document,
    node_name,
    parse_alive,
    parse_row_etag,
    parse_version,
    row_etag,
    silo_node_path,
    version_document,
    version_of,
    znode_version,
)

_CAS_ATTEMPTS = 20
"""Heartbeat compare-and-set and cluster deletion retries under concurrent writes."""
MAX_MULTI_ROW_BYTES = 512 * 1024
"""The most row data one ``update_rows`` multi-op carries: half of ZooKeeper's default
``jute.maxbuffer`` (1 MiB, the largest request a server accepts), leaving room for paths and
framing. A larger request would make the server drop the connection."""


class ZooKeeperMembershipTable(MembershipTable):
    """A cluster's table in ZooKeeper; one kazoo client per handle, shared by its threads."""

    max_rows_per_update = 100
    """One multi-op must fit ``jute.maxbuffer`` (1 MiB by default): 100 rows of up to 5 KiB on
    average (a row is typically well under 1 KiB) stay within ``MAX_MULTI_ROW_BYTES``."""

    def __init__(self, settings: ZooKeeperSettings, cluster_id: str) -> None:
        super().__init__(validate_cluster_id(cluster_id))
        self.settings = settings
        self.cluster_path = f"{settings.chroot}/{cluster_id}"
        self._session = ZooKeeperSession(settings, cluster_id, self.cluster_path)
        self._documents: dict[str, tuple[str, tuple[int, int], datetime]] = {}
        """Per silo node, what this handle last read or wrote there: the version etag then, the
        node's ``(czxid, data version)`` and its document's own IAmAlive time (``_replace_rows``)."""

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> ZooKeeperMembershipTable:
        return cls(parse_uri(uri, options), cluster_id)

    def row_path(self, silo_address: SiloAddress) -> str:
        return silo_node_path(self.cluster_path, silo_address)

    def __repr__(self) -> str:
        identity = f", user={self.settings.digest.user!r}" if self.settings.digest else ""
        return f"ZooKeeperMembershipTable({self.settings.hosts!r}, {self.cluster_path!r}{identity})"

    # -- reads ---------------------------------------------------------------------------

    def _snapshot(self, names: Sequence[str] | None) -> Snapshot:
        """The named rows (all if ``None``) and the version, fenced by the cluster node (``_reads``)."""
        full = names is None
        return fenced_snapshot(self._session, names, lambda etag, read: self._remember(etag, read, full=full))

    def _remember(self, version_etag: str, read: Sequence[StoredRow | MalformedRow], *, full: bool) -> None:
        """Note the silo nodes of a read at ``version_etag`` (all of them if ``full``: forget the others)."""
        known = {} if full else dict(self._documents)
        for row in read:
            if isinstance(row, StoredRow):
                path = self.row_path(row.entry.silo_address)
                known[path] = (version_etag, (row.row_czxid, row.row_version), row.stored_alive)
        self._documents = known

    def read_all(self) -> MembershipTableData:
        with self._session.driver_errors("read_all"):
            return self._snapshot(None).data()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        with self._session.driver_errors("read_row"):
            return self._snapshot([node_name(silo_address)]).data()

    def read_version(self) -> TableVersion:
        with self._session.driver_errors("read_version"):
            try:
                data, stat = self._session.wait(self._session.connected().get_async(self.cluster_path))
            except NoNodeError:
                return UNINITIALIZED_VERSION
            number = parse_version(data, self.cluster_path)
            return UNINITIALIZED_VERSION if number is None else TableVersion(number, str(stat.version))

    # -- writes --------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        with self._session.driver_errors("initialize"):
            client = self._session.connected()
            if self._session.wait(client.exists_async(self.settings.chroot)) is None:  # checked first: usually there
                try:
                    self._session.wait(client.ensure_path_async(self.settings.chroot))
                except NoAuthError as exc:
                    raise AccessDeniedError(
                        f"the chroot {self.settings.chroot} does not exist on ZooKeeper at {self.settings.hosts}, "
                        f"and this identity may not create it; {SCHEMA_MISSING_FIX}"
                    ) from exc
            if not try_init_version:
                return
            for _ in range(_CAS_ATTEMPTS):
                try:
                    self._session.wait(client.create_async(self.cluster_path, version_document(0)))
                    return
                except NodeExistsError:
                    pass
                try:
                    data, stat = self._session.wait(client.get_async(self.cluster_path))
                    if parse_version(data, self.cluster_path) is not None:
                        return  # initialized already: never touched
                    # A deleted cluster's marker: version 0 again, at a data version never used before.
                    self._session.wait(client.set_async(self.cluster_path, version_document(0), version=stat.version))
                    return
                except (NoNodeError, BadVersionError):  # removed by hand, or another initializer won: look again
                    continue
        raise TableUnavailableError(f"{self.cluster_path} kept changing while it was being initialized; try again")

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        expected = znode_version(version.etag)
        if expected is None:
            return None
        path = self.row_path(entry.silo_address)
        with self._session.driver_errors("insert_row"):
            transaction = self._session.connected().transaction()
            transaction.set_data(self.cluster_path, version_document(version.version), version=expected)
            transaction.create(path, codec.dumps(entry))
            transaction.create(f"{path}/{ALIVE_NODE}", alive_document(entry.i_am_alive_time))
            results = self._session.commit(transaction)
        if results is None:
            return None
        # A multi-op commits at one zxid: the new node's czxid is the cluster node's new mzxid
        # (a create in a multi-op returns only the path), and its data version is 0.
        cluster = results[0]
        return CommittedWrite(version_of(version, cluster), ((entry, f"{cluster.mzxid}.0"),))

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        batch = checked_updates(updates, self.max_rows_per_update)
        size = sum(len(codec.dumps(entry)) for entry, _ in batch)
        if size > MAX_MULTI_ROW_BYTES:
            raise InvalidUpdateError(
                f"update_rows would send {size} bytes of rows in one ZooKeeper multi-op, more than "
                f"{MAX_MULTI_ROW_BYTES} (the server's jute.maxbuffer is 1 MiB by default); split the batch"
            )
        with self._session.driver_errors("update_rows"):
            return self._replace_rows(batch, version)

    def _replace_rows(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        """One multi-op: the cluster node at ``version.etag`` and every row at its etag's data version.

        The etags it returns come from the stats the multi-op returns for each ``set_data``.
        """
        expected_version = znode_version(version.etag)
        tokens = [parse_row_etag(etag) for _, etag in updates]
        if expected_version is None or None in tokens:
            return None
        client = self._session.connected()
        paths = [self.row_path(entry.silo_address) for entry, _ in updates]
        stored = self._stored_alive(client, paths, tokens, version.etag)
        if stored is None:
            return None
        transaction = client.transaction()
        transaction.set_data(self.cluster_path, version_document(version.version), version=expected_version)
        written = []
        for (entry, _), path, token, alive in zip(updates, paths, tokens, stored, strict=True):
            assert token is not None
            # The multi-op checks the data version, so ``alive`` is that of exactly the row it replaces.
            written.append(entry.replace(i_am_alive_time=max(entry.i_am_alive_time, alive)))
            transaction.set_data(path, codec.dumps(written[-1]), version=token[1])
        results = self._session.commit(transaction)
        if results is None:
            return None
        committed = CommittedWrite(
            version_of(version, results[0]),
            tuple((entry, row_etag(stat)) for (entry, _), stat in zip(updates, results[1:], strict=True)),
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
                data, stat = self._session.wait(pending)
                seen = (stat.czxid, stat.version)
            except NoNodeError:
                seen = None
            if seen == token:
                return codec.loads(data, path)
            if attempt or (seen is not None and seen > token):
                return None
            self._session.wait(client.sync_async(path))
            pending = client.get_async(path)
        return None

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        when = ensure_utc(when, "IAmAlive time")
        path = f"{self.row_path(silo_address)}/{ALIVE_NODE}"
        with self._session.driver_errors("update_i_am_alive"):
            client = self._session.connected()
            for _ in range(_CAS_ATTEMPTS):
                if self._compare_and_set_alive(client, path, when):
                    return
        raise TableUnavailableError(f"heartbeat of {silo_address} lost {_CAS_ATTEMPTS} races in a row at {path}")

    def _compare_and_set_alive(self, client: Any, path: str, when: datetime) -> bool:
        """One attempt to move the alive node forward to ``when``; False means retry."""
        try:
            data, stat = self._session.wait(client.get_async(path))
        except NoNodeError:
            try:  # the row exists without an alive node (written by hand): add one
                self._session.wait(client.create_async(path, alive_document(when)))
            except NoNodeError:  # no row: a heartbeat never creates one
                return True
            except NodeExistsError:
                return False
            return True
        try:
            if parse_alive(data, path) >= when:
                return True
        except MalformedRowError:
            pass  # a malformed heartbeat (written by hand): the silo's own heartbeat replaces it
        try:
            self._session.wait(client.set_async(path, alive_document(when), version=stat.version))
        except NoNodeError:
            return True
        except BadVersionError:
            return False
        return True

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        with self._session.driver_errors("cleanup_defunct_entries"):
            client = self._session.connected()
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
            return sum(self._session.outcome(self._session.wait(result)) for result in pending)

    def delete_cluster_entries(self) -> None:
        with self._session.driver_errors("delete_cluster_entries"):
            client = self._session.connected()
            for _ in range(_CAS_ATTEMPTS):
                try:
                    data, stat = self._session.wait(client.get_async(self.cluster_path))
                except NoNodeError:
                    return
                try:
                    descendants = self._descendants(client, self.cluster_path)
                    if parse_version(data, self.cluster_path) is None and not descendants:
                        return
                    # One transaction, deepest first: readers never see a half-deleted cluster. The
                    # cluster node stays as a marker so its data version (the version etag) never restarts.
                    transaction = client.transaction()
                    for path in descendants:
                        transaction.delete(path)
                    transaction.set_data(self.cluster_path, version_document(None), version=stat.version)
                    if self._session.commit(transaction) is not None:
                        return
                except NoNodeError:  # a row removed by a concurrent cleanup: look again
                    continue
        raise TableUnavailableError(f"{self.cluster_path} kept changing while it was being deleted; try again")

    def _descendants(self, client: Any, path: str) -> list[str]:
        """Every node below ``path``, children after their own children."""
        found = []
        for child in self._session.wait(client.get_children_async(path)):
            child_path = f"{path}/{child}"
            found.extend(self._descendants(client, child_path))
            found.append(child_path)
        return found

    def close(self) -> None:
        self._session.close()
