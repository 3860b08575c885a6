"""Silos of ``benchmarks.silo_host`` processes crashed in process, for the kill trials of a
cluster whose own victim processes never turned Active (a join storm that stopped on a
saturated machine).

A host started with ``--crash-file`` crashes the silos that file lists when it gets SIGUSR1:
their gRPC servers stop at once (peers' connections end and the port refuses, as after a
SIGKILL) and their roles stop without writing anything to the table; it prints ``crashed
ENDPOINT AT`` with the Unix time the crash began. On a saturated machine the host's event loop
may take seconds to get to the signal, so a trial counts from that time, not the signal's.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from membership_tables import SiloAddress
from testbed.services.process import ServerProcess

SILOS_LINE = b"silos "
"""How a host's log lists its silos' endpoints (before ``listening N``)."""
CRASHED_LINE = "crashed "


def crash_file(log: Path) -> Path:
    """The ``--crash-file`` of the host that logs to ``log``."""
    return log.with_suffix(".crash")


def hosted_endpoints(hosts: Iterable[ServerProcess]) -> dict[str, ServerProcess]:
    """Each hosted silo's ``host:port``, with the host process that holds it."""
    found: dict[str, ServerProcess] = {}
    for host in hosts:
        for line in host.log.read_bytes().splitlines():
            if line.startswith(SILOS_LINE):
                found.update((endpoint, host) for endpoint in line[len(SILOS_LINE) :].decode().split())
    return found


@dataclass
class HostedSilo:
    """A silo of a host process, crashed through its host (``benchmarks.mass_kill.Victim``)."""

    address: SiloAddress
    host: ServerProcess
    log_offset: int = 0
    """Bytes of the host's log before the kill: ``stopped_at`` reads only what follows (the trial
    asks every poll until the crash began, and a host's log grows to megabytes)."""

    def kill(self) -> None:
        self.log_offset = self.host.log.stat().st_size if self.host.log.exists() else 0
        with crash_file(self.host.log).open("a") as named:
            named.write(self.address.endpoint + "\n")
        self.host.signal(signal.SIGUSR1)

    def stopped_at(self, signalled_at: float) -> float | None:
        """When the host began the crash (from its log), None if it has not yet."""
        prefix = f"{CRASHED_LINE}{self.address.endpoint} ".encode()
        with self.host.log.open("rb") as log:
            log.seek(self.log_offset)
            for line in log:
                if line.startswith(prefix):
                    return float(line[len(prefix) :])
        return None


def hosted_victims(
    hosts: Sequence[ServerProcess], active: Iterable[SiloAddress], count: int, rng: random.Random
) -> list[HostedSilo]:
    """``count`` of the ``active`` silos that ``hosts`` hold (fewer if they hold fewer), drawn by ``rng``."""
    held = hosted_endpoints(hosts)
    candidates = sorted((address for address in active if address.endpoint in held), key=str)
    chosen = rng.sample(candidates, min(count, len(candidates)))
    return [HostedSilo(address, held[address.endpoint]) for address in chosen]
