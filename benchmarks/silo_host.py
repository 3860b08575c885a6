"""Several silos in one process, for the scale benchmark: ``python -m benchmarks.silo_host ...``.

Each silo is a full ``silo.runtime.Silo`` with its own gRPC server (``silo.server``) on its
own port and its own ``GrpcProber``, exactly as ``silo run`` wires one; they share the
process's event loop and one table handle (one connection pool), which is what lets a
two-core machine hold hundreds of silos. All silos start joining at once. The process
prints ``listening N`` once every server is bound and ``active K of N`` when the joins
are over, then serves until SIGTERM/SIGINT (graceful leave) or SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time

from membership_tables import MembershipTable, SiloAddress, SiloStatus, open_table
from silo.cli import override
from silo.errors import SiloError
from silo.options import SiloOptions
from silo.prober import GrpcProber
from silo.runtime import Silo
from silo.server import MembershipServer


class HostedSilo:
    def __init__(self, table: MembershipTable, cluster_id: str, options: SiloOptions, generation: int) -> None:
        self.server = MembershipServer("127.0.0.1", 0)
        self.address = SiloAddress("127.0.0.1", self.server.port, generation)
        self.prober = GrpcProber(cluster_id, self.address, gossip_timeout=options.probe_timeout)
        self.silo = Silo(
            table=table,
            address=self.address,
            options=options,
            prober=self.prober,
            gossip=self.prober,
            silo_name=f"hosted-{self.server.port}",
            host_name=socket.gethostname(),
        )

    async def join(self) -> bool:
        await self.server.start(self.silo)
        try:
            await self.silo.start()
        except SiloError:
            return False
        if self.silo.status is not SiloStatus.ACTIVE:
            return False
        await self.server.set_serving(True)
        return True

    async def close(self) -> None:
        await self.silo.stop()
        await self.server.stop(None)
        await self.prober.close()


async def serve(table_uri: str, cluster_id: str, count: int, options: SiloOptions) -> int:
    table = open_table(table_uri, cluster_id)
    generation = time.time_ns() // 1_000_000
    hosted = [HostedSilo(table, cluster_id, options, generation) for _ in range(count)]
    print(f"listening {count}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    joined = await asyncio.gather(*(silo.join() for silo in hosted))
    print(f"active {sum(joined)} of {count}", flush=True)
    await stop.wait()
    await asyncio.gather(*(silo.close() for silo in hosted), return_exceptions=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.silo_host", description=__doc__)
    parser.add_argument("--table", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=override)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    options = SiloOptions.local().with_overrides(dict(args.overrides))
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(args.table, args.cluster, args.count, options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
