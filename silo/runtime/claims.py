"""Serving claims: what each silo may serve, when, recorded so a test can prove one owner per key.

A silo serves a key at time ``t`` only when it is Active, its membership lease holds at ``t``,
its own takeover wait is over and it owns the key on its serving ring (the Active silos of its
view plus the dead ones whose takeover wait is still running). Every time one of these inputs
changes (a lease confirmation, a new ring, a status change), a silo started with
``--claims-file`` appends a ``ServingClaim``: from ``at`` until its next claim, and never past
``valid_until`` (its lease's end), nor before ``serving_from``, it may serve the keys it owns on
``ring``, the ghosts among them leaving the ring at their release times.

``check_claims`` takes every silo's claims and reports any moment at which two silos could both
serve some key. Times are ``time.monotonic()``: one clock for every process of a machine
(network namespaces share it), so claims of different silos compare directly.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from membership_tables import SiloAddress
from silo.hashing import ring_position
from silo.work.hashring import DEFAULT_VIRTUAL_NODES

__all__ = ["ClaimsFile", "ServingClaim", "check_claims", "load_claims"]


@dataclass(frozen=True)
class ServingClaim:
    """What ``silo`` may serve from ``at`` (monotonic seconds) until its next claim."""

    silo: str
    at: float
    ring: tuple[str, ...]
    """The serving ring: the Active silos of its view and the ghosts."""
    ghosts: Mapping[str, float] = field(default_factory=dict)
    """Dead silos still on the ring, each until its release (monotonic)."""
    serving_from: float = 0.0
    """Nothing is served before this (its own join's takeover wait)."""
    valid_until: float = 0.0
    """Nothing is served after this (its lease's end; ``at`` when it serves nothing)."""
    token: int = 0

    def to_json(self) -> str:
        document = {
            "silo": self.silo,
            "at": self.at,
            "ring": list(self.ring),
            "ghosts": dict(self.ghosts),
            "serving_from": self.serving_from,
            "valid_until": self.valid_until,
            "token": self.token,
        }
        return json.dumps(document, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ServingClaim:
        document = json.loads(text)
        return cls(
            silo=document["silo"],
            at=float(document["at"]),
            ring=tuple(document["ring"]),
            ghosts={str(key): float(value) for key, value in document["ghosts"].items()},
            serving_from=float(document["serving_from"]),
            valid_until=float(document["valid_until"]),
            token=int(document["token"]),
        )


class ClaimsFile:
    """Appends claims to a JSON-lines file, one line each, flushed at once (the process may be killed)."""

    def __init__(self, path: str | Path) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  # closed by close()
        self._lock = threading.Lock()

    def append(self, claim: ServingClaim) -> None:
        with self._lock:
            self._file.write(claim.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def load_claims(paths: Iterable[str | Path]) -> list[ServingClaim]:
    """Every claim of the given files (a file's cut-short last line, from a killed process, is skipped)."""
    claims: list[ServingClaim] = []
    for path in paths:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                claims.append(ServingClaim.from_json(line))
            except (ValueError, KeyError):
                if number == len(lines):
                    continue
                raise
    return claims


@dataclass(frozen=True)
class _Interval:
    silo: str
    start: float
    end: float
    ring: frozenset[str]


def _intervals(claims: Sequence[ServingClaim]) -> list[_Interval]:
    """Each silo's claims as intervals during which it may serve its keys on one fixed ring."""
    by_silo: dict[str, list[ServingClaim]] = defaultdict(list)
    for claim in claims:
        by_silo[claim.silo].append(claim)
    intervals: list[_Interval] = []
    for silo, own in by_silo.items():
        own.sort(key=lambda claim: claim.at)
        for index, claim in enumerate(own):
            following = own[index + 1].at if index + 1 < len(own) else float("inf")
            start, end = max(claim.at, claim.serving_from), min(claim.valid_until, following)
            if end <= start or silo not in claim.ring:
                continue
            cuts = sorted({start, end, *(until for until in claim.ghosts.values() if start < until < end)})
            for begin, finish in itertools.pairwise(cuts):
                ring = frozenset(s for s in claim.ring if s not in claim.ghosts or claim.ghosts[s] > begin)
                intervals.append(_Interval(silo, begin, finish, ring))
    return intervals


class _Rings:
    """Ring positions per silo, and the elementary arcs each silo owns on a ring (cached)."""

    def __init__(self, virtual_nodes: int) -> None:
        self._virtual_nodes = virtual_nodes
        self._positions: dict[str, list[int]] = {}
        self._rings: dict[frozenset[str], tuple[npt.NDArray[np.uint64], list[str]]] = {}

    def ring(self, silos: frozenset[str]) -> tuple[npt.NDArray[np.uint64], list[str]]:
        """The sorted positions of ``silos``' virtual nodes and the silo at each (ties by name)."""
        found = self._rings.get(silos)
        if found is None:
            nodes = sorted((position, silo) for silo in silos for position in self._silo_positions(silo))
            found = np.array([position for position, _ in nodes], dtype=np.uint64), [silo for _, silo in nodes]
            self._rings[silos] = found
        return found

    def _silo_positions(self, silo: str) -> list[int]:
        positions = self._positions.get(silo)
        if positions is None:
            address = SiloAddress.parse(silo)
            positions = self._positions[silo] = [ring_position(address, i) for i in range(self._virtual_nodes)]
        return positions

    def shared(self, first: str, first_ring: frozenset[str], second: str, second_ring: frozenset[str]) -> bool:
        """Whether a key exists that ``first`` owns on ``first_ring`` and ``second`` on ``second_ring``."""
        positions_1, owners_1 = self.ring(first_ring)
        positions_2, owners_2 = self.ring(second_ring)
        # Every arc between consecutive boundaries of either ring has one owner on each ring: the
        # silo of the first node at or after its end (wrapping past the last node to the first).
        ends = np.union1d(positions_1, positions_2)
        owner_1 = np.array(owners_1, dtype=object)[np.searchsorted(positions_1, ends) % len(positions_1)]
        owner_2 = np.array(owners_2, dtype=object)[np.searchsorted(positions_2, ends) % len(positions_2)]
        return bool(np.any((owner_1 == first) & (owner_2 == second)))


def check_claims(claims: Sequence[ServingClaim], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> list[str]:
    """Every moment two silos could both serve some key, described; empty when ownership never overlapped."""
    intervals = sorted(_intervals(claims), key=lambda interval: interval.start)
    rings = _Rings(virtual_nodes)
    verdicts: dict[tuple[str, frozenset[str], str, frozenset[str]], bool] = {}
    problems: list[str] = []
    open_intervals: list[_Interval] = []
    for interval in intervals:
        open_intervals = [other for other in open_intervals if other.end > interval.start]
        for other in open_intervals:
            if other.silo == interval.silo:
                continue
            key = (other.silo, other.ring, interval.silo, interval.ring)
            if key not in verdicts:
                verdicts[key] = rings.shared(other.silo, other.ring, interval.silo, interval.ring)
            if verdicts[key]:
                until = min(other.end, interval.end)
                problems.append(
                    f"{other.silo} and {interval.silo} could both serve some keys from {interval.start:.3f} to "
                    f"{until:.3f} (monotonic s): rings {sorted(other.ring)} and {sorted(interval.ring)}"
                )
        open_intervals.append(interval)
    return problems
