"""A Consul-HTTP-API-compatible test server (KV and transactions), in process or as a process.

In process::

    with ConsulTestServer() as server:
        table = open_table(server.uri("silo-membership"), "c1")

As a process: ``python -m testbed.consul_server --port 8500``.
"""

from testbed.consul_server.acl import AclPolicy, AclTable
from testbed.consul_server.server import ConsulTestServer
from testbed.consul_server.store import Entry, KVOp, KVStore, TxnOutcome

__all__ = ["AclPolicy", "AclTable", "ConsulTestServer", "Entry", "KVOp", "KVStore", "TxnOutcome"]
