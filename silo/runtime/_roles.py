"""The membership roles of one silo, built and wired to each other for ``Silo``.

The table manager is the only writer; the gossiper publishes its writes; the local health score,
the cluster health monitor (whom to probe) and one silo health monitor per target decide the
votes; the agent joins, heartbeats and leaves; the cleanup agent removes defunct rows.
"""

from __future__ import annotations

import functools
import random as random_module
from collections.abc import Callable

from membership_tables import MembershipTable, SiloAddress
from silo.membership.agent import MembershipAgent
from silo.membership.cleanup import CleanupAgent
from silo.membership.clock import Clock
from silo.membership.cluster_health import ClusterHealthMonitor
from silo.membership.gossiper import Gossiper
from silo.membership.local_health import LocalHealth
from silo.membership.observer import MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage, GossipSender, IndirectProbeResult, Prober, probe_for_peer
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import BlockingRunner
from silo.membership.table_manager import MembershipTableManager
from silo.membership.votes import VoteOutcome


class SiloRoles:
    """Every membership role of one silo; ``fenced`` says whether its lease ran out (no votes on silence then)."""

    def __init__(
        self,
        *,
        table: MembershipTable,
        address: SiloAddress,
        options: SiloOptions,
        prober: Prober,
        gossip: GossipSender,
        clock: Clock,
        random: random_module.Random,
        run_blocking: BlockingRunner,
        observer: MembershipObserver,
        trusted_gossip: bool,
        fenced: Callable[[], bool],
    ) -> None:
        self._address = address
        self._options = options
        self._clock = clock
        self._prober = prober
        self._random = random
        self._observer = observer
        self._fenced = fenced
        self.gossiper = Gossiper(
            address=address,
            options=options,
            clock=clock,
            sender=gossip,
            is_fresh=lambda silo: self.manager.liveness.is_fresh(silo),
        )
        self.manager = MembershipTableManager(
            table=table,
            address=address,
            options=options,
            clock=clock,
            random=random,
            run_blocking=run_blocking,
            on_write=self.gossiper.publish,
            fetch_view=gossip.fetch_membership,
            # every ask tells the peer the newest version we know of (a joiner's insert, say)
            ask_confirmation=lambda target, timeout: gossip.confirm_membership(
                target, timeout, self.manager.newest_version_heard
            ),
            overloaded=lambda: self.health.lagging(),
            observer=observer,
            trusted_gossip=trusted_gossip,
        )
        self.health = LocalHealth(address=address, options=options, clock=clock, snapshot=self._current)
        self.cluster = ClusterHealthMonitor(
            local=address,
            options=options,
            clock=clock,
            publisher=self.manager.publisher,
            liveness=self.manager.liveness,
            create_monitor=self._create_monitor,
            local_health=self.health,
            prober=prober,
            on_minority=self.manager.request_refresh,
            random=random,
        )
        self.agent = MembershipAgent(
            manager=self.manager, address=address, options=options, clock=clock, prober=prober, random=random
        )
        self.cleanup = CleanupAgent(manager=self.manager, address=address, options=options, clock=clock)

    def start(self) -> None:
        """Start what runs from the join on: the table manager, the local health and the probing."""
        self.manager.start()
        self.health.start()
        self.cluster.start()

    def start_member(self) -> None:
        """Start what runs once the silo is Active: heartbeats, cleanup and lease renewal."""
        self.agent.start_heartbeat()
        self.cleanup.start()
        self.manager.start_lease_renewal()

    async def stop(self) -> None:
        """Stop every role; the gossiper drains first, so our last writes reach the others."""
        await self.cluster.stop()
        await self.agent.stop_heartbeat()
        await self.cleanup.stop()
        await self.health.stop()
        await self.gossiper.stop(drain=self._options.probe_timeout)
        await self.manager.stop()

    async def take_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        """Take one gossip message in (catching up if it is news) and tell the observer whether it was."""
        before = self.manager.snapshot.version
        await self.manager.on_gossip(message, sender)
        self._observer.gossip_received(message.version, applied=self.manager.snapshot.version > before)

    async def probe_for_peer(self, target: SiloAddress, timeout: float) -> IndirectProbeResult:
        """Probe ``target`` for a peer that asked us to (an indirect probe)."""
        return await probe_for_peer(
            self._prober, self._clock, self._options, self.manager.snapshot.data, target, timeout,
            self.health.score(),
        )  # fmt: skip

    def _current(self) -> MembershipSnapshot:
        return self.manager.snapshot

    def _create_monitor(self, target: SiloAddress, cluster: ClusterHealthMonitor) -> SiloHealthMonitor:
        return SiloHealthMonitor(
            target=target,
            local=self._address,
            options=self._options,
            clock=self._clock,
            prober=self._prober,
            local_health=self.health,
            intermediaries=cluster.intermediaries,
            may_vote=cluster.may_try_vote,
            vote=functools.partial(self.vote_against, cluster),
            random=self._random,
            observer=self._observer,
            vote_delay=functools.partial(cluster.vote_delay, target),
            vote_hold=functools.partial(cluster.vote_hold, target),
        )

    async def vote_against(
        self,
        cluster: ClusterHealthMonitor,
        target: SiloAddress,
        *,
        refused: bool = False,
        still_holds: Callable[[], bool] = lambda: True,
    ) -> VoteOutcome:
        """Vote only while not fenced and reaching a majority of every fresh Active silo, not just our
        sample: a fenced silo is cut off from the table, so every peer looks silent to it.

        A vote on refusals (``refused``) needs neither: both rules guard against silence that is a
        cut's (or our own stall's), and a refusal is neither; it proves the target's process gone
        whichever side of a cut we are on, however slow our loop or table reads are. On an
        overloaded machine (2,000 silos on two cores) the silos fence now and then and their loops
        lag, which kept every vote from being cast there: no crash was declared."""
        if not refused and (self._fenced() or not await cluster.reaches_majority()):
            return VoteOutcome.NOT_ALLOWED
        return await self.manager.try_vote(
            target, others_unheard=cluster.others_unheard(target), refused=refused, still_holds=still_holds
        )
