"""What ``silo demo`` found, and how it prints it: text for a person, or one JSON object.

The JSON object always has ``records_in``, ``records_out``, ``correct``, ``killed``,
``declared_dead_after_s``, ``rerouted`` and ``per_silo`` (silo address -> records it
processed); the other keys add detail (see ``DemoSummary.document``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus
from silo.cli.status import format_duration, render_text, status_document

__all__ = ["Death", "DemoSummary", "JobTotals"]


@dataclass(frozen=True)
class JobTotals:
    """What came back from the silos (``silo.spark.routing_summary`` of the job's output)."""

    records: int = 0
    checksum: int = 0
    per_silo: Mapping[str, int] = field(default_factory=dict)
    rerouted: int = 0
    via_sidecar: int = 0


@dataclass(frozen=True)
class Death:
    """The killed silo and how the cluster found out."""

    silo: SiloAddress
    killed_at: datetime
    progress: str
    """How far the job was when the silo was killed, e.g. ``"8/16 partitions done"``."""
    votes: tuple[tuple[SiloAddress, float], ...] = ()
    """Who voted it dead, and seconds after the kill, in vote order (empty if not declared dead)."""

    @classmethod
    def observe(cls, silo: SiloAddress, killed_at: datetime, progress: str, row: MembershipEntry | None) -> Death:
        """The death as the silo's row tells it: the declaring write carries every fresh vote."""
        votes: tuple[tuple[SiloAddress, float], ...] = ()
        if row is not None and row.status is SiloStatus.DEAD:
            ordered = sorted(row.suspect_times, key=lambda vote: vote[1])
            votes = tuple((voter, (when - killed_at).total_seconds()) for voter, when in ordered)
        return cls(silo, killed_at, progress, votes)

    @property
    def declared_after_s(self) -> float | None:
        """Seconds from the kill to the vote that declared it Dead (the last vote)."""
        return self.votes[-1][1] if self.votes else None

    @property
    def declared_by(self) -> SiloAddress | None:
        """The silo whose vote reached the quorum: it wrote Dead."""
        return self.votes[-1][0] if self.votes else None


@dataclass(frozen=True)
class DemoSummary:
    cluster: str
    table: str
    names: Mapping[SiloAddress, str]
    records_in: int
    keys: int
    partitions: int
    expected_checksum: int
    totals: JobTotals
    death: Death
    before: MembershipTableData
    before_at: datetime
    """When ``before`` was read: the status ages are relative to it."""
    after: MembershipTableData
    after_at: datetime
    elapsed_s: float

    @property
    def correct(self) -> bool:
        """Count and checksum equal to the same computation done without silos."""
        return self.totals.records == self.records_in and self.totals.checksum == self.expected_checksum

    def name(self, silo: SiloAddress | None) -> str:
        return "-" if silo is None else self.names.get(silo, str(silo))

    def document(self) -> dict[str, Any]:
        """The ``--json`` object."""
        after = self.death.declared_after_s
        return {
            "records_in": self.records_in,
            "records_out": self.totals.records,
            "correct": self.correct,
            "killed": str(self.death.silo),
            "declared_dead_after_s": None if after is None else round(after, 3),
            "rerouted": self.totals.rerouted,
            "per_silo": dict(self.totals.per_silo),
            "killed_name": self.name(self.death.silo),
            "killed_when": self.death.progress,
            "declared_dead_by": None if self.death.declared_by is None else str(self.death.declared_by),
            "votes": [{"by": str(voter), "after_s": round(seconds, 3)} for voter, seconds in self.death.votes],
            "names": {str(silo): name for silo, name in self.names.items()},
            "keys": self.keys,
            "partitions": self.partitions,
            "checksum_expected": f"{self.expected_checksum:016x}",
            "checksum_out": f"{self.totals.checksum:016x}",
            "cluster": self.cluster,
            "table": self.table,
            "elapsed_s": round(self.elapsed_s, 1),
            "status_before": status_document(self.cluster, self.before),
            "status_after": status_document(self.cluster, self.after),
        }

    def render_json(self) -> str:
        return json.dumps(self.document(), indent=2)

    def render(self) -> str:
        """The report for a person (status ages are relative to when each status was read)."""
        before = render_text(self.cluster, self.before, self.before_at)
        after = render_text(self.cluster, self.after, self.after_at)
        sections = [
            f"Cluster {self.cluster!r} before the job (silo status):\n" + _indent(before),
            self._job_section(),
            self._death_section(),
            "Cluster after the job (silo status):\n" + _indent(after),
            self._per_silo_section(),
            self._check_section(),
        ]
        return "\n\n".join(sections)

    def _job_section(self) -> str:
        return (
            f"Job: {self.records_in:,} records over {self.keys:,} keys in {self.partitions} Spark partitions, "
            "each record sent to the silo that owns its key (handler example.checksum)."
        )

    def _death_section(self) -> str:
        death = self.death
        killed = f"Killed {self.name(death.silo)} ({death.silo}) with SIGKILL when {death.progress}."
        if death.declared_after_s is None:
            return killed + "\nIt was not declared Dead before the demo stopped waiting."
        votes = ", ".join(f"{self.name(voter)} at +{format_duration(seconds)}" for voter, seconds in death.votes)
        return (
            f"{killed}\nDeclared Dead {format_duration(death.declared_after_s)} after the kill by "
            f"{self.name(death.declared_by)} ({death.declared_by}); votes: {votes}."
        )

    def _per_silo_section(self) -> str:
        total = max(self.totals.records, 1)
        rows = []
        for silo, name in sorted(self.names.items(), key=lambda item: item[1]):
            count = self.totals.per_silo.get(str(silo), 0)
            mark = "  (killed mid-job)" if silo == self.death.silo else ""
            rows.append(f"  {name:<10} {silo!s:<32} {count:>10,}  {100 * count / total:5.1f}%{mark}")
        rows.append(f"  {'total':<10} {'':<32} {self.totals.records:>10,}")
        rerouted = (
            f"Rerouted: {self.totals.rerouted:,} records went to another silo than their owner at the start "
            f"(keys of {self.name(self.death.silo)}, moved to their next owner on the ring)."
        )
        return "Records processed per silo:\n" + "\n".join(rows) + "\n" + rerouted

    def _check_section(self) -> str:
        count_ok = "ok" if self.totals.records == self.records_in else "MISMATCH"
        sum_ok = "ok" if self.totals.checksum == self.expected_checksum else "MISMATCH"
        verdict = (
            "CORRECT: every record processed exactly once in the output, none lost, none duplicated."
            if self.correct
            else "WRONG: the output differs from the computation without silos."
        )
        return (
            "Check against the same computation without silos:\n"
            f"  records   expected {self.records_in:>20,}   got {self.totals.records:>20,}   {count_ok}\n"
            f"  checksum  expected {self.expected_checksum:>20x}   got {self.totals.checksum:>20x}   {sum_ok}\n"
            f"{verdict} ({self.elapsed_s:.1f}s)"
        )


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
