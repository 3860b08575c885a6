"""The KV state behind the Consul test server: keys with raft-like indexes and atomic transactions.

Semantics follow Consul's documented KV and transaction behaviour (``/v1/kv``, ``/v1/txn``):

* one global index, advanced once by every committed write that changes something; each key that
  write creates or changes gets it as ``ModifyIndex`` (and as ``CreateIndex`` when new), so all
  keys of one transaction share one index;
* writing an entry identical to the stored one (same value and flags) changes nothing and keeps
  its ``ModifyIndex``, as Consul's state store does;
* ``cas`` with index 0 creates only; with index N it writes only if the key exists with
  ``ModifyIndex == N``; ``delete-cas`` of a missing key succeeds (there is nothing to delete);
* a transaction runs every operation against a staged view; if any fails, nothing is applied and
  every failure is reported (``OpIndex`` and ``What``, Consul's messages).

One lock around the store makes every request atomic, reads included, so a recursive read is a
snapshot at one index.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

SESSION_VERBS = frozenset({"lock", "unlock", "check-session"})


@dataclass(frozen=True)
class Entry:
    """One stored key, as Consul reports it (LockIndex is always 0: no sessions here)."""

    key: str
    value: bytes
    flags: int
    create_index: int
    modify_index: int

    def to_json(self, with_value: bool = True) -> dict[str, Any]:
        """The entry in Consul's JSON shape; the value base64-encoded, ``null`` if empty or left out."""
        return {
            "LockIndex": 0,
            "Key": self.key,
            "Flags": self.flags,
            "Value": base64.b64encode(self.value).decode("ascii") if with_value and self.value else None,
            "CreateIndex": self.create_index,
            "ModifyIndex": self.modify_index,
        }


@dataclass(frozen=True)
class KVOp:
    """One KV operation of a transaction (the ``KV`` object of ``/v1/txn``)."""

    verb: str
    key: str
    value: bytes = b""
    flags: int = 0
    index: int = 0


@dataclass(frozen=True)
class TxnError:
    op_index: int
    what: str


@dataclass(frozen=True)
class TxnOutcome:
    """What a transaction returns: results (entry, with value?) on success, else errors."""

    results: tuple[tuple[Entry, bool], ...] = ()
    errors: tuple[TxnError, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class _Staging:
    """A transaction's view: the committed entries plus its own not-yet-applied changes."""

    committed: dict[str, Entry]
    changes: dict[str, Entry | None] = field(default_factory=dict)

    def get(self, key: str) -> Entry | None:
        return self.changes[key] if key in self.changes else self.committed.get(key)

    def tree(self, prefix: str) -> list[Entry]:
        keys = {k for k in self.committed if k.startswith(prefix)} | {k for k in self.changes if k.startswith(prefix)}
        return [entry for key in sorted(keys) if (entry := self.get(key)) is not None]

    def put(self, key: str, value: bytes, flags: int, index: int) -> Entry:
        existing = self.get(key)
        if existing is not None and existing.value == value and existing.flags == flags:
            return existing
        entry = Entry(key, value, flags, existing.create_index if existing else index, index)
        self.changes[key] = entry
        return entry

    def delete(self, key: str) -> None:
        if self.get(key) is not None:
            self.changes[key] = None


def _quote(text: str) -> str:
    """Quote like Go's ``%q``, so error messages read as Consul's do."""
    return json.dumps(text)


def _apply(view: _Staging, op: KVOp, index: int) -> tuple[list[tuple[Entry, bool]], str | None]:
    """Run one operation on ``view``; return its results (entry, with value?) and its error."""
    existing = view.get(op.key)
    if op.verb == "set":
        return [(view.put(op.key, op.value, op.flags, index), False)], None
    if op.verb == "cas":
        current = existing.modify_index if existing else 0  # index 0 = "must not exist yet"
        if current != op.index:
            return [], f"failed to set key {_quote(op.key)}, index is stale"
        return [(view.put(op.key, op.value, op.flags, index), False)], None
    if op.verb == "get":
        return ([(existing, True)], None) if existing else ([], f"key {_quote(op.key)} doesn't exist")
    if op.verb == "get-tree":
        return [(entry, True) for entry in view.tree(op.key)], None
    if op.verb == "check-index":
        if existing is None:
            return [], f"failed to check index, key {_quote(op.key)} doesn't exist"
        if existing.modify_index != op.index:
            current = existing.modify_index
            return [], f"failed index check for key {_quote(op.key)}, current modify index {current} != {op.index}"
        return [(existing, False)], None
    if op.verb == "check-not-exists":
        return [], (f"key {_quote(op.key)} exists" if existing else None)
    if op.verb == "delete":
        view.delete(op.key)
        return [], None
    if op.verb == "delete-tree":
        for entry in view.tree(op.key):
            view.delete(entry.key)
        return [], None
    if op.verb == "delete-cas":
        if existing is not None and existing.modify_index != op.index:
            return [], f"failed to delete key {_quote(op.key)}, index is stale"
        view.delete(op.key)
        return [], None
    if op.verb in SESSION_VERBS:
        return [], f"KV verb {_quote(op.verb)} needs sessions, which the Consul test server does not support"
    return [], f"unknown KV verb {_quote(op.verb)}"


class KVStore:
    """The key/value state; thread-safe, every method atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._index = 0

    @property
    def index(self) -> int:
        """The index of the last committed change (at least 1, as Consul reports it)."""
        with self._lock:
            return max(self._index, 1)

    def get(self, key: str) -> tuple[int, Entry | None]:
        """The entry of ``key`` (or ``None``) and the store's index."""
        with self._lock:
            return max(self._index, 1), self._entries.get(key)

    def list(self, prefix: str) -> tuple[int, list[Entry]]:
        """Every entry whose key starts with ``prefix``, sorted, and the index of the newest one."""
        with self._lock:
            entries = _Staging(self._entries).tree(prefix)
            newest = max((entry.modify_index for entry in entries), default=0)
            return newest or max(self._index, 1), entries

    def put(self, key: str, value: bytes, flags: int = 0, cas: int | None = None) -> bool:
        """``PUT /v1/kv/<key>``: set, or check-and-set when ``cas`` is given."""
        verb = "set" if cas is None else "cas"
        return self.txn([KVOp(verb, key, value, flags, cas or 0)]).ok

    def delete(self, key: str, recurse: bool = False, cas: int | None = None) -> bool:
        """``DELETE /v1/kv/<key>``: one key, a whole prefix (``recurse``), or check-and-delete."""
        verb = "delete-tree" if recurse else "delete" if cas is None else "delete-cas"
        return self.txn([KVOp(verb, key, index=cas or 0)]).ok

    def txn(self, ops: Iterable[KVOp]) -> TxnOutcome:
        """Run ``ops`` atomically: all applied, or (if any fails) none."""
        with self._lock:
            view = _Staging(self._entries)
            index = self._index + 1
            results: list[tuple[Entry, bool]] = []
            errors: list[TxnError] = []
            for position, op in enumerate(ops):
                op_results, error = _apply(view, op, index)
                results.extend(op_results)
                if error is not None:
                    errors.append(TxnError(position, error))
            if errors:
                return TxnOutcome(errors=tuple(errors))
            if view.changes:
                self._index = index
                for key, entry in view.changes.items():
                    if entry is None:
                        self._entries.pop(key, None)
                    else:
                        self._entries[key] = entry
            return TxnOutcome(results=tuple(results))

    def __iter__(self) -> Iterator[Entry]:
        """A snapshot of every entry, sorted by key (for tests and debugging)."""
        with self._lock:
            return iter(_Staging(self._entries).tree(""))
