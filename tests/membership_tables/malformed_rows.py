"""Hooks that write an unparsable membership row through each store's own driver.

What a corrupted store or a hostile writer leaves behind; the library offers no way to
write one, so the conformance check (``StoreMalformedRow``) and the multi-process tests
take one of these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import consul
import sqlalchemy as sa
from kazoo.client import KazooClient

from membership_tables import MembershipTable, SiloAddress
from membership_tables.consul import ConsulMembershipTable
from membership_tables.dynamodb import ETAG, HASH_KEY, RANGE_KEY, DynamoDbMembershipTable
from membership_tables.memory import InMemoryMembershipTable
from membership_tables.sql.schema import membership_table
from membership_tables.testing import StoreMalformedRow
from membership_tables.zookeeper import ZooKeeperMembershipTable

NOT_JSON = b"{not json"


def store_in_memory(table: MembershipTable, silo: SiloAddress) -> None:
    """A row that holds something other than a ``MembershipEntry`` in the process's store."""
    assert isinstance(table, InMemoryMembershipTable)
    rows: dict[SiloAddress, Any] = table._store.clusters[table.cluster_id].rows
    with table._store.lock:
        rows[silo] = ({"status": "ZOMBIE"}, "not-an-entry")


def sql_store(url: str) -> StoreMalformedRow:
    """A ``silo_membership`` row at ``url`` whose ``suspect_times`` column is not JSON."""

    def store(table: MembershipTable, silo: SiloAddress) -> None:
        engine = sa.create_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(
                    sa.insert(membership_table).values(
                        cluster_id=table.cluster_id,
                        address=silo.host,
                        port=silo.port,
                        generation=silo.generation,
                        silo_name="hostile",
                        host_name="hostile",
                        status="ACTIVE",
                        proxy_port=0,
                        role_name="",
                        update_zone=0,
                        fault_zone=0,
                        start_time=sa.func.current_timestamp(),
                        i_am_alive_time=sa.func.current_timestamp(),
                        suspect_times=NOT_JSON.decode(),
                        properties="{}",
                        etag="hand-written",
                    )
                )
        finally:
            engine.dispose()

    return store


def zookeeper_store(hosts: str, digest: str | None = None) -> StoreMalformedRow:
    """A silo znode holding bytes that are not JSON (``digest``: ``user:password`` of the owner, under ACLs)."""

    def store(table: MembershipTable, silo: SiloAddress) -> None:
        assert isinstance(table, ZooKeeperMembershipTable)
        client = KazooClient(hosts=hosts)
        client.start(timeout=10)
        try:
            if digest is not None:
                client.add_auth("digest", digest)
            client.create(table.row_path(silo), NOT_JSON)
        finally:
            client.stop()
            client.close()

    return store


def consul_store(host: str, port: int, scheme: str = "http", token: str | None = None) -> StoreMalformedRow:
    """A ``members/`` key holding bytes that are not JSON (``token``: an ACL token allowed to write it)."""

    def store(table: MembershipTable, silo: SiloAddress) -> None:
        assert isinstance(table, ConsulMembershipTable)
        agent = consul.Consul(host=host, port=port, scheme=scheme, token=token)
        agent.kv.put(table.layout.member(silo), NOT_JSON)

    return store


def dynamodb_store(client: Callable[[], Any]) -> StoreMalformedRow:
    """An item with a numeric etag but an unknown status; ``client()`` is a boto3 DynamoDB client."""

    def store(table: MembershipTable, silo: SiloAddress) -> None:
        assert isinstance(table, DynamoDbMembershipTable)
        client().put_item(
            TableName=table.settings.table_name,
            Item={
                HASH_KEY: {"S": table.cluster_id},
                RANGE_KEY: {"S": str(silo)},
                ETAG: {"N": "7"},
                "status": {"S": "ZOMBIE"},
            },
        )

    return store
