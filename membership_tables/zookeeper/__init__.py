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

The package: ``_settings`` parses the URI and the credentials, ``_znodes`` is what the znodes
hold and the etags, ``_session`` is the kazoo client and the driver boundary, ``_reads`` the
fenced reads, ``_table`` the contract.
"""

from membership_tables.zookeeper._settings import (
    DEFAULT_CHROOT,
    DEFAULT_PORT,
    DIGEST_ENV,
    DigestCredentials,
    ZooKeeperSettings,
    parse_uri,
)
from membership_tables.zookeeper._table import MAX_MULTI_ROW_BYTES, ZooKeeperMembershipTable
from membership_tables.zookeeper._znodes import ALIVE_NODE, node_name

__all__ = [
    "ALIVE_NODE",
    "DEFAULT_CHROOT",
    "DEFAULT_PORT",
    "DIGEST_ENV",
    "MAX_MULTI_ROW_BYTES",
    "DigestCredentials",
    "ZooKeeperMembershipTable",
    "ZooKeeperSettings",
    "node_name",
    "parse_uri",
]
