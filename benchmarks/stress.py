"""Stress for the accuracy benchmark: stalls, probe delays by SIGSTOP bursts, and a pinned CPU hog.

* ``Staller``: SIGSTOP one process for ``stall`` seconds, SIGCONT, wait ``gap``, repeat: an
  event loop starved for less than the detection window (a GC pause, a blocked loop).
* ``Jitter``: every other process is SIGSTOPped in short bursts (exponential gaps and
  lengths) so that about ``fraction`` of its time it neither sends nor answers: probes to
  and from it are delayed. This stands in for ``tc netem`` packet delay/loss, which needs
  the ``sch_netem`` kernel module (not available on the benchmark machine).
* ``CpuHog``: a busy-looping process pinned to one CPU, together with every thread of the
  stalled process.

Whatever happens, ``stop()`` sends SIGCONT to every process it touched.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Protocol


class Signallable(Protocol):
    @property
    def running(self) -> bool: ...

    def send(self, signum: int) -> None: ...


class _Looper:
    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._touched: dict[int, Signallable] = {}
        self.events = 0

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _pause(self, process: Signallable, seconds: float) -> None:
        if not process.running:
            return
        self._touched[id(process)] = process
        process.send(signal.SIGSTOP)
        try:
            self._stop.wait(seconds)
        finally:
            process.send(signal.SIGCONT)
        self.events += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for process in self._touched.values():
            process.send(signal.SIGCONT)


class Staller(_Looper):
    def __init__(self, process: Signallable, stall: float, gap: float) -> None:
        super().__init__()
        self._spawn(lambda: self._loop(process, stall, gap))

    def _loop(self, process: Signallable, stall: float, gap: float) -> None:
        while not self._stop.wait(gap):
            self._pause(process, stall)


class Jitter(_Looper):
    def __init__(self, processes: Sequence[Signallable], fraction: float, mean_burst: float, seed: int) -> None:
        super().__init__()
        mean_gap = mean_burst * (1 - fraction) / fraction
        for index, process in enumerate(processes):
            rng = random.Random(seed + index)
            self._spawn(lambda process=process, rng=rng: self._loop(process, rng, mean_gap, mean_burst))  # type: ignore[misc]

    def _loop(self, process: Signallable, rng: random.Random, mean_gap: float, mean_burst: float) -> None:
        while not self._stop.wait(rng.expovariate(1 / mean_gap)):
            self._pause(process, rng.expovariate(1 / mean_burst))


def pin(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` to ``cpu`` (affinity is per thread on Linux)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task), {cpu})


class CpuHog:
    """A busy loop on ``cpu``; ``stop()`` kills it."""

    def __init__(self, cpu: int) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        pin(self.process.pid, cpu)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
