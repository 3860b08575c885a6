"""Fenced reads: ZooKeeper has no multi-node read, so the cluster node is read before and after
the rows (pipelined), and the read is retried while a canonical write moved its version."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import NoNodeError

from membership_tables import codec
from membership_tables.contract import UNINITIALIZED_VERSION
from membership_tables.errors import InvalidEntryError, MalformedRowError, TableUnavailableError
from membership_tables.model import MalformedRow, TableVersion
from membership_tables.zookeeper._session import ZooKeeperSession
from membership_tables.zookeeper._znodes import (
    ALIVE_NODE,
    Snapshot,
    StoredRow,
    parse_alive,
    parse_version,
    silo_node_path,
)

_FENCE_ATTEMPTS = 100
"""Fenced reads retried this often while canonical writes keep moving the version."""


def fenced_snapshot(
    session: ZooKeeperSession,
    names: Sequence[str] | None,
    remember: Callable[[str, Sequence[StoredRow | MalformedRow]], None],
) -> Snapshot:
    """The named rows (all if ``None``) and the version, fenced by the cluster node; ``remember`` is told
    the rows read and the version etag they were read at."""
    client = session.connected()
    for attempt in range(_FENCE_ATTEMPTS):
        head = client.get_async(session.cluster_path)
        listing = client.get_children_async(session.cluster_path) if names is None else None
        try:
            data, before = session.wait(head)
        except NoNodeError:
            return Snapshot(UNINITIALIZED_VERSION, ())
        number = parse_version(data, session.cluster_path)
        if number is None:  # a deleted cluster's marker: no version row, no rows
            return Snapshot(UNINITIALIZED_VERSION, ())
        try:
            children = names if names is not None else session.wait(listing)
        except NoNodeError:  # the cluster was deleted after the first read
            continue
        pending = []
        for name in children:
            path = f"{session.cluster_path}/{name}"
            pending.append((path, client.get_async(path), client.get_async(f"{path}/{ALIVE_NODE}")))
        tail = client.exists_async(session.cluster_path)
        read = [row for path, *results in pending if (row := _stored_row(session, path, *results)) is not None]
        after = session.wait(tail)
        if after is not None and (after.czxid, after.version) == (before.czxid, before.version):
            remember(str(before.version), read)
            return Snapshot(
                TableVersion(number, str(before.version)),
                tuple(row for row in read if isinstance(row, StoredRow)),
                tuple(row for row in read if isinstance(row, MalformedRow)),
            )
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
    raise TableUnavailableError(
        f"the version of {session.cluster_path} kept moving during {_FENCE_ATTEMPTS} reads; too many concurrent writes"
    )


def _stored_row(
    session: ZooKeeperSession, path: str, row_result: Any, alive_result: Any
) -> StoredRow | MalformedRow | None:
    """The row at ``path`` (``None`` if it is gone), or how it is malformed."""
    try:
        data, stat = session.wait(row_result)
    except NoNodeError:  # removed by a cleanup, which does not move the version
        return None
    try:
        entry = codec.bytes_to_entry(data)
    except InvalidEntryError as exc:
        return MalformedRow(f"znode {path}", str(exc))
    expected = silo_node_path(session.cluster_path, entry.silo_address)
    if expected != path:
        return MalformedRow(f"znode {path}", f"holds the row of {entry.silo_address}, which belongs at {expected}")
    try:
        alive_data, alive_stat = session.wait(alive_result)
    except NoNodeError:
        return StoredRow(entry, stat.version, stat.czxid, None, entry.i_am_alive_time)
    try:
        alive = max(entry.i_am_alive_time, parse_alive(alive_data, f"{path}/{ALIVE_NODE}"))
    except MalformedRowError as exc:
        return MalformedRow(f"znode {path}/{ALIVE_NODE}", str(exc))
    return StoredRow(
        entry.replace(i_am_alive_time=alive), stat.version, stat.czxid, alive_stat.version, entry.i_am_alive_time
    )
