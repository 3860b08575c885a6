"""The table operations written directly against each driver: the baselines of ``benchmarks.tables``.

Each ``RawTable`` does the same store round trips as the library's operation on the same
data (the library writes the rows first), and nothing else: no entry parsing or
validation, no SQLAlchemy, no retry policy, no pre-ping. ``update`` writes back the row
exactly as ``read_row`` returned it, with the version bumped, as one conditional
transaction (SQL), one multi-op (ZooKeeper), one ``TransactWriteItems`` (DynamoDB) or one
``/v1/txn`` (Consul). A lost race returns ``False``; anything else the driver raises
propagates (the benchmark counts it as a failed attempt).
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import boto3
import psycopg
import pymysql  # type: ignore[import-untyped]  # no stubs in the test environment
import requests
import sqlalchemy as sa
from botocore.exceptions import ClientError
from kazoo.client import KazooClient

from membership_tables import SiloAddress
from membership_tables.sql.schema import MEMBERSHIP_TABLE, VERSION_TABLE, WRITTEN_COLUMNS, membership_table

_KEY_COLUMNS = ("cluster_id", "address", "port", "generation")
_ROW_COLUMNS = tuple(
    c.name for c in membership_table.columns if c.name not in (*_KEY_COLUMNS, "etag", *WRITTEN_COLUMNS)
)


@dataclass(frozen=True)
class RawRow:
    """What a conditional write needs: the version and its etag, the row's payload and etag."""

    version: int
    version_etag: Any
    payload: Any
    etag: Any


class RawTable(Protocol):
    def read_all(self) -> int:
        """Read the version and every row of the cluster; returns the number of rows."""

    def read_row(self, silo: SiloAddress) -> RawRow: ...

    def update(self, silo: SiloAddress, row: RawRow) -> bool:
        """Write ``row`` back and bump the version, if neither changed since it was read."""

    def close(self) -> None: ...


# --- SQL (psycopg, PyMySQL, sqlite3) ----------------------------------------------------------


class RawSql:
    """The library's SQL statements on plain DB-API connections, one per thread, autocommit + BEGIN."""

    def __init__(self, url: str, cluster_id: str) -> None:
        parsed = sa.engine.make_url(url)  # parsing only: no engine is created
        self.dialect = parsed.get_backend_name()
        self.cluster_id = cluster_id
        self._connect: Callable[[], Any]
        if self.dialect == "postgresql":
            self._connect = lambda: psycopg.connect(
                host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database, autocommit=True
            )
            self._read_begin, self._write_begin, mark = "BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN", "%s"
        elif self.dialect in ("mysql", "mariadb"):
            self._connect = lambda: pymysql.connect(
                host=parsed.host,
                port=parsed.port,
                user=parsed.username,
                password=parsed.password,
                database=parsed.database,
                autocommit=True,
            )
            self._read_begin, self._write_begin, mark = "START TRANSACTION", "START TRANSACTION", "%s"
        else:
            self._connect = lambda: _sqlite_connect(str(parsed.database))
            self._read_begin, self._write_begin, mark = "BEGIN", "BEGIN IMMEDIATE", "?"
        key = " AND ".join(f"{column} = {mark}" for column in _KEY_COLUMNS)
        columns = ", ".join(_ROW_COLUMNS)
        self._select_version = f"SELECT version, etag FROM {VERSION_TABLE} WHERE cluster_id = {mark}"
        # with the columns that say which silo a row is: a reader of the whole table needs them
        self._select_all = (
            f"SELECT address, port, generation, {columns}, etag FROM {MEMBERSHIP_TABLE} WHERE cluster_id = {mark}"
        )
        self._select_row = f"SELECT {columns}, etag FROM {MEMBERSHIP_TABLE} WHERE {key}"
        self._bump = (
            f"UPDATE {VERSION_TABLE} SET version = {mark}, etag = {mark}, updated_at = {mark} "
            f"WHERE cluster_id = {mark} AND etag = {mark}"
        )
        assignments = ", ".join(f"{column} = {mark}" for column in (*_ROW_COLUMNS, "etag", *WRITTEN_COLUMNS))
        self._update_row = f"UPDATE {MEMBERSHIP_TABLE} SET {assignments} WHERE {key} AND etag = {mark}"
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
            with self._lock:
                self._all.append(connection)
        return connection

    def _key(self, silo: SiloAddress) -> tuple[object, ...]:
        return (self.cluster_id, silo.host, silo.port, silo.generation)

    def _now(self) -> object:
        now = datetime.now(UTC)
        if self.dialect == "sqlite":
            return now.strftime("%Y-%m-%d %H:%M:%S.%f")
        return now if self.dialect == "postgresql" else now.replace(tzinfo=None)

    def read_all(self) -> int:
        cursor = self._connection().cursor()
        cursor.execute(self._read_begin)
        try:
            cursor.execute(self._select_version, (self.cluster_id,))
            cursor.fetchone()
            cursor.execute(self._select_all, (self.cluster_id,))
            return len(cursor.fetchall())
        finally:
            cursor.execute("COMMIT")

    def read_row(self, silo: SiloAddress) -> RawRow:
        cursor = self._connection().cursor()
        cursor.execute(self._read_begin)
        try:
            cursor.execute(self._select_version, (self.cluster_id,))
            version, version_etag = cursor.fetchone()
            cursor.execute(self._select_row, self._key(silo))
            *payload, etag = cursor.fetchone()
        finally:
            cursor.execute("COMMIT")
        return RawRow(int(version), version_etag, tuple(payload), etag)

    def update(self, silo: SiloAddress, row: RawRow) -> bool:
        cursor = self._connection().cursor()
        cursor.execute(self._write_begin)
        committed = False
        try:
            cursor.execute(
                self._bump, (row.version + 1, uuid.uuid4().hex, self._now(), self.cluster_id, row.version_etag)
            )
            if cursor.rowcount != 1:
                return False
            etag = uuid.uuid4().hex  # and, as the library does, the version and etag it wrote
            cursor.execute(self._update_row, (*row.payload, etag, row.version + 1, etag, *self._key(silo), row.etag))
            if cursor.rowcount != 1:
                return False
            cursor.execute("COMMIT")
            committed = True
            return True
        finally:
            if not committed:
                cursor.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            for connection in self._all:
                connection.close()
            self._all.clear()


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """The library's SQLite settings: WAL, synchronous=NORMAL, our own BEGINs, a 30 s busy timeout."""
    connection = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


# --- ZooKeeper (kazoo) ------------------------------------------------------------------------


class RawZooKeeper:
    """The library's znode layout read and written with plain kazoo calls (one shared client)."""

    def __init__(self, hosts: str, cluster_path: str, node_name: Callable[[SiloAddress], str]) -> None:
        self.client = KazooClient(hosts=hosts, timeout=10.0)
        self.client.start(timeout=10.0)
        self.cluster_path = cluster_path
        self._node_name = node_name

    def read_all(self) -> int:
        # Same round trips as the library's fenced read: head, children, each row and its alive
        # node (pipelined), then the head again.
        head = self.client.get_async(self.cluster_path)
        children = self.client.get_children_async(self.cluster_path).get()
        pending = []
        for name in children:
            path = f"{self.cluster_path}/{name}"
            pending.append((self.client.get_async(path), self.client.get_async(f"{path}/alive")))
        tail = self.client.exists_async(self.cluster_path)
        head.get()
        rows = [(row.get(), alive.get()) for row, alive in pending]
        tail.get()
        return len(rows)

    def read_row(self, silo: SiloAddress) -> RawRow:
        path = f"{self.cluster_path}/{self._node_name(silo)}"
        head, row = self.client.get_async(self.cluster_path), self.client.get_async(path)
        data, stat = head.get()
        payload, row_stat = row.get()
        return RawRow(json.loads(data)["version"], stat.version, payload, row_stat.version)

    def update(self, silo: SiloAddress, row: RawRow) -> bool:
        transaction = self.client.transaction()
        transaction.set_data(self.cluster_path, json.dumps({"version": row.version + 1}).encode(), row.version_etag)
        transaction.set_data(f"{self.cluster_path}/{self._node_name(silo)}", row.payload, row.etag)
        return not any(isinstance(result, Exception) for result in transaction.commit())

    def close(self) -> None:
        self.client.stop()
        self.client.close()


# --- DynamoDB (boto3) --------------------------------------------------------------------------


class RawDynamoDb:
    """The library's item layout with plain boto3 calls: fenced query, TransactGetItems, TransactWriteItems."""

    def __init__(
        self, endpoint_url: str, region: str, table: str, cluster_id: str, credentials: dict[str, str]
    ) -> None:
        self.client = boto3.client(
            "dynamodb",
            region_name=region,
            endpoint_url=endpoint_url,
            aws_access_key_id=credentials["aws_access_key_id"],
            aws_secret_access_key=credentials["aws_secret_access_key"],
            aws_session_token=credentials["aws_session_token"],
        )
        self.table = table
        self.cluster_id = cluster_id

    def _key(self, silo: str) -> dict[str, Any]:
        return {"cluster_id": {"S": self.cluster_id}, "silo": {"S": silo}}

    def _version(self) -> dict[str, Any]:
        item: dict[str, Any] = self.client.get_item(
            TableName=self.table, Key=self._key("~version"), ConsistentRead=True
        )["Item"]
        return item

    def read_all(self) -> int:
        before = self._version()
        items: list[Any] = []
        arguments: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "cluster_id = :c",
            "ExpressionAttributeValues": {":c": {"S": self.cluster_id}},
            "ConsistentRead": True,
        }
        while True:
            page = self.client.query(**arguments)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        after = self._version()
        assert before["etag"] == after["etag"], "a write moved the version during a single-writer read"
        return len(items) - 1

    def read_row(self, silo: SiloAddress) -> RawRow:
        response = self.client.transact_get_items(
            TransactItems=[
                {"Get": {"TableName": self.table, "Key": self._key("~version")}},
                {"Get": {"TableName": self.table, "Key": self._key(str(silo))}},
            ]
        )
        version, row = (part["Item"] for part in response["Responses"])
        return RawRow(int(version["version"]["N"]), version["etag"]["N"], row, row["etag"]["N"])

    def update(self, silo: SiloAddress, row: RawRow) -> bool:
        version_item = {**self._key("~version"), "version": {"N": str(row.version + 1)}, "etag": {"N": _etag()}}
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": version_item,
                            "ConditionExpression": "etag = :e",
                            "ExpressionAttributeValues": {":e": {"N": row.version_etag}},
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {**row.payload, "etag": {"N": _etag()}},
                            "ConditionExpression": "etag = :e",
                            "ExpressionAttributeValues": {":e": {"N": row.etag}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                return False
            raise
        return True

    def close(self) -> None:
        self.client.close()


def _etag() -> str:
    return str(secrets.randbits(63) or 1)


# --- Consul (requests) -------------------------------------------------------------------------


class RawConsul:
    """The library's key layout over plain HTTP: one recursive consistent GET, one ``/v1/txn``."""

    def __init__(self, address: str, root: str) -> None:
        self.base = f"http://{address}/v1"
        self.root = root
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            with self._lock:
                self._sessions.append(session)
        return session

    def _tree(self) -> list[dict[str, Any]]:
        response = self._session().get(f"{self.base}/kv/{self.root}", params={"recurse": "", "consistent": ""})
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()
        return items

    def read_all(self) -> int:
        return sum(1 for item in self._tree() if item["Key"].startswith(f"{self.root}members/"))

    def read_row(self, silo: SiloAddress) -> RawRow:
        # The library reads the whole tree for one row too (one consistent snapshot).
        items = {item["Key"]: item for item in self._tree()}
        version, row = items[f"{self.root}version"], items[f"{self.root}members/{silo}"]
        number = json.loads(base64.b64decode(version["Value"]))["version"]
        return RawRow(number, version["ModifyIndex"], row["Value"], row["ModifyIndex"])

    def update(self, silo: SiloAddress, row: RawRow) -> bool:
        based_on = row.version_etag
        version_value = base64.b64encode(json.dumps({"version": row.version + 1}).encode()).decode()
        ops = [
            {"KV": {"Verb": "cas", "Key": f"{self.root}version", "Value": version_value, "Index": based_on}},
            {"KV": {"Verb": "cas", "Key": f"{self.root}members/{silo}", "Value": row.payload, "Index": row.etag}},
        ]
        for op in ops:
            op["KV"]["Flags"] = based_on  # as the library does: every write changes the key, so its index moves
        response = self._session().put(f"{self.base}/txn", data=json.dumps(ops))
        if response.status_code == 409:
            return False
        response.raise_for_status()
        return True

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()
