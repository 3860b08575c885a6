"""``ConsulMembershipTable``: the membership contract on Consul's KV store (see the package docstring)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import consul

from membership_tables import codec
from membership_tables.consul._agent import ConsulAgent
from membership_tables.consul._keys import (
    ConsulLayout,
    KeyTree,
    KVItem,
    alive_time,
    heartbeat_is_newer,
    kv_op,
    modify_index,
    version_of,
    version_value,
)
from membership_tables.consul._settings import ConsulSettings, parse_consul_uri
from membership_tables.contract import MembershipTable, RowUpdate, checked_updates
from membership_tables.errors import InvalidEntryError, InvalidUpdateError, MalformedRowError, TableUnavailableError
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

MAX_TXN_OPS = 64
"""Consul's limit on the operations of one ``/v1/txn`` request."""
MAX_TXN_BYTES = 512 * 1024
"""Consul's default limit on the body of one ``/v1/txn`` request (``txn_max_req_len``)."""

HEARTBEAT_ATTEMPTS = 32
"""A heartbeat retries only while concurrent heartbeats of the same silo keep winning its ``cas``."""


def _silos(updates: Sequence[RowUpdate]) -> str:
    return ", ".join(str(entry.silo_address) for entry, _ in updates)


class ConsulMembershipTable(MembershipTable):
    """A cluster's membership table in Consul's KV store; see the package docstring for the layout."""

    max_rows_per_update = MAX_TXN_OPS - 1
    """``update_rows`` is one transaction of a ``cas`` per row plus one of the version key (the
    ``get`` reads before it are a transaction of their own, one per row)."""

    def __init__(self, settings: ConsulSettings, cluster_id: str) -> None:
        super().__init__(validate_cluster_id(cluster_id))
        self.settings = settings
        self.layout = ConsulLayout(f"{settings.prefix}/{cluster_id}/")
        self._agent = ConsulAgent(settings, cluster_id)
        self._documents: dict[str, tuple[int, datetime]] = {}
        """Per member key, the ModifyIndex of the document this handle last read or wrote there
        and that document's own IAmAlive time (``_replace_rows``). A ModifyIndex names one
        document forever, so the pair never goes stale; it is only replaced by a newer one."""

    @classmethod
    def from_uri(cls, uri: str, cluster_id: str, **options: Any) -> ConsulMembershipTable:
        return cls(parse_consul_uri(uri, options), cluster_id)

    def __repr__(self) -> str:
        return f"ConsulMembershipTable({self.settings.address}/{self.layout.root!r})"

    # --- reading ------------------------------------------------------------------------------

    def _row(self, tree: KeyTree, silo: str) -> tuple[MembershipEntry, str] | MalformedRow:
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
                alive = alive_time(beat)
            except MalformedRowError as exc:
                return MalformedRow(f"Consul key {beat['Key']!r}", str(exc))
            if alive > entry.i_am_alive_time:
                entry = entry.replace(i_am_alive_time=alive)
        return entry, str(item["ModifyIndex"])

    def _snapshot(self, only: SiloAddress | None = None) -> MembershipTableData:
        tree = self._agent.read_tree(self.layout.root)
        if only is None:  # forget the documents of rows removed since (a cleanup's)
            present = {item["Key"] for item in tree.members.values()}
            self._documents = {key: pair for key, pair in self._documents.items() if key in present}
        read = [self._row(tree, silo) for silo in tree.members if only is None or silo == str(only)]
        return MembershipTableData.from_parsed(read, version_of(tree.version))

    # --- the contract --------------------------------------------------------------------------

    def initialize(self, try_init_version: bool = True) -> None:
        if try_init_version:
            # cas=0 creates only: racing initializers agree, and an existing version is never touched.
            self._agent.call("create the version key", lambda c: c.kv.put(self.layout.version, version_value(0), cas=0))
        else:
            self._agent.call("reach the agent", lambda c: c.kv.get(self.layout.version))

    def read_all(self) -> MembershipTableData:
        return self._snapshot()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self._snapshot(silo_address)

    def read_version(self) -> TableVersion:
        _, item = self._agent.call(
            "read the version", lambda client: client.kv.get(self.layout.version, consistency="consistent")
        )
        return version_of(item)

    def _committed(
        self, what: str, ops: list[KVItem], version: TableVersion, rows: list[MembershipEntry]
    ) -> CommittedWrite | None:
        """Run the write ``ops``: ``None`` if rolled back, else the ModifyIndex of each key as its etag.

        Consul answers a committed transaction with one result per ``set`` and ``cas``, each the
        key's metadata after the write (its ``ModifyIndex`` is the transaction's raft index).
        """
        results, errors = self._agent.txn_answer(what, ops)
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
        based_on = modify_index(version.etag)
        if based_on is None:
            return None
        silo = entry.silo_address
        ops = [
            kv_op("cas", self.layout.version, version_value(version.version), based_on, flags=based_on),
            kv_op("cas", self.layout.member(silo), codec.dumps(entry), 0, flags=based_on),
            kv_op("set", self.layout.alive(silo), codec.format_time(entry.i_am_alive_time).encode()),
        ]
        return self._committed(f"insert row {silo}", ops, version, [entry])

    def update_rows_with_etags(self, updates: Sequence[RowUpdate], version: TableVersion) -> CommittedWrite | None:
        batch = checked_updates(updates, self.max_rows_per_update)
        ops = [{"KV": kv_op("cas", self.layout.member(entry.silo_address), codec.dumps(entry))} for entry, _ in batch]
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
        based_on = modify_index(version.etag)
        parsed = [modify_index(etag) for _, etag in updates]
        indexes = [index for index in parsed if index is not None]
        if based_on is None or len(indexes) != len(parsed):
            return None
        members = [self.layout.member(entry.silo_address) for entry, _ in updates]
        stored = self._stored_alive(members, indexes, updates)
        if stored is None:
            return None
        ops = [kv_op("cas", self.layout.version, version_value(version.version), based_on, flags=based_on)]
        written = []
        for (entry, _), key, index, current in zip(updates, members, indexes, stored, strict=True):
            written.append(entry.replace(i_am_alive_time=max(entry.i_am_alive_time, current)))
            ops.append(kv_op("cas", key, codec.dumps(written[-1]), index, flags=based_on))
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
        stored, errors = self._agent.txn_answer(f"read rows {_silos(updates)}", [kv_op("get", key) for key in members])
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
            _, beat = self._agent.call("read a heartbeat", lambda c: c.kv.get(alive, consistency="consistent"))
            if beat is not None and heartbeat_is_newer(beat, when):
                return
            # "get" fails the transaction if the row is absent: a heartbeat never creates a row.
            ops = [
                kv_op("get", member),
                kv_op("cas", alive, codec.format_time(when).encode(), beat["ModifyIndex"] if beat else 0),
            ]
            errors = self._agent.txn(f"write the heartbeat of {silo_address}", ops)
            if not errors or any(error.get("OpIndex") == 0 for error in errors):
                return

    def cleanup_defunct_entries(self, before: datetime) -> int:
        before = ensure_utc(before, "cleanup cutoff")
        tree = self._agent.read_tree(self.layout.root)
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
                kv_op("check-index", member, index=int(etag)),
                kv_op("delete-cas", member, index=int(etag)),
                kv_op("delete-cas", alive, index=beat["ModifyIndex"]) if beat else kv_op("check-not-exists", alive),
            ]
            if not self._agent.txn(f"remove defunct row {silo}", ops):
                removed += 1
        return removed

    def delete_cluster_entries(self) -> None:
        self._agent.call("delete the cluster", lambda c: c.kv.delete(self.layout.root, recurse=True))

    def close(self) -> None:
        self._agent.close()
