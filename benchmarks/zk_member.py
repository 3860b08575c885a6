"""One member of the ZooKeeper ephemeral-node baseline: ``python -m benchmarks.zk_member HOSTS PATH TIMEOUT``.

It opens a kazoo session with the given session timeout (seconds), creates its ephemeral
znode ``PATH`` (the group's directory is created if missing), prints ``ready`` and then
does nothing until it is killed: the session, and so the node, lives as long as the
process keeps answering ZooKeeper's pings. This is the membership a Python user gets
from kazoo without this project.
"""

from __future__ import annotations

import sys
import threading

from kazoo.client import KazooClient


def main(argv: list[str]) -> int:
    hosts, path, timeout = argv[0], argv[1], float(argv[2])
    client = KazooClient(hosts=hosts, timeout=timeout)
    client.start(timeout=30)
    client.create(path, ephemeral=True, makepath=True)
    print("ready", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
