"""Run the Consul test server as a process: ``python -m testbed.consul_server --port N``.

It serves until SIGTERM or SIGINT, then stops cleanly. The first line on stdout says where
it listens (useful with ``--port 0``).
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from testbed.consul_server.server import ConsulTestServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.consul_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8500, help="TCP port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--acl-token", help="require this token (X-Consul-Token or ?token=) on every request")
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with ConsulTestServer(args.host, args.port, acl_token=args.acl_token) as server:
        print(f"consul test server listening on http://{server.address}", flush=True)
        stopping.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
