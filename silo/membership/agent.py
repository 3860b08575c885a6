"""The membership agent: joining, connectivity validation, IAmAlive heartbeats, leaving.

Join: initialize the table, read it, declare Dead any older generation of this endpoint
that is still alive (a crashed predecessor), insert our row as Joining, ping every Active
silo until each has answered once (so we never join a cluster we cannot talk to; once half of
them answered, one that the silo we ask cannot reach either no longer counts, and one of the
last few that it reaches for us counts as reached), then become Active.
Every step retries until ``max_join_attempt_time``. From its insert on it writes IAmAlive every
``i_am_alive_table_publish_timeout``. Leaving writes ShuttingDown, then Dead.
All writes go through the table manager.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random as random_module
from collections.abc import Callable

from membership_tables import AccessDeniedError, MembershipEntry, SiloAddress, SiloStatus, TableUnavailableError
from silo.errors import DeclaredDeadError, JoinError, TableAccessDeniedError, TableUnavailableAtStartError
from silo.membership.clock import Clock, Periodic, with_timeout
from silo.membership.gossiper import gossip_peers
from silo.membership.join_validation import (
    JOIN_PINGS_IN_FLIGHT,
    JoinWitnesses,
    ValidationPace,
    join_heartbeat_watch,
)
from silo.membership.options import SiloOptions
from silo.membership.probing import ProbeOutcome, Prober, reached_through
from silo.membership.ring import probe_targets
from silo.membership.table_manager import MembershipTableManager

logger = logging.getLogger(__name__)


class MembershipAgent:
    """Drives this silo's own lifecycle in the table."""

    def __init__(
        self,
        *,
        manager: MembershipTableManager,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        prober: Prober,
        random: random_module.Random | None = None,
    ) -> None:
        self._random = random or random_module.Random()
        self._manager = manager
        self._address = address
        self._options = options
        self._clock = clock
        self._prober = prober
        self._heart: Periodic | None = None
        self._pinged: set[SiloAddress] = set()
        self.unreached: frozenset[SiloAddress] = frozenset()
        """Members our join may not have reached (``_unreached_members``): set before we turn Active."""

    def _check_not_terminated(self) -> None:
        if self._manager.terminated.is_set():
            raise DeclaredDeadError(f"silo {self._address} cannot join: {self._manager.termination_reason}")

    async def join(self, entry: MembershipEntry, on_joining: Callable[[], None]) -> None:
        """Join as ``entry`` (status Joining) and become Active, or raise a ``SiloError``."""
        limit = self._options.max_join_attempt_time
        deadline = self._manager.deadline_in(limit)
        try:
            await self._manager.initialize(deadline)
            snapshot = await self._manager.refresh(deadline)
            self._check_not_terminated()
            for old in snapshot.older_generations_of(self._address):
                if old.status is not SiloStatus.DEAD:
                    logger.warning("silo %s declares its older generation %s Dead", self._address, old.silo_address)
                    await self._manager.update_row(old.silo_address, _declare_dead, deadline)
            await self._manager.insert_self(entry, deadline)
        except AccessDeniedError as exc:
            raise TableAccessDeniedError(f"silo {self._address} may not use the membership table: {exc}") from exc
        except TableUnavailableError as exc:
            raise TableUnavailableAtStartError(
                f"silo {self._address} could not reach the membership table within {limit}s ({exc}); "
                "check the table URI and that the store is running, or raise max_join_attempt_time"
            ) from exc
        self._check_not_terminated()
        on_joining()
        self.start_heartbeat()
        try:
            await self._validate_connectivity(deadline)
        except JoinError:
            await self._give_up()
            raise
        self._check_not_terminated()
        if not await self._manager.update_own_status(SiloStatus.ACTIVE, self._manager.deadline_in(limit)):
            self._check_not_terminated()
            raise JoinError(f"silo {self._address} could not mark itself Active: its row is gone")
        self._check_not_terminated()
        logger.info("silo %s is Active", self._address)

    async def _validate_connectivity(self, deadline: float) -> None:
        """Ping every live Active silo until each has answered once, or the deadline passes
        (beyond ``max_join_validation_pings`` silos, a sample of that many: see the option).

        The silos to reach are the fresh Active ones of the first round (or its sample): a silo
        that turns Active later is not added (in a join storm hundreds do, and a joiner that
        waited for a slow one kept finding new ones to ping). A silo that answered is not pinged
        again: the rounds (one each ``probe_timeout``) ping only the chosen silos that have not
        answered yet, so joining a cluster of N costs about N pings, not N per round. At most
        ``JOIN_PINGS_IN_FLIGHT`` are in flight. Between rounds we re-read the rows of the silos
        that did not answer (``reread_rows``: not the whole table unless that is cheaper), which
        drops the ones that died or left meanwhile and shows whether they still heartbeat.
        A silo that does not answer blocks the join only while its silence may be ours: not a
        row whose heartbeat we watched for a whole ``join_heartbeat_watch`` without seeing it
        move (a crashed silo nobody has declared Dead yet, e.g. after a whole-cluster crash),
        and, once half of them answered us, not one that a silo which answered us cannot reach
        either, nor one of the last few that it does reach for us (``JoinWitnesses``).
        """
        liveness = self._manager.liveness
        watch = join_heartbeat_watch(self._options)
        answered: set[SiloAddress] = set()
        gone: set[SiloAddress] = set()
        refused: set[SiloAddress] = set()
        in_flight = asyncio.Semaphore(JOIN_PINGS_IN_FLIGHT)

        first = [s for s in liveness.fresh(self._manager.snapshot) if s != self._address]
        chosen = sorted(self._silos_to_reach(first))
        ask = functools.partial(self._ask_through, in_flight)
        witnesses = JoinWitnesses(self._address, self._options, ask, self._random)
        excused: set[SiloAddress] = set()  # silent, and no longer blocking the join: not pinged again
        pace = ValidationPace(self._random)
        while True:
            self._check_not_terminated()
            # the chosen ones still fresh and Active: each round looks at those only, not the view
            # (a whole view's freshness per round per joiner was 7% of a 2,000-silo storm's samples)
            snapshot = self._manager.snapshot
            targets = [
                s
                for s in chosen
                if s not in gone and snapshot.status_of(s) is SiloStatus.ACTIVE and liveness.is_fresh(s)
            ]
            settled = answered | excused | witnesses.nobody_reaches
            waiting = [s for s in targets if s not in settled]
            peers = pace.pick(waiting, snapshot.large)
            outcomes = await asyncio.gather(*(self._ping(peer, in_flight) for peer in peers))
            answers = [outcome is ProbeOutcome.ANSWERED for outcome in outcomes]
            pace.update(len(peers), sum(answers))
            answered.update(peer for peer, answer in zip(peers, answers, strict=True) if answer)
            refused.update(peer for peer, got in zip(peers, outcomes, strict=True) if got is ProbeOutcome.REFUSED)
            silent = [peer for peer, answer in zip(peers, answers, strict=True) if not answer]
            unreachable = [peer for peer in silent if liveness.seen_heartbeating(peer, watch) is not False]
            excused.update(peer for peer in silent if peer not in unreachable)
            # this round's silent ones, and those a smaller round left for later (silent when last pinged, or unpinged)
            blocking = [silo for silo in waiting if silo not in answered and silo not in excused]
            if unreachable and 2 * len(answered.intersection(targets)) >= len(targets):
                blocking = await witnesses.judge(unreachable, blocking, answered)
            if not blocking:
                self.unreached = await self._unreached_members(answered | gone | refused, in_flight)
                return
            if not unreachable:
                continue  # the rest at once: each silo pinged answered, or its heartbeat stood still
            names = ", ".join(map(str, blocking))
            if self._clock.monotonic() + self._options.probe_timeout > deadline:
                raise JoinError(
                    f"silo {self._address} could not reach these Active silos within "
                    f"{self._options.max_join_attempt_time}s: {names}. Check the network and firewalls between "
                    "silos, or wait until the cluster declares them Dead",
                    blocking,
                )
            logger.info("silo %s is joining; still waits for %s", self._address, names)
            await self._clock.sleep(pace.pause(self._options, snapshot.large, deadline - self._clock.monotonic()))
            try:
                rows = await self._manager.reread_rows(blocking)
                gone.update(peer for peer, row in rows.items() if row is None or row.status is not SiloStatus.ACTIVE)
            except TableUnavailableError:
                logger.debug("silo %s: table unreachable while validating connectivity", self._address)

    async def _unreached_members(
        self, settled: set[SiloAddress], in_flight: asyncio.Semaphore
    ) -> frozenset[SiloAddress]:
        """The members (Active or draining) that may not have heard of our join: ones that stayed
        silent without a refusal (their heartbeat stood still, or nobody we asked reached them,
        so we stopped waiting), and stale ones we had not pinged, pinged once now. A silo that
        answered has heard of our insert (``PingRequest.known_version``); one that refused runs
        no process there.

        Such a member may be cut off from the table and from us and vouch with its group for an
        outage it thinks is everyone's (``silo.membership.lease``), so we hold the keys we take
        for ``outage_takeover_wait``. Rows left unpinged by the validation sample are not
        counted: a group that vouches needs the answer of every member of its view, and a
        member we reached has heard of us (docs/protocol.md, "Joins and the vouch")."""
        snapshot, liveness = self._manager.snapshot, self._manager.liveness
        members = [
            entry.silo_address
            for entry in snapshot.with_status(SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN)
            if entry.silo_address != self._address and entry.silo_address not in settled
        ]
        fresh = set(liveness.fresh(snapshot, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN))
        stale = [silo for silo in members if silo not in fresh][: self._options.max_join_validation_pings]
        outcomes = await asyncio.gather(*(self._ping(silo, in_flight) for silo in stale))
        heard = {silo for silo, outcome in zip(stale, outcomes, strict=True) if outcome is not ProbeOutcome.TIMED_OUT}
        silent_chosen = {silo for silo in members if silo in fresh and silo in self._pinged}
        unreached = frozenset(silent_chosen | {silo for silo in members if silo not in fresh and silo not in heard})
        if unreached:
            logger.warning(
                "silo %s joins without having reached %s (silent to it and, where it asked, to others): they may be "
                "cut off from the table and vouch for one another, so it serves the keys it takes only after "
                "outage_takeover_wait (%.0fs)",
                self._address, ", ".join(map(str, sorted(unreached))), self._options.outage_takeover_wait,
            )  # fmt: skip
        return unreached

    def _silos_to_reach(self, fresh: list[SiloAddress]) -> set[SiloAddress]:
        """All of ``fresh`` up to ``max_join_validation_pings``; beyond, that many: the ones we
        will probe once Active, the ones we will send our gossip to, then others at random.
        The silos we will keep talking to come first: their channels stay open for that; every
        other one is a channel opened for one ping."""
        limit = self._options.max_join_validation_pings
        if len(fresh) <= limit:
            return set(fresh)
        sample = set(probe_targets(self._address, fresh, self._options.num_probed_silos))
        gossiped_to = [s for s in gossip_peers(self._address, fresh, self._options.gossip_fanout) if s not in sample]
        sample.update(gossiped_to[: max(0, limit - len(sample))])
        rest = [silo for silo in fresh if silo not in sample]
        return sample | set(self._random.sample(rest, max(0, min(len(rest), limit - len(sample)))))

    async def _ask_through(self, in_flight: asyncio.Semaphore, via: SiloAddress, peer: SiloAddress) -> bool | None:
        async with in_flight:
            return await reached_through(
                self._prober, self._clock, self._address, via, peer, self._options.probe_timeout
            )

    async def _ping(self, peer: SiloAddress, in_flight: asyncio.Semaphore) -> ProbeOutcome:
        timeout = self._options.probe_timeout
        self._pinged.add(peer)
        async with in_flight:
            try:
                # the ping tells the peer our insert's version before it answers: the peer then
                # vouches for no view without our row in an outage (``silo.membership.lease``)
                ping = self._prober.ping(peer, timeout, self._manager.newest_version_heard)
                return await with_timeout(self._clock, ping, timeout)
            except Exception as exc:
                logger.debug("silo %s: join ping of %s failed: %r", self._address, peer, exc)
                return ProbeOutcome.TIMED_OUT

    async def _give_up(self) -> None:
        """Best effort: leave no Joining row behind after a failed join."""
        self._manager.mark_leaving()
        try:
            await self._manager.update_own_status(
                SiloStatus.DEAD, self._manager.deadline_in(self._options.probe_timeout)
            )
        except TableUnavailableError:
            logger.debug("silo %s: could not mark its failed join Dead", self._address)

    def start_heartbeat(self) -> None:
        """Write IAmAlive every ``i_am_alive_table_publish_timeout`` until stopped (from our insert on:
        a joiner whose heartbeat stood still was stale for the others once the freshness limit
        passed, and in a join that outlasted it every Joining row became a suspect that three Active
        silos probed and could vote against). Started once."""
        if self._heart is not None:
            return
        self._heart = Periodic(self._clock, self._options.i_am_alive_table_publish_timeout, self._beat)
        self._heart.start()

    async def _beat(self) -> None:
        period = self._options.i_am_alive_table_publish_timeout
        try:
            await self._manager.heartbeat(self._manager.deadline_in(period))
        except TableUnavailableError:
            logger.warning("silo %s could not write IAmAlive for %ss", self._address, period)

    async def stop_heartbeat(self) -> None:
        if self._heart is not None:
            await self._heart.stop()

    async def leave(self, status: SiloStatus, deadline: float) -> bool:
        """Write our own row ``status`` (ShuttingDown, then Dead, on a graceful leave), retrying an
        unreachable table until ``deadline``; False if the row could not be written."""
        self._manager.mark_leaving()
        if not await self._manager.update_own_status(status, deadline):
            return False
        if status is SiloStatus.DEAD:
            logger.info("silo %s left the cluster (Dead)", self._address)
        return True


def _declare_dead(entry: MembershipEntry) -> MembershipEntry | None:
    return None if entry.status is SiloStatus.DEAD else entry.replace(status=SiloStatus.DEAD)
