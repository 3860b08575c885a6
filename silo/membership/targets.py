"""Whom a silo probes: its successors on the probe rings, and the suspects it watches; and at
which phase of the probe grid (``RingTargets``).

Targets are this silo's successors on the hash rings of the Active silos, plus every silo
that has a fresh vote against it or a stale heartbeat (so suspicions are confirmed or cleared
by more than one prober; in a large view only the suspects we are a watcher of:
``SuspectWatchers``). A silo still joining probes only those suspects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from membership_tables import MembershipEntry, SiloAddress, SiloStatus
from silo.membership.liveness import LivenessTracker
from silo.membership.options import SiloOptions
from silo.membership.ring import RingIndex, ring_index, successors_on_rings
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.votes import fresh_votes


def ring_targets(snapshot: MembershipSnapshot, local: SiloAddress, options: SiloOptions) -> list[SiloAddress]:
    """Our successors on the probe rings of the Active silos, once we are Active ourselves."""
    if snapshot.status_of(local) is not SiloStatus.ACTIVE:
        return []
    return successors_on_rings(snapshot.ring_index, local, options.num_probed_silos)


PROBE_PHASES = 2
"""Phases of the probe grid a silo's ring targets are spread over, when each can hold a quorum.

On one grid, a target's first-ranked monitors (the ones that vote at once) all last heard it at
the same instant, so a hang is declared ``floor - U(0, interval)`` after it. With two phases half
an interval apart, each with a quorum of first-ranked monitors, the phase whose last answer is
the older one (by half an interval to a whole one) completes the quorum: ``floor - U(interval /
2, interval)``, a quarter of an interval sooner on average; the other phase's voters find the
death gossiped half an interval later. Each phase is one more wake-up per interval for every
silo of the machine; four phases would win only an eighth of an interval more."""


def monitors_in_rank_order(
    target: SiloAddress, silos: tuple[SiloAddress, ...] | RingIndex, rings: int
) -> list[SiloAddress]:
    """``target``'s monitors that every silo ranks alike: its predecessor on ring 0, on ring 1, ...
    up to ``rings`` (each probes it: ``ring.probe_targets``), each at its first ring; and when
    every silo probes every other one (``rings`` is all the others), the rest in ring 0's
    reverse order. A silo that probes ``target`` only because its own successor on a ring was
    taken already is not listed (under ring sampling)."""
    index = silos if isinstance(silos, RingIndex) else ring_index(silos)
    ranked = list(dict.fromkeys(next(index.preceding(target, ring)) for ring in range(rings)))
    if rings >= len(index) - 1:
        ranked += [silo for silo in index.preceding(target) if silo not in ranked]
    return ranked


@dataclass(frozen=True)
class RingTargets:
    """Our ring targets at one table version, with our rank among each one's monitors
    (``monitors_in_rank_order``), which sets how long our votes against it wait (``first_ranks``)
    and at which phase of the probe grid we probe it (``phase``)."""

    version: int | None
    targets: list[SiloAddress]
    ranks: dict[SiloAddress, int]
    phases: int
    """``PROBE_PHASES`` if we probe on a grid (``align_probes``) and have a quorum
    (``num_votes_for_death_declaration``) of targets for each phase, else 1 (Orleans' timings at
    scale: 3 targets, a quorum of 2, one grid)."""
    quorum: int

    @classmethod
    def of(cls, snapshot: MembershipSnapshot, local: SiloAddress, options: SiloOptions) -> RingTargets:
        targets = ring_targets(snapshot, local, options)
        ranks = {}
        for target in targets:
            ranked = monitors_in_rank_order(target, snapshot.ring_index, len(targets))
            ranks[target] = ranked.index(local) if local in ranked else len(ranked)
        quorum = options.num_votes_for_death_declaration
        phases = PROBE_PHASES if options.align_probes and len(targets) >= PROBE_PHASES * quorum else 1
        return cls(snapshot.version, targets, ranks, phases, quorum)

    @property
    def first_ranks(self) -> int:
        """Ranks whose monitors vote at once: a quorum per grid phase."""
        return self.quorum * self.phases

    def phase(self, target: SiloAddress) -> float:
        """The fraction of the probe interval after the grid's instants at which we probe
        ``target`` (``clock.until_next_probe``): the first quorum of ranks at 0, the next at 1/2,
        and so on in turn, so each phase has a quorum of the target's first-ranked monitors.
        0 for a suspect off our ring."""
        rank = self.ranks.get(target)
        return 0.0 if rank is None else (rank // self.quorum % self.phases) / self.phases


def select_targets(
    snapshot: MembershipSnapshot,
    local: SiloAddress,
    now: datetime,
    options: SiloOptions,
    is_fresh: Callable[[SiloAddress], bool],
    ring: list[SiloAddress] | None = None,
    watches: Callable[[SiloAddress], bool] | None = None,
    candidates: Iterable[MembershipEntry] | None = None,
) -> list[SiloAddress]:
    """Ring successors (only once we are Active; ``ring_targets``, unless given) followed by
    suspected or stale silos: all of them, or only those ``watches`` accepts (a large view:
    see ``SuspectWatchers``). The suspects are looked for among ``candidates`` if given (rows
    that may be suspects: ``SuspectCandidates``), else among every row."""
    if snapshot.status_of(local) not in (SiloStatus.JOINING, SiloStatus.ACTIVE):
        return []
    if ring is None:
        ring = ring_targets(snapshot, local, options)
    expiration = options.death_vote_expiration
    suspects = [  # cheap tests first: they run for every row of every view
        entry.silo_address
        for entry in (snapshot.entries if candidates is None else candidates)
        if (
            not is_fresh(entry.silo_address)
            or (entry.suspect_times and fresh_votes(entry.suspect_times, now, expiration))
        )
        and entry.status is not SiloStatus.DEAD
        and entry.silo_address != local
        and entry.silo_address not in ring
        and (watches is None or watches(entry.silo_address))
    ]
    return ring + suspects


class SuspectCandidates:
    """The rows of a view that may be suspects (``select_targets``): the stale ones and the ones
    with votes in them, kept until a row that was fresh could turn stale.

    Probe targets are selected again every probe interval, because rows go stale with time and
    not only with a new view: a test of every row each time was a quarter of a silo host's event
    loop at 2,000 silos (400 rows a second per silo, against 22 for its full reads). A row that
    was fresh, without votes, stays so until its heartbeat's freshness runs out: the whole view
    is tested again after a full read of ours (``LivenessTracker.reads_observed``: a read can drop
    a watch or move them all), for a view of another origin (``MembershipSnapshot.lineage``), or
    once the first of those freshness limits passes. A later view of the same origin has only
    its written rows tested (in a 2,000-silo join every view was new, and testing each whole
    was an eighth of a host's samples). The rows kept are a superset: ``select_targets`` tests
    each of them again."""

    def __init__(self, liveness: LivenessTracker, monotonic: Callable[[], float]) -> None:
        self._liveness = liveness
        self._monotonic = monotonic
        self._snapshot: MembershipSnapshot | None = None
        self._reads_observed = -1
        self._valid_until = -math.inf
        self._entries: tuple[MembershipEntry, ...] = ()

    def of(self, snapshot: MembershipSnapshot) -> tuple[MembershipEntry, ...]:
        """Rows of ``snapshot`` that are stale or voted against now, possibly with some that are not."""
        now = self._monotonic()
        reads = self._liveness.reads_observed
        last = self._snapshot
        if last is not None and reads == self._reads_observed and now < self._valid_until:
            if snapshot is last:
                return self._entries
            changed = self._rows_written_since(last, snapshot)
        else:
            changed = None
        if changed is None:  # the whole view
            rows, kept, valid_until = snapshot.entries, [], math.inf
        else:  # its written rows, the others' results kept
            rows = tuple(entry for silo in changed if (entry := snapshot.entry(silo)) is not None)
            kept = [entry for entry in self._entries if entry.silo_address not in changed]
            valid_until = self._valid_until
        until = self._liveness.stays_fresh_until()
        found = []
        for entry in rows:
            fresh_until = until(entry.silo_address)
            if entry.suspect_times or fresh_until < now:
                found.append(entry)
            elif fresh_until < valid_until:
                valid_until = fresh_until
        entries = found if changed is None else sorted(kept + found, key=_address_order)
        self._snapshot, self._reads_observed = snapshot, reads
        self._valid_until, self._entries = valid_until, tuple(entries)
        return self._entries

    @staticmethod
    def _rows_written_since(last: MembershipSnapshot, snapshot: MembershipSnapshot) -> frozenset[SiloAddress] | None:
        """The rows that may differ between two views of one origin (written since it in either:
        both may be built from it on different paths), while fewer than half of the view's; else None."""
        changed = snapshot.lineage.written_since(last.lineage)
        return changed if changed is not None and 2 * len(changed) < len(snapshot.entries) else None


def _address_order(entry: MembershipEntry) -> tuple[str, int, int]:
    return entry.silo_address.sort_key


class SuspectWatchers:
    """Who probes a suspected or stale silo beyond its ring probers, in a large view.

    In a small cluster every silo does (more than one prober confirms or clears a suspicion
    soon). In a large one that made one death cost the whole cluster: at 1,000 silos, the
    first vote against a killed silo made all 1,000 probe it, each miss its probes, check its
    majority (64 pings) and try to vote (a read of 1,000 rows): the machine never got to the
    Dead write. There the watchers of a suspect are the ``num_probed_silos`` fresh Active silos
    just before it on ring 0 (every silo computes the same ones from the same view), on top of
    its ring probers: a suspicion is still confirmed or cleared by several probers, and a stale
    silo off the ring (one stuck Joining) still has some. A silo still joining is on no ring
    and watches none there.
    """

    def __init__(self, local: SiloAddress, count: int, is_fresh: Callable[[SiloAddress], bool]) -> None:
        self._local = local
        self._count = count
        self._is_fresh = is_fresh

    def for_view(self, snapshot: MembershipSnapshot) -> Callable[[SiloAddress], bool] | None:
        """Whether we watch a given suspect of ``snapshot``; None (every silo does) in a small view."""
        if not snapshot.large:
            return None

        def counted(silo: SiloAddress) -> bool:
            return silo == self._local or self._is_fresh(silo)

        def watches(suspect: SiloAddress) -> bool:
            preceding = snapshot.ring_index.preceding(suspect)
            return self._local in itertools.islice(filter(counted, preceding), self._count)

        return watches
