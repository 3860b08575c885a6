"""The cluster health monitor: decides whom this silo probes, and whether it may vote.

Targets (``silo.membership.targets``): this silo's successors on the hash rings of the
Active silos, plus the suspects it watches. It keeps one ``SiloHealthMonitor`` per target,
creating and stopping them as the targets change.

It also applies the **majority rule** (``votes.may_vote``) for its monitors: this silo may
vote only while it, plus the monitored silos it hears, is a strict majority of itself plus
the monitored silos that are fresh. On the minority side of a partition a silo hears too
few of the silos that (still heartbeating into the table) are evidently alive elsewhere,
so it never votes against the majority; it re-reads the table every ``probe_timeout``
instead, to find its verdict without waiting for the periodic refresh.

With ring sampling (more fresh Active silos than the ones we monitor) our sample can, by
chance, sit mostly on our side of a cut, so before a vote ``reaches_majority`` applies the same
rule to **every** fresh Active silo (``silo.membership.majority``). A majority silo whose sample
sits wholly across the cut hears none of it: under ring sampling the rule over our monitors does
not stop a vote (``may_try_vote``), the global check decides. A heal is not evidence
(``MajorityHistory``): the silos not yet reconnected must be silent for a whole suspicion time
after the heal, with an indirect round started after it, before we vote.
"""

from __future__ import annotations

import asyncio
import logging
import random as random_module
from collections.abc import Callable
from typing import Any

from membership_tables import SiloAddress
from silo.membership.clock import Clock, Periodic
from silo.membership.gossiper import gossip_peers
from silo.membership.liveness import LivenessTracker
from silo.membership.local_health import LocalHealth
from silo.membership.majority import MajorityCheck, MajorityHistory
from silo.membership.options import SiloOptions
from silo.membership.probing import Prober
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot, SnapshotPublisher
from silo.membership.targets import RingTargets, SuspectCandidates, SuspectWatchers, select_targets
from silo.membership.votes import fresh_votes, may_vote

logger = logging.getLogger(__name__)

VOTE_STAGGER_STEP = 0.1
"""Share of ``probe_timeout`` by which each rank of monitors past the quorum holds its vote
(``ClusterHealthMonitor.vote_delay``): 50 ms in the local preset, 0.5 s in production."""
VOTE_STAGGER_RANKS = 5
"""Ranks past the quorum that hold their votes longer, one step each; later ranks, and silos that
probe a suspect off their ring (suspect watchers), hold theirs as long as the last of them."""

CreateMonitor = Callable[[SiloAddress, "ClusterHealthMonitor"], SiloHealthMonitor]


def keeps_watching(
    monitor: SiloHealthMonitor,
    ring: RingTargets,
    snapshot: MembershipSnapshot,
    watches: Callable[[SiloAddress], bool] | None,
) -> bool:
    """Whether ``monitor``, no longer among our targets, goes on: a suspect off our ``ring`` that
    never answered it stays watched after its votes expire, while it is a member (not Dead, not
    gone) and we are still among its watchers (``watches``, ``SuspectWatchers``, a large view:
    there the watchers move as silos join, and a stuck joiner kept every silo that was ever its
    watcher, and their probes, in a join storm).

    Our vote needs our own silence, and a silo whose local health stretches its suspicion
    time past the vote expiry (``death_vote_expiration``) lost that silence with the votes
    that made it watch, then started again at the next one: with each monitor's vote fresh
    for less than the others' cadence, two seldom met, and a cut-off silo stayed Active (a
    4|3 cut of 7 with ring sampling: 20 s on a fake clock, past a test's 30 s on loaded
    cores). An answer ends the watch, as an answer clears the silence on our ring."""
    suspect = monitor.target
    if suspect in ring.ranks or monitor.answered or not snapshot.is_member(suspect):
        return False
    return watches is None or watches(suspect)


class ClusterHealthMonitor:
    """Keeps one silo health monitor per current probe target; judges the majority rule."""

    def __init__(
        self,
        *,
        local: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        publisher: SnapshotPublisher,
        liveness: LivenessTracker,
        create_monitor: CreateMonitor,
        local_health: LocalHealth,
        prober: Prober,
        on_minority: Callable[[], None] = lambda: None,
        random: random_module.Random | None = None,
    ) -> None:
        self._local = local
        self._options = options
        self._clock = clock
        self._publisher = publisher
        self._liveness = liveness
        self._create_monitor = create_monitor
        self._health = local_health
        self._on_minority = on_minority
        self._random = random or random_module.Random()
        self._majority_history = MajorityHistory()
        self.monitors: dict[SiloAddress, SiloHealthMonitor] = {}
        self._majority = MajorityCheck(
            local=local,
            options=options,
            clock=clock,
            publisher=publisher,
            liveness=liveness,
            prober=prober,
            local_health=local_health,
            random=self._random,
            monitors=self.monitors,
            arc_heads=self._arc_heads,
            observe=self._observe_majority,
        )
        self._ring = RingTargets(None, [], {}, 1, options.num_votes_for_death_declaration)
        """Our ring targets at the latest table version, and our rank among each one's monitors."""
        self._ring_probed = False
        """Whether our monitors have had targets: later ring targets start at a random point
        (``_first_probe_delay``)."""
        self._watchers = SuspectWatchers(local, options.num_probed_silos, liveness.is_fresh)
        self._candidates = SuspectCandidates(liveness, clock.monotonic)
        self._heads: tuple[int | None, frozenset[SiloAddress]] = (None, frozenset())
        """(table version, our gossip arc heads at it): see ``_arc_heads``."""
        self._task: asyncio.Task[None] | None = None
        self._side_watch: Periodic | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._side_watch = Periodic(self._clock, self._options.probe_timeout, self._watch_side)
        self._side_watch.start()

    async def _run(self) -> None:
        """``update`` on each new view; in a large cluster (``LARGE_VIEW``) at most once per probe
        interval, on the latest view then (the subscription skips the ones in between). Monitors
        probe once per interval anyway, and a changed ring, a vote against another silo or a
        stale row is acted on at most one interval later; ``update`` is O(N), and at 1,000
        silos each of them ran it for every change gossiped to it."""
        async for snapshot in self._publisher.subscribe(include_refreshes=True):
            await self.update(snapshot)
            if snapshot.large:
                await self._clock.sleep(self._options.effective_probe_interval)

    async def update(self, snapshot: MembershipSnapshot) -> None:
        """Start monitors for new targets and stop the ones no longer targeted.

        Runs on every refresh too (a silo may have gone stale), but the ring part changes only
        with the table version: it is computed once per version (3 x N hashes and comparisons,
        which at 500 silos was a sixth of an overloaded host's time)."""
        if self._ring.version != snapshot.version:
            self._ring = RingTargets.of(snapshot, self._local, self._options)
        watches = self._watchers.for_view(snapshot)
        targets = select_targets(
            snapshot,
            self._local,
            self._clock.now(),
            self._options,
            self._liveness.fresh_now(),
            self._ring.targets,
            watches,
            self._candidates.of(snapshot),
        )
        for gone in [
            silo
            for silo, monitor in self.monitors.items()
            if silo not in targets and not keeps_watching(monitor, self._ring, snapshot, watches)
        ]:
            await self.monitors.pop(gone).stop()
            self._health.forget(gone)
        for target in targets:
            if target not in self.monitors:
                monitor = self._create_monitor(target, self)
                self.monitors[target] = monitor
                monitor.start(first_probe_after=self._first_probe_delay(target))
            self.monitors[target].phase = self._ring.phase(target)
        if targets:
            self._ring_probed = True
            logger.debug("silo %s probes %s", self._local, ", ".join(map(str, targets)))

    def may_vote(self) -> bool:
        """The majority rule over the monitored silos that are fresh (``votes.may_vote``).

        Without ring sampling it is the rule in force, so its verdicts also feed the heal
        detection (``MajorityHistory``): a monitor re-checks its evidence after asking."""
        fresh = self._fresh_monitors()
        heard = sum(1 for monitor in fresh if monitor.heard_recently())
        allowed = may_vote(heard, len(fresh))
        if not self._sampling():
            self._observe_majority(allowed, heard, len(fresh))
        return allowed

    def _observe_majority(self, allowed: bool, heard: int, fresh: int) -> bool:
        """Feed the rule's verdict to ``MajorityHistory``; on a heal, make every monitor disregard
        the silence measured until now. True on a heal."""
        if not self._majority_history.observe(allowed, heard):
            return False
        now = self._clock.monotonic()
        for monitor in self.monitors.values():
            monitor.disregard_silence_before(now)
        logger.info(
            "silo %s hears %d of the %d other fresh silos again, a majority: the silences before now were the cut's, "
            "so it votes only on silence from now on",
            self._local, heard, fresh,
        )  # fmt: skip
        return True

    def vote_delay(self, target: SiloAddress) -> float:
        """How long a monitor of ``target`` holds a vote its evidence calls for, by our rank among
        the target's monitors (``targets.monitors_in_rank_order``): none among the first ranks (a
        quorum, ``num_votes_for_death_declaration``, per grid phase: ``RingTargets.first_ranks``),
        else one ``VOTE_STAGGER_STEP`` of ``probe_timeout`` per rank beyond them (at most
        ``VOTE_STAGGER_RANKS`` steps; a suspect off our ring: the most).

        All of a dead silo's monitors notice within one probe interval of each other. Voting
        together, each of them wrote (all but one of each round lost the race) and, without
        TLS, read the whole table first; with ring sampling each also pinged every silo it does
        not monitor. Every silo ranks a target's monitors alike, one rank each, so the first ranks
        of the grid phase that heard the target the longer ago complete the quorum at once
        (those of the other phase half an interval later, usually after the death's gossip), and
        the others find the death gossiped before their turn (their monitors stop, the held vote
        with them). When the first ranks cannot vote (on the target's side of a cut, or
        themselves dead), the death waits a few steps more: a delay, never a vote that would not
        otherwise be cast.
        """
        rank = self._ring.ranks.get(target)
        if rank is not None:
            steps = min(max(0, rank - self._ring.first_ranks + 1), VOTE_STAGGER_RANKS)
        else:
            steps = VOTE_STAGGER_RANKS
        return steps * VOTE_STAGGER_STEP * self._options.probe_timeout

    def vote_hold(self, target: SiloAddress) -> float:
        """How much longer a held vote (``vote_delay`` > 0) waits once its turn came, because
        others are gathering the quorum already: our rank's delay once more if our view holds
        another silo's fresh vote against ``target``, else none.

        Monitors notice a death up to a probe interval apart, so a backup's turn often comes
        after a first vote and before the vote that completes the quorum; voting then, each
        backup read the table (without TLS) and raced the completing vote, which one of them
        lost (N = 20, local preset: 2.75 reads per membership change). Held once more, the
        first ranks complete the quorum and the death's gossip stops our monitor; a backup
        ranked lower waits longer. When nobody completes it, the death waits one delay more
        (at most ``VOTE_STAGGER_RANKS`` steps), and a vote is never dropped."""
        delay = self.vote_delay(target)
        snapshot = self._publisher.current
        entry = snapshot.entry(target) if delay > 0 and snapshot is not None else None
        if entry is None:
            return 0.0
        votes = fresh_votes(entry.suspect_times, self._clock.now(), self._options.death_vote_expiration)
        return delay if any(voter != self._local for voter, _ in votes) else 0.0

    def _first_probe_delay(self, target: SiloAddress) -> float:
        """When a new monitor probes first. Of a suspect off our ring (one we watch:
        ``select_targets``): at its vote's turn (``vote_delay``). A vote makes every silo of a small
        cluster, and the suspect's watchers in a large one, watch the suspect; probing it at once,
        each opened a channel to it and, on the first refusal, a second one to recheck it: for a dead
        silo, several times the messages of the death's own gossip, just before it. Its ring
        monitors vote on their own evidence meanwhile, and the death usually stops ours before
        its first probe; if not, the silence we need starts a step later.

        A ring target new after our first ring (a silo died, left or joined) is probed first at a
        random point of one probe interval. Such a change gives a new target to several monitors
        at the instant its gossip arrives: each opened a ping stream (a call set up at both ends)
        in the middle of the change's own spread, on cores the 19 other receivers of N = 20
        needed. The target was monitored by others all along; ours starts within an interval."""
        if target not in self._ring.ranks:
            return self.vote_delay(target)
        if not self._ring_probed:
            return 0.0  # our first ring: nothing to catch up with
        return self._random.uniform(0.0, self._options.effective_probe_interval)

    def may_try_vote(self) -> bool:
        """Whether a monitor may go on to a vote: ``may_vote``, except under ring sampling.

        With ring sampling our sample can sit wholly on the other side of a cut from us: a
        majority silo that hears none of its two targets must still vote, so there the
        global rule of ``reaches_majority`` alone decides.
        """
        return self._sampling() or self.may_vote()

    async def reaches_majority(self) -> bool:
        """The majority rule over every fresh Active silo, for a vote (``silo.membership.majority``).

        Without ring sampling every fresh silo is monitored and this is ``may_vote``. Concurrent
        callers share one check; a confirmed majority holds for one probe interval.
        """
        if not self._sampling() and not self.may_vote():
            return False
        return await self._majority.reached()

    @property
    def majority_pings(self) -> int:
        """Pings sent by ``reaches_majority`` so far (its cost; the tests read it)."""
        return self._majority.pings

    def others_unheard(self, target: SiloAddress) -> bool:
        """Some fresh silo we monitor besides ``target`` has not answered within half the suspicion.

        Suspicions of several targets at once point to a cut rather than one failure
        (``MembershipTableManager.try_vote`` lets such a death settle under ring sampling).
        """
        return any(monitor.target != target and not monitor.heard_recently() for monitor in self._fresh_monitors())

    def _arc_heads(self, snapshot: MembershipSnapshot) -> frozenset[SiloAddress]:
        """Our gossip arc heads among the Active silos (``gossip_peers``), once per table version:
        a sort of the whole cluster, which every indirect round and majority check needs."""
        if self._heads[0] != snapshot.version:
            heads = gossip_peers(self._local, snapshot.active_silos, self._options.gossip_fanout)
            self._heads = (snapshot.version, frozenset(heads))
        return self._heads[1]

    def _sampling(self) -> bool:
        """Whether some fresh Active silo is not monitored by us (ring sampling)."""
        snapshot = self._publisher.current
        if snapshot is None:
            return False
        return any(silo != self._local and silo not in self.monitors for silo in self._liveness.fresh(snapshot))

    def _fresh_monitors(self) -> list[SiloHealthMonitor]:
        return [monitor for silo, monitor in self.monitors.items() if self._liveness.is_fresh(silo)]

    async def _watch_side(self) -> None:
        """On the minority side, look for our verdict in the table (``on_minority``).

        The majority's gossip cannot cross a partition. Judged on the plain detection time,
        not the one our local health lengthens: this only reads, it never votes. A monitor that
        has not had one detection time to get an answer is not judged yet: in a cluster whose
        ring changes (a join storm) new monitors must not make every silo re-read the whole
        table every probe timeout.
        """
        window = self._options.detection_time
        judged = [monitor for monitor in self._fresh_monitors() if monitor.answered or monitor.silence() >= window]
        heard = sum(1 for monitor in judged if monitor.heard_within(window))
        if judged and not may_vote(heard, len(judged)):
            self._on_minority()

    def intermediaries(self) -> list[SiloAddress]:
        """Fresh Active silos that we do not suspect ourselves: the ones worth asking for a veto.

        Those of them that are our gossip arc heads (``gossip_peers``) if there are more than
        ``num_indirect_probes`` such: our channels to them are open already, and they are found
        without going over the whole cluster. A silo of a large cluster otherwise opened a
        channel to each of its random intermediaries (and listed every fresh silo for each
        round): an overloaded cluster's suspicions, probes timed out, then opened hundreds a
        second.
        """
        snapshot = self._publisher.current
        if snapshot is None:
            return []

        def worth_asking(silo: SiloAddress) -> bool:
            return silo != self._local and not (silo in self.monitors and self.monitors[silo].suspected())

        kept = [silo for silo in self._arc_heads(snapshot) if self._liveness.is_fresh(silo) and worth_asking(silo)]
        if len(kept) > self._options.num_indirect_probes:
            return kept
        return [silo for silo in self._liveness.fresh(snapshot) if worth_asking(silo)]

    async def stop(self) -> None:
        """Cancel every task and monitor before the first await (``SiloHealthMonitor.cancel``)."""
        tasks: list[asyncio.Future[Any]] = [*self._majority.cancel()]
        if self._task is not None:
            self._task.cancel()
            tasks.append(self._task)
        for monitor in self.monitors.values():
            tasks += monitor.cancel()
        self.monitors.clear()
        if self._side_watch is not None:
            await self._side_watch.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
