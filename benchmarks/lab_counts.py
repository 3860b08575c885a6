"""What the accuracy benchmark's lab runs count: CPU per process, the loss applied, silo exits, and the
silos' false deaths, votes and a killed silo's Dead row from their recorded history.

Kept apart from the runs themselves (``benchmarks.accuracy_network``) because these read records
after the fact: ``/proc``, the iptables rule counters, the table and the history files.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from membership_tables import MembershipTableError, SiloAddress, SiloStatus
from membership_tables.history import HistoryRecord
from silo.exit_codes import ExitCode
from testbed.net_cluster import NetCluster
from testbed.netfaults import Host, iptables_backend
from testbed.netfaults.lab import LOSS_CHAIN


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``; psutil is not installed)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


class CpuMeter:
    """Each process's CPU use over the span it was sampled, grouped by kind (silo, member, server)."""

    def __init__(self) -> None:
        self._spans: dict[tuple[str, int], list[float]] = {}

    def sample(self, kind: str, pids: Iterable[int]) -> None:
        now = time.monotonic()
        for pid in pids:
            used = cpu_seconds(pid)
            if used is not None:
                span = self._spans.setdefault((kind, pid), [now, used, now, used])
                span[2], span[3] = now, used

    def percent(self, kind: str) -> dict[str, float]:
        """Mean and max % of one core over the processes of ``kind`` sampled for at least a second."""
        values = [
            100.0 * (span[3] - span[1]) / (span[2] - span[0])
            for (k, _), span in self._spans.items()
            if k == kind and span[2] - span[0] >= 1.0
        ]
        if not values:
            return {"processes": 0, "mean": math.nan, "max": math.nan}
        return {"processes": len(values), "mean": sum(values) / len(values), "max": max(values)}


_COUNTER_RE = re.compile(r"^\[(\d+):\d+\] -A (\S+) (.*)$")


def loss_counters(hosts: Sequence[Host]) -> tuple[int, int]:
    """Packets that entered the loss chain and packets it dropped, summed over ``hosts``.

    Read from the rule counters (``iptables-save -c``), so the loss actually applied is measured,
    not assumed. The DROP rule is replaced by every ``set_loss``, so its count starts at loss-on;
    the INPUT jump's count is cumulative, so the caller subtracts its loss-on reading.
    """
    save = f"{iptables_backend()}-save"
    entered = dropped = 0
    for host in hosts:
        for line in host.run([save, "-c"], timeout=30).stdout.splitlines():
            match = _COUNTER_RE.match(line)
            if match is None:
                continue
            chain, rule = match.group(2), match.group(3)
            if chain == "INPUT" and rule.endswith(f"-j {LOSS_CHAIN}"):
                entered += int(match.group(1))
            elif chain == LOSS_CHAIN and rule.endswith("-j DROP"):
                dropped += int(match.group(1))
    return entered, dropped


def exit_name(code: int | None) -> str:
    """A silo's exit code by name (``DECLARED_DEAD``, ``JOIN_FAILED``...), so the JSON says why it stopped."""
    if code is None:
        return "running"
    if code < 0:
        return f"signal {-code}"
    with contextlib.suppress(ValueError):
        return ExitCode(code).name
    return f"exit {code}"


def poll_net(cluster: NetCluster, votes: set[tuple[str, str, float]], declared: set[str]) -> int | None:
    """One table read into ``votes``/``declared`` (as ``poll``); the number of Dead rows, None if unreadable."""
    try:
        data = cluster.read()
    except MembershipTableError:
        return None
    for entry in data.entries:
        for voter, when in entry.suspect_times:
            votes.add((str(entry.silo_address), str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD:
            declared.add(str(entry.silo_address))
    return sum(entry.status is SiloStatus.DEAD for entry in data.entries)


def history_counts(records: Sequence[HistoryRecord], cut: float, killed: Mapping[str, float]) -> dict[str, Any]:
    """False deaths and votes from every silo's recorded writes up to wall time ``cut``.

    A Dead row written by anyone but the silo itself is a declaration (the silos' own Dead rows
    are graceful leaves or abandoned joins). A new generation on the same endpoint declaring
    its predecessor dead is counted apart: that is the restart, not the failure detector.
    ``killed`` maps the address of each silo killed on purpose to the wall time of its kill:
    its Dead row and the votes against it from then on are the detection, and are left out.
    """
    votes: set[tuple[str, str, float]] = set()
    declared: dict[str, str] = {}
    successor = 0
    for record in records:
        at = record.recorded_at.timestamp()
        entry = record.entry
        target = str(entry.silo_address)
        if at > cut or at >= killed.get(target, math.inf):
            continue
        for voter, when in entry.suspect_times:
            votes.add((target, str(voter), when.timestamp()))
        if entry.status is SiloStatus.DEAD and record.writer != target:
            if SiloAddress.parse(record.writer).endpoint == entry.silo_address.endpoint:
                successor += 1
            else:
                declared.setdefault(target, record.writer)
    return {
        "records": len(records),
        "declared": declared,
        "votes": len(votes),
        "voters": len({voter for _, voter, _ in votes}),
        "successor_declarations": successor,
    }


def declared_dead_after(records: Iterable[HistoryRecord], address: str, since: float) -> float | None:
    """Seconds from wall time ``since`` to the first Dead row for silo ``address`` written by another silo."""
    times = [
        record.recorded_at.timestamp()
        for record in records
        if str(record.entry.silo_address) == address
        and record.entry.status is SiloStatus.DEAD
        and record.writer != address
        and record.recorded_at.timestamp() >= since
    ]
    return min(times) - since if times else None
