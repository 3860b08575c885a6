"""Several silos in one process, for the scale benchmark: ``python -m benchmarks.silo_host ...``.

Each silo is a full ``silo.runtime.silo.Silo`` with its own gRPC server on its own port and its own
``GrpcProber``, wired by ``silo.runtime.process.assemble`` exactly as ``silo run`` wires one; they share the
process's event loop and one table handle (one connection pool), which is what lets a
two-core machine hold hundreds of silos. All silos start joining at once. The process
prints ``listening N`` once every server is bound and ``active K of N`` when the joins
are over, then serves until SIGTERM/SIGINT (graceful leave) or SIGKILL. With ``--start-when
PATH`` the silos start joining only once PATH exists, so that several hosts start together:
without it the first host to finish importing joined an empty table alone, its silos were the
whole Active set for seconds, and every other joiner validated against that one process.
``--join-offset A --join-spacing B`` pace the joins instead of starting them together: silo ``j``
of this host starts joining ``A + j * B`` seconds after the start (``benchmarks.scale --join-rate``
interleaves the hosts so that the whole cluster starts a steady number of joins a second).

``--crash-file PATH``: on SIGUSR1 (handled at once, not at the loop's next turn) the host crashes
each of its silos whose ``host:port`` is a line of PATH (its sockets shut at once, then its roles
stopped without a table write and its gRPC server stopped, as a process kill leaves it) and prints
``crashed ENDPOINT AT`` (Unix seconds when its sockets were shut): how ``benchmarks.scale`` kills a
hosted silo when its own victim processes are not Active. The file may list silos of other hosts and
silos already crashed. Each host prints its silos' endpoints (``silos A B ...``) before ``listening
N``.

``--probe-loss P --probe-delay Q`` wrap every silo's prober in ``benchmarks.lossy_prober.LossyProber``
(silo ``i`` seeded ``--seed + i``): probe-level packet loss and delay without ``tc netem``.
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
from pathlib import Path

import psutil

from benchmarks.lossy_prober import LossyProber
from benchmarks.option_flags import add_set_flag, local_options_with
from membership_tables import SiloStatus, open_table
from silo.errors import SiloError
from silo.membership.options import SiloOptions
from silo.membership.probing import Prober
from silo.runtime.gc_tuning import freeze_startup_objects, tune_for_silos
from silo.runtime.process import SiloProcessConfig, SiloStack, assemble, read_known_silos


async def join(stack: SiloStack) -> bool:
    try:
        await stack.start()
    except SiloError:
        return False
    return stack.silo.status is SiloStatus.ACTIVE


async def join_after(stack: SiloStack, delay: float) -> bool:
    if delay > 0:
        await asyncio.sleep(delay)
    return await join(stack)


async def leave(stack: SiloStack) -> None:
    await stack.silo.stop()
    await stack.close()


def shut_sockets(port: int) -> int:
    """Shut every socket of this process whose local port is ``port`` (the server's listener and the
    connections it accepted), at once and without the event loop, as the kernel does a killed
    process's: peers' connections end and new ones are refused. How many it shut.

    A hosted silo's ``server.stop`` needs the loop: on a host whose loop ran seconds late (2,000
    silos on two cores) its listener closed minutes after the crash and its peers' connections
    stayed open, so most monitors saw silence and not the refusals a real crash gives them."""
    shut = 0
    for connection in psutil.Process().net_connections(kind="tcp"):
        if connection.laddr and connection.laddr.port == port and connection.fd >= 0:
            try:
                duplicate = socket.socket(fileno=os.dup(connection.fd))
            except OSError:
                continue  # closed since it was listed: the server ends peers' bare connects all the time
            with duplicate, contextlib.suppress(OSError):
                if duplicate.getsockname()[1] == port:  # not a descriptor reused meanwhile by another socket
                    duplicate.shutdown(socket.SHUT_RDWR)  # acts on the socket, not on our duplicate of its descriptor
                    shut += 1
    return shut


class Crashes:
    """Crashes the hosted silos a crash file names (``--crash-file``), each once, on SIGUSR1."""

    def __init__(self, stacks: list[SiloStack], crash_file: Path, loop: asyncio.AbstractEventLoop) -> None:
        self._stacks = {stack.silo.silo_address.endpoint: stack for stack in stacks}
        self._file = crash_file
        self._loop = loop
        self._crashed: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def install(self) -> None:
        """Handle SIGUSR1 with ``signal.signal``: its handler runs at the main thread's next bytecode,
        where an ``add_signal_handler`` callback waits for its turn of the event loop, which a
        starved host took minutes to give (2 of 10 victims of a 2,000-silo run were never crashed
        within their trial)."""
        signal.signal(signal.SIGUSR1, self.on_signal)

    def on_signal(self, signum: int = signal.SIGUSR1, frame: object = None) -> None:
        """Shut each named silo's sockets now (``shut_sockets``), say so, and leave the rest of the
        kill to the loop. ``os.write``: a print could land inside one the handler interrupted."""
        named = self._file.read_text().split() if self._file.exists() else []
        for endpoint in named:
            stack = self._stacks.get(endpoint)
            if stack is not None and endpoint not in self._crashed:
                self._crashed.add(endpoint)
                try:
                    shut_sockets(stack.silo.silo_address.port)
                except Exception:  # raised here, it would surface in whatever code the signal interrupted
                    logging.getLogger(__name__).exception("could not shut the sockets of %s", endpoint)
                os.write(
                    sys.stdout.fileno(), f"crashed {endpoint} {time.time():.3f}\n".encode()
                )  # the trial counts from here
                self._loop.call_soon_threadsafe(self._stop_later, stack)

    def alive(self, stack: SiloStack) -> bool:
        return stack.silo.silo_address.endpoint not in self._crashed

    def _stop_later(self, stack: SiloStack) -> None:
        task = asyncio.ensure_future(self._crash(stack))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _crash(stack: SiloStack) -> None:
        """The rest of a kill once its sockets are shut: the roles end first, with no time left, so
        nothing is written (no heartbeat, vote or departure after the crash), then the server."""
        await stack.silo.stop(within=0.0)
        await stack.server.stop(None)
        await stack.prober.close()


class Impairment:
    """Wraps each silo's prober in a ``LossyProber`` (silo ``i`` seeded ``seed + i``) and sums what they did."""

    def __init__(self, loss: float, delay: float, seed: int) -> None:
        self._loss, self._delay, self._seed = loss, delay, seed
        self.probers: list[LossyProber] = []

    def wrap(self, prober: Prober) -> Prober:
        lossy = LossyProber(prober, self._loss, self._delay, self._seed + len(self.probers))
        self.probers.append(lossy)
        return lossy

    def summary(self) -> str:
        totals = [sum(getattr(p.injected, name) for p in self.probers) for name in ("forwarded", "dropped", "delayed")]
        return "injected forwarded={} dropped={} delayed={}".format(*totals)


async def serve(
    table_uri: str,
    cluster_id: str,
    count: int,
    options: SiloOptions,
    impairment: Impairment | None = None,
    start_when: Path | None = None,
    join_offset: float = 0.0,
    join_spacing: float = 0.0,
    crash_file: Path | None = None,
) -> int:
    table = open_table(table_uri, cluster_id)
    wrap = impairment.wrap if impairment else None
    known = read_known_silos(table)  # one read for all the generations, not one per silo
    stacks = [assemble(table, SiloProcessConfig(cluster_id, options=options), wrap, known) for _ in range(count)]
    print("silos " + " ".join(stack.silo.silo_address.endpoint for stack in stacks), flush=True)
    print(f"listening {count}", flush=True)
    while start_when is not None and not start_when.exists():
        await asyncio.sleep(0.005)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    crashes = Crashes(stacks, crash_file, loop) if crash_file is not None else None
    if crashes is not None:
        crashes.install()
    joined = await asyncio.gather(
        *(join_after(stack, join_offset + index * join_spacing) for index, stack in enumerate(stacks))
    )
    print(f"active {sum(joined)} of {count}", flush=True)
    freeze_startup_objects()
    await stop.wait()
    alive = [stack for stack in stacks if crashes is None or crashes.alive(stack)]
    await asyncio.gather(*(leave(stack) for stack in alive), return_exceptions=True)
    if impairment:
        print(impairment.summary(), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.silo_host", description=__doc__)
    parser.add_argument("--table", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--count", type=int, required=True)
    add_set_flag(parser, "overrides")
    parser.add_argument("--probe-loss", type=float, default=0.0, help="fraction of probes dropped (default 0)")
    parser.add_argument("--probe-delay", type=float, default=0.0, help="fraction of probes delayed (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first silo's loss/delay RNG")
    parser.add_argument("--crash-file", type=Path, help="on SIGUSR1, crash the silos this file lists (host:port)")
    parser.add_argument("--start-when", type=Path, help="start joining once this file exists (default: at once)")
    parser.add_argument("--join-offset", type=float, default=0.0, help="seconds before the first silo joins")
    parser.add_argument(
        "--join-spacing", type=float, default=0.0, help="seconds between two silos' joins (0: together)"
    )
    args = parser.parse_args(argv)
    # WARNING: hundreds of silos to a process; SILO_HOST_LOG_LEVEL=INFO to follow each one's join and votes
    # (membership events too with SILO_HOST_EVENT_LOG=1; SILO_HOST_DEBUG_LOGGERS=a,b for DEBUG on some loggers).
    level = os.environ.get("SILO_HOST_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not os.environ.get("SILO_HOST_EVENT_LOG"):
        # every silo logging every change it sees: a 1,000-silo join is a million lines, and
        # logging them at INFO overloaded the machine (load 90 at 187 s, 26 November)
        logging.getLogger("silo.events").setLevel(logging.WARNING)
    for name in filter(None, os.environ.get("SILO_HOST_DEBUG_LOGGERS", "").split(",")):
        logging.getLogger(name.strip()).setLevel(logging.DEBUG)  # e.g. silo.membership.silo_health: each vote's outcome
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    options = local_options_with(args.overrides)
    lossy = args.probe_loss > 0 or args.probe_delay > 0
    impairment = Impairment(args.probe_loss, args.probe_delay, args.seed) if lossy else None
    tune_for_silos()  # as ``silo run`` does
    pace = {"join_offset": args.join_offset, "join_spacing": args.join_spacing, "crash_file": args.crash_file}
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(args.table, args.cluster, args.count, options, impairment, args.start_when, **pace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
