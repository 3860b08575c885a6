"""Which peers are fresh: judged by our own monotonic clock, never by another host's wall clock.

A peer is *fresh* while its IAmAlive value changed, in the snapshots we read, within
``freshness_limit(options)`` seconds of our monotonic time. Comparing our wall clock with
the time another host wrote would mark live silos stale whenever the two clocks disagree
by more than the margin, and would shrink the quorum on ordinary jitter.

Heartbeats do not move the table version, so we see them only on *full* reads; the periodic
refresh reads in full every ``full_refresh_every`` periods (``options.full_refresh_interval``,
G) and reads only the version in between. The limit is the staleness limit
(``num_missed_table_i_am_alive_limit`` heartbeats) plus G: a live peer's new heartbeat reaches
us at most one full-read interval after it was written, so a less frequent full read never
makes a live peer stale. A crashed peer goes stale at most ``stale_after + 2 G`` after its
last heartbeat (seen up to G late, then the limit).

We can only watch while we read the table. Time during which we could not (a gap between
our successful full reads longer than G: a table outage, our own process paused or starved, a
silo of a large view still joining) does not count, neither while the gap lasts (freshness is
judged at the end of the last interval we watched, ``_watched_until``) nor after it (the read
that ends it moves every watch forward by the blind part). Peers' heartbeats may have lapsed for
the same reason (the table was down for them too), so an outage never shrinks the quorum or the
majority count by itself. (The table manager reads in full every period for G after a failed
call, so a peer's first heartbeat after the outage is seen within one period.) While the gap
lasts nobody turns stale in our eyes: in a 2,000-silo storm on two cores, silos whose full reads
had stopped for minutes found every peer stale, and in a large view each of them then watched
every Active silo as a suspect (``SuspectWatchers`` counts only fresh silos before a suspect),
900 monitors each, probing the whole cluster from the loops that were already starved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from membership_tables import MembershipEntry, SiloAddress, SiloStatus
from silo.membership.options import SiloOptions
from silo.membership.snapshot import MembershipSnapshot


def freshness_limit(options: SiloOptions) -> float:
    """Seconds without a visible new heartbeat after which a peer is stale."""
    return options.stale_after + options.full_refresh_interval


@dataclass
class _Watch:
    i_am_alive: datetime
    changed_at: float
    """Our monotonic time when we first saw this IAmAlive value."""
    first_seen: float
    """Our monotonic time when we first saw the silo at all."""
    moved: bool = False
    """Whether we ever saw its IAmAlive change (proof that it heartbeats)."""


def _seen(watch: _Watch | None, entry: MembershipEntry, now: float) -> _Watch:
    """``watch`` (a new one if None) after seeing ``entry`` at ``now``: a newer IAmAlive counts as changed now."""
    if watch is None:
        return _Watch(entry.i_am_alive_time, now, now)
    if entry.i_am_alive_time > watch.i_am_alive:
        watch.i_am_alive, watch.changed_at, watch.moved = entry.i_am_alive_time, now, True
    return watch


class LivenessTracker:
    """Fed every snapshot this silo reads; answers "is that peer fresh?" on the local clock."""

    def __init__(self, options: SiloOptions, monotonic: Callable[[], float]) -> None:
        self._limit = freshness_limit(options)
        self._normal_gap = options.full_refresh_interval
        self._monotonic = monotonic
        self._watches: dict[SiloAddress, _Watch] = {}
        self._last_observed: float | None = None
        self.reads_observed = 0
        """Full reads taken in (``observe``): each may drop watches and move every one (a blind gap).
        Between two, watches only turn fresher (``learn``), so a peer fresh until some time stays
        fresh until then at least (``stays_fresh_until``)."""

    @property
    def limit(self) -> float:
        return self._limit

    def observe(self, snapshot: MembershipSnapshot) -> None:
        """Record the heartbeats of a snapshot just read from the table (or a newer one)."""
        now = self._monotonic()
        if self._last_observed is not None:
            blind = now - self._last_observed - self._normal_gap
            if blind > 0:  # we could not watch: that time does not count against anyone
                for paused in self._watches.values():
                    paused.changed_at = min(now, paused.changed_at + blind)
                    paused.first_seen = min(now, paused.first_seen + blind)
        self._last_observed = now
        self.reads_observed += 1
        # rebuilt rather than updated in place: rows gone from the read are dropped, and the
        # keys are the read's own address objects, which the view's lookups then find by
        # identity (an equal address of an older read costs a Python-level ``__eq__`` per lookup)
        watches, self._watches = self._watches, {}
        for entry in snapshot.entries:
            self._watches[entry.silo_address] = _seen(watches.get(entry.silo_address), entry, now)

    def learn(self, entries: Iterable[MembershipEntry]) -> None:
        """Record rows that are not a full read of the table: learned from a peer (delta gossip,
        a peer's view) or read one by one (a joiner re-reading the silos it has not reached).

        A silo seen for the first time starts being watched, and a newer IAmAlive counts as
        changed now. That is never later than a table read of ours would have seen it (a peer's
        row cannot be newer than the table), so learning never keeps a silo fresh longer than
        reading would. It does not end a blind gap (only our own full reads do) and drops no
        watch (a row missing from a peer's view may just be one that peer has not seen yet).
        """
        now = self._monotonic()
        for entry in entries:
            self._watches[entry.silo_address] = _seen(self._watches.get(entry.silo_address), entry, now)

    def silent_for(self, silo: SiloAddress) -> float | None:
        """Seconds since ``silo``'s heartbeat last changed in our reads (None if never seen)."""
        watch = self._watches.get(silo)
        return None if watch is None else self._monotonic() - watch.changed_at

    def seen_heartbeating(self, silo: SiloAddress, within: float) -> bool | None:
        """True if ``silo``'s heartbeat moved while we watched; False if we watched it for
        ``within`` seconds without a move; None if we cannot tell yet."""
        watch = self._watches.get(silo)
        if watch is None:
            return None
        if watch.moved:
            return True
        return False if self._monotonic() - watch.first_seen >= within else None

    def _watch_ends(self) -> float:
        """One full-read interval after our last full read (infinity before the first): past it,
        the time until the next read is blind."""
        last = self._last_observed
        return math.inf if last is None else last + self._normal_gap

    def _watched_until(self, now: float) -> float:
        """The time as far as we watched: ``now``, or ``_watch_ends`` once that is past (the rest
        of the gap is blind until a read ends it)."""
        return min(now, self._watch_ends())

    def is_fresh(self, silo: SiloAddress) -> bool:
        watch = self._watches.get(silo)  # silent_for, inlined: asked for every row of every view
        return watch is not None and self._watched_until(self._monotonic()) - watch.changed_at <= self._limit

    def fresh_now(self) -> Callable[[SiloAddress], bool]:
        """``is_fresh`` as of now, our clock read once: for a pass over a whole view (a silo of a
        large cluster re-selects its probe targets every probe interval, a test per row; reading
        the clock for each was a third of that pass in a 1,000-silo cluster)."""
        cutoff = self._watched_until(self._monotonic()) - self._limit
        watches = self._watches

        def fresh(silo: SiloAddress) -> bool:
            watch = watches.get(silo)
            return watch is not None and watch.changed_at >= cutoff

        return fresh

    def stays_fresh_until(self) -> Callable[[SiloAddress], float]:
        """For a pass over a whole view: the monotonic time until which a silo is fresh at least
        (minus infinity for one never seen, infinity for one fresh when our watch stops short of a
        full read: ``_watched_until``). Fresh now means now is at most that time; later reads and
        learned rows can only move it later, until the next ``observe``."""
        watches, limit, watch_ends = self._watches, self._limit, self._watch_ends()

        def until(silo: SiloAddress) -> float:
            watch = watches.get(silo)
            if watch is None:
                return -math.inf
            fresh_until = watch.changed_at + limit
            return math.inf if fresh_until >= watch_ends else fresh_until

        return until

    def fresh(self, snapshot: MembershipSnapshot, *statuses: SiloStatus) -> tuple[SiloAddress, ...]:
        """The silos of ``snapshot`` with one of ``statuses`` (default Active) that are fresh."""
        wanted = statuses or (SiloStatus.ACTIVE,)
        is_fresh = self.fresh_now()
        return tuple(entry.silo_address for entry in snapshot.with_status(*wanted) if is_fresh(entry.silo_address))
