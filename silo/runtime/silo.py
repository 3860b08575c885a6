"""``Silo``: one cluster member, composed of the membership roles.

Roles (one module each): the table manager (the only writer; snapshots; self-termination),
the cluster health monitor (whom to probe), one silo health monitor per target, the local
health score, the gossiper, the agent (join, IAmAlive, leave) and the cleanup agent.
The wire is injected: a ``Prober`` and a ``GossipSender``; the gRPC server calls this
object through the ``MembershipRpcHandler`` methods. An optional ``MembershipObserver`` receives
the protocol's facts (metrics); the membership events the silo sees go to the ``silo.events`` log.

Lifecycle a caller may rely on::

    silo = Silo(table=..., address=..., options=..., prober=..., gossip=...)
    await silo.start()                 # returns once Active, or raises a SiloError
    code = await silo.wait_terminated()  # OK after stop(); DECLARED_DEAD if the cluster
                                         # declared us Dead or a newer generation took over
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random as random_module
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from membership_tables import (
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    MembershipTableError,
    SiloAddress,
    SiloStatus,
)
from silo.errors import SiloError
from silo.exit_codes import ExitCode
from silo.membership.agent import MembershipAgent
from silo.membership.background import BackgroundTasks
from silo.membership.cleanup import CleanupAgent, cleanup_leader, leader_order
from silo.membership.clock import Clock, SystemClock, with_timeout
from silo.membership.cluster_health import ClusterHealthMonitor
from silo.membership.gossiper import Gossiper
from silo.membership.lease import MembershipConfirmation
from silo.membership.local_health import LocalHealth
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import (
    GossipMessage,
    GossipSender,
    IndirectProbeResult,
    ProbeOutcome,
    Prober,
    bounded_indirect_timeout,
)
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import BlockingRunner, run_in_thread
from silo.membership.table_manager import MembershipTableManager
from silo.membership.votes import VoteOutcome
from silo.observability.event_log import log_membership_events
from silo.runtime.claims import ClaimsFile, ServingClaim
from silo.runtime.ownership import OwnershipGuard
from silo.work.ownership import OwnershipCheck

logger = logging.getLogger(__name__)


class Silo:
    """A silo process's membership runtime; implements ``MembershipRpcHandler``."""

    def __init__(
        self,
        *,
        table: MembershipTable,
        address: SiloAddress,
        options: SiloOptions,
        prober: Prober,
        gossip: GossipSender,
        clock: Clock | None = None,
        silo_name: str = "",
        host_name: str = "",
        proxy_port: int = 0,
        role_name: str = "",
        properties: Mapping[str, str] | None = None,
        random: random_module.Random | None = None,
        run_blocking: BlockingRunner | None = None,
        observer: MembershipObserver = NULL_OBSERVER,
        trusted_gossip: bool = False,
        claims: ClaimsFile | None = None,
    ) -> None:
        """``trusted_gossip``: only members of the cluster can reach our RPCs (mutual TLS with
        silo certificates); see ``MembershipTableManager``. ``claims``: record every change of
        what this silo may serve (``silo.runtime.claims``, for tests that check one owner per key)."""
        self._table = table
        self._address = address
        self._options = options
        self._prober = prober
        self._observer = observer
        self._clock: Clock = clock or SystemClock()
        self._random = random or random_module.Random()
        now = self._clock.now()
        self._profile = MembershipEntry(  # validates the caller's fields before anything starts
            address,
            SiloStatus.CREATED,
            start_time=now,
            i_am_alive_time=now,
            silo_name=silo_name,
            host_name=host_name,
            proxy_port=proxy_port,
            role_name=role_name,
            properties=dict(properties or {}),
        )
        self._gossiper = Gossiper(
            address=address,
            options=options,
            clock=self._clock,
            sender=gossip,
            is_fresh=lambda silo: self._manager.liveness.is_fresh(silo),
        )
        self._manager = MembershipTableManager(
            table=table,
            address=address,
            options=options,
            clock=self._clock,
            random=self._random,
            run_blocking=run_blocking or run_in_thread,
            on_write=self._gossiper.publish,
            fetch_view=gossip.fetch_membership,
            # every ask tells the peer the newest version we know of (a joiner's insert, say)
            ask_confirmation=lambda target, timeout: gossip.confirm_membership(
                target, timeout, self._manager.newest_version_heard
            ),
            observer=observer,
            trusted_gossip=trusted_gossip,
        )
        self._health = LocalHealth(address=address, options=options, clock=self._clock, snapshot=self._current)
        self._cluster = ClusterHealthMonitor(
            local=address,
            options=options,
            clock=self._clock,
            publisher=self._manager.publisher,
            liveness=self._manager.liveness,
            create_monitor=self._create_monitor,
            local_health=self._health,
            prober=prober,
            on_minority=self._manager.request_refresh,
            random=self._random,
        )
        self._agent = MembershipAgent(
            manager=self._manager, address=address, options=options, clock=self._clock, prober=prober,
            random=self._random,
        )  # fmt: skip
        self._cleanup = CleanupAgent(manager=self._manager, address=address, options=options, clock=self._clock)
        self._status = SiloStatus.CREATED
        self._started = False
        self._stopping = False
        self._draining = False
        self._own_writes = asyncio.Lock()
        """Orders our departure writes: a Dead never overtaken by a ShuttingDown still in flight."""
        self._done = asyncio.Event()
        self._exit_code = ExitCode.OK
        self._finishing: asyncio.Future[None] | None = None
        self._join_task: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._event_log: asyncio.Task[None] | None = None
        self._gossip_tasks = BackgroundTasks()
        self._lease_watch: asyncio.Task[None] | None = None
        self._ownership = OwnershipGuard(
            address, takeover_wait=options.takeover_wait, monotonic=self._clock.monotonic, provably_gone=self._gone
        )
        self._ownership_follower: asyncio.Task[None] | None = None
        self._claims = claims
        if claims is not None:
            self._manager.lease.on_confirm = self._record_claim
            self._ownership.on_change = self._record_claim
        self._fenced_since: float | None = None
        self._fencing_listeners: list[Callable[[bool], Awaitable[None]]] = []

    # --- MembershipRpcHandler ---------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._table.cluster_id

    @property
    def silo_address(self) -> SiloAddress:
        return self._address

    def health_score(self) -> int:
        return self._health.score()

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        """Relay the message, and take it in the background: the sender's call returns at once.

        Catching up may take a while (a pull of the sender's view, a table read); the sender
        must not wait for it, or its bounded send slots fill up and its call times out, which
        makes it deal our relay group out itself (every silo of it would hear the write twice).
        """
        if self._done.is_set():
            return
        self._gossiper.relay(message, self._manager.snapshot)
        self._gossip_tasks.spawn(self._take_gossip(message, sender))

    async def _take_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        before = self._manager.snapshot.version
        await self._manager.on_gossip(message, sender)
        self._observer.gossip_received(message.version, applied=self._manager.snapshot.version > before)

    async def probe_for_peer(self, target: SiloAddress, timeout: float) -> IndirectProbeResult:
        snapshot = self._manager.snapshot
        if snapshot.entry(target) is None:
            # Only silos of the table: a caller must not make us open (and keep) a channel to any
            # endpoint it names, nor use us to scan ports. An honest caller's target is in the table.
            failure = f"{target} is not in this silo's membership table (version {snapshot.version}); not probed"
            return IndirectProbeResult(False, self.health_score(), 0.0, failure)
        timeout = bounded_indirect_timeout(timeout, self._options.probe_timeout)
        started = self._clock.monotonic()
        failure = ""
        try:
            outcome = await with_timeout(self._clock, self._prober.ping(target, timeout), timeout)
            answered = outcome is ProbeOutcome.ANSWERED
        except Exception as exc:
            answered, failure = False, f"{type(exc).__name__}: {exc}"
        if not answered and not failure:
            failure = f"{target} did not answer"
        elapsed = self._clock.monotonic() - started
        return IndirectProbeResult(answered, self.health_score(), elapsed, failure)

    def membership_snapshot(self) -> MembershipTableData:
        return self._manager.snapshot.data

    async def confirm_membership(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        return await self._manager.confirm_member(asker, known_version)

    # --- public API -------------------------------------------------------------------

    @property
    def options(self) -> SiloOptions:
        return self._options

    @property
    def status(self) -> SiloStatus:
        """This silo's own lifecycle status (Dead once it stopped for any reason)."""
        return self._status

    @property
    def snapshot(self) -> MembershipSnapshot:
        """The latest membership snapshot this silo holds."""
        return self._manager.snapshot

    @property
    def termination_reason(self) -> str:
        """Why the silo terminated itself ("" unless it was declared dead or superseded)."""
        return self._manager.termination_reason

    def snapshots(self) -> AsyncIterator[MembershipSnapshot]:
        """The current snapshot, then every newer one in version order, until the silo stops."""
        return self._manager.publisher.subscribe()

    @property
    def fenced(self) -> bool:
        """True while this Active silo's membership lease has run out (``silo.membership.lease``):
        the table has not confirmed it Active for ``lease_timeout``, so the others may have
        declared it Dead and moved its keys. Checked live, so a silo resuming from a pause is
        fenced before it serves anything."""
        return self._status is SiloStatus.ACTIVE and not self._manager.lease.valid()

    @property
    def draining(self) -> bool:
        """True from ``drain()`` (or ``stop()``) on: the silo takes no new work and is not ready."""
        return self._draining

    def readiness(self) -> str | None:
        """Why an orchestrator must not count this silo as ready (``/readyz``); None if it may: Active
        in its own view, its lease valid (not fenced), the table reachable, and not draining."""
        refusal = self.work_refusal()
        if refusal is not None:
            return refusal
        if self._manager.snapshot.status_of(self._address) is not SiloStatus.ACTIVE:
            return f"silo {self._address} is not Active in its own view of the table yet"
        if self._manager.table_down:
            return f"silo {self._address} cannot reach the membership table"
        return None

    def work_refusal(self) -> str | None:
        """Why this silo must not serve work right now (None: it may)."""
        if self._draining:
            return f"silo {self._address} is draining (shutting down); send the batch to another silo"
        if self._status is not SiloStatus.ACTIVE:
            return f"silo {self._address} is {self._status.name}, not ACTIVE; send the batch to another silo"
        if self.fenced:
            return (
                f"silo {self._address} is fenced: the membership table has not confirmed it Active for "
                f"{self._manager.lease.age():.1f}s (lease_timeout {self._options.lease_timeout}s); "
                "send the batch to another silo"
            )
        return None

    def results_guard(self) -> Callable[[], str | None]:
        """A check for work that starts now, to run when its handler returns: why its results must
        be withheld (the lease ran out at some moment in between, so the others may have moved
        its keys and served them), or None if they may be returned."""
        lease, started = self._manager.lease, self._clock.monotonic()

        def withheld() -> str | None:
            if lease.held_since(started):
                return None
            return (
                f"silo {self._address} lost its membership lease while the handler ran "
                f"({self._clock.monotonic() - started:.1f}s; lease_timeout {self._options.lease_timeout}s): "
                "another silo may own these keys now, so the results are withheld; send the batch to another silo"
            )

        return withheld

    def is_leader(self) -> bool:
        """Whether this silo is the cluster's leader now: the oldest Active silo of its view, not
        fenced (a fenced silo may have been declared Dead and replaced already), and no older silo
        declared Dead may still be leading (its takeover wait runs, as for its keys)."""
        if self.work_refusal() is not None or cleanup_leader(self._manager.snapshot) != self._address:
            return False
        self._ownership.observe(self._manager.snapshot)
        return not any(leader_order(ghost) < leader_order(self._address) for ghost in self._ownership.pending_ghosts())

    def ownership(self) -> OwnershipCheck:
        """The keys this silo may serve now (its serving ring) and the fencing token, frozen for one request."""
        self._ownership.observe(self._manager.snapshot)
        return self._ownership.check()

    async def catch_up(self, version: int) -> bool:
        """Bring our view to ``version`` (a caller's view is newer) within a probe timeout; True if it is."""
        return await self._manager.catch_up_to(version)

    def on_fencing(self, listener: Callable[[bool], Awaitable[None]]) -> None:
        """Await ``listener(True)`` when this silo fences itself and ``listener(False)`` when it unfences."""
        self._fencing_listeners.append(listener)

    async def start(self) -> None:
        """Join the cluster; returns once Active.

        Raises ``JoinError`` (exit code 4), ``TableUnavailableAtStartError`` (5) or
        ``DeclaredDeadError`` (3); the silo is then stopped and ``wait_terminated()``
        returns that code. If ``stop()`` interrupts the join, returns quietly.
        """
        if self._started:
            raise SiloError(f"silo {self._address} was already started; create a new Silo to rejoin")
        self._started = True
        self._watcher = asyncio.create_task(self._watch_termination())
        self._event_log = asyncio.create_task(log_membership_events(self.snapshots(), self._clock.now, self._address))
        self._manager.start()
        self._health.start()
        self._cluster.start()
        now = self._clock.now()
        entry = self._profile.replace(status=SiloStatus.JOINING, start_time=now, i_am_alive_time=now)
        self._join_task = asyncio.create_task(self._agent.join(entry, self._on_joining))
        try:
            await self._join_task
        except asyncio.CancelledError:
            if self._stopping:
                return
            raise
        except SiloError as exc:
            logger.error("silo %s failed to start: %s", self._address, exc)
            await self._finish(exc.exit_code)
            raise
        if self._stopping or self._finishing is not None:
            return  # stop() or a termination raced with the last step of the join
        self._status = SiloStatus.ACTIVE
        self._record_claim()
        self._agent.start_heartbeat()
        self._cleanup.start()
        self._manager.start_lease_renewal()
        self._lease_watch = asyncio.create_task(self._watch_lease())
        self._ownership_follower = asyncio.create_task(self._follow_ownership())

    def _on_joining(self) -> None:
        self._status = SiloStatus.JOINING

    async def drain(self, within: float | None = None) -> None:
        """Start a graceful leave: refuse new work at once, then write ShuttingDown, so routers move
        our keys to the other silos while the calls in flight finish; ``stop()`` writes Dead later.
        ``within``: seconds the write may take (default ``detection_time``; an unreachable table is
        retried until then, and a failure is logged at WARNING). Idempotent."""
        deadline = self._clock.monotonic() + (self._options.detection_time if within is None else within)
        if self._draining or self._stopping or self._done.is_set():
            return
        self._draining = True
        if self._status is not SiloStatus.ACTIVE or self._manager.terminated.is_set():
            return  # not a member yet (stop() ends the join) or already leaving for another reason
        await self._begin_leaving(deadline)

    async def stop(self, within: float | None = None) -> None:
        """Leave gracefully (ShuttingDown unless ``drain()`` wrote it, then Dead) and stop every role.
        ``within``: seconds the departure writes may take in all (default ``detection_time``); past
        them the silo stops without them (logged at WARNING) and the cluster detects its death.
        Idempotent."""
        deadline = self._clock.monotonic() + (self._options.detection_time if within is None else within)
        if self._stopping or self._done.is_set():
            await self._done.wait()
            return
        self._stopping = True
        self._draining = True
        if self._join_task is not None and not self._join_task.done():
            self._join_task.cancel()
            await asyncio.gather(self._join_task, return_exceptions=True)
        if self._status in (SiloStatus.JOINING, SiloStatus.ACTIVE) and not self._manager.terminated.is_set():
            await self._begin_leaving(deadline)
        if self._status is SiloStatus.SHUTTING_DOWN and not self._manager.terminated.is_set():
            await self._write_own(SiloStatus.DEAD, deadline)
        await self._finish(ExitCode.OK)

    async def _begin_leaving(self, deadline: float) -> None:
        self._status = SiloStatus.SHUTTING_DOWN
        self._record_claim()
        await self._cluster.stop()  # no votes while leaving
        await self._write_own(SiloStatus.SHUTTING_DOWN, deadline)

    async def _write_own(self, status: SiloStatus, deadline: float) -> bool:
        """Write our own row ``status`` before ``deadline`` (a table call blocked in its driver is
        abandoned then); a failure is logged at WARNING: the cluster detects the departure instead."""
        remaining = deadline - self._clock.monotonic()
        failure = "no time left in the shutdown grace"
        if remaining > 0:
            try:
                if await with_timeout(self._clock, self._leave(status, deadline), remaining):
                    return True
                failure = "its row is gone or no longer its own"
            except TimeoutError:
                failure = f"the table did not answer within {remaining:.1f}s"
            except MembershipTableError as exc:
                failure = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "silo %s could not write itself %s (%s); the cluster will detect its departure",
            self._address, status.name, failure,
        )  # fmt: skip
        return False

    async def _leave(self, status: SiloStatus, deadline: float) -> bool:
        async with self._own_writes:
            return await self._agent.leave(status, deadline)

    async def wait_terminated(self) -> ExitCode:
        """Wait until the silo stopped for any reason and return the process exit code."""
        await self._done.wait()
        return self._exit_code

    async def set_properties(self, properties: Mapping[str, str]) -> bool:
        """Replace this silo's advertised properties (a versioned row update). False if not a member."""

        def change(entry: MembershipEntry) -> MembershipEntry:
            return entry.replace(properties=dict(properties))

        self._profile = self._profile.replace(properties=dict(properties))
        if self._status not in (SiloStatus.JOINING, SiloStatus.ACTIVE):
            return False
        deadline = self._manager.deadline_in(self._options.max_join_attempt_time)
        return await self._manager.update_row(self._address, change, deadline)

    # --- internals --------------------------------------------------------------------

    def _current(self) -> MembershipSnapshot:
        return self._manager.snapshot

    def _create_monitor(self, target: SiloAddress, cluster: ClusterHealthMonitor) -> SiloHealthMonitor:
        return SiloHealthMonitor(
            target=target,
            local=self._address,
            options=self._options,
            clock=self._clock,
            prober=self._prober,
            local_health=self._health,
            intermediaries=cluster.intermediaries,
            may_vote=cluster.may_try_vote,
            vote=functools.partial(self._vote_against, cluster),
            random=self._random,
            observer=self._observer,
            vote_delay=functools.partial(cluster.vote_delay, target),
            vote_hold=functools.partial(cluster.vote_hold, target),
        )

    async def _vote_against(self, cluster: ClusterHealthMonitor, target: SiloAddress) -> VoteOutcome:
        """Vote only while not fenced and reaching a majority of every fresh Active silo, not just our
        sample: a fenced silo is cut off from the table, so every peer looks silent to it."""
        if self.fenced or not await cluster.reaches_majority():
            return VoteOutcome.NOT_ALLOWED
        return await self._manager.try_vote(target, others_unheard=cluster.others_unheard(target))

    async def _watch_termination(self) -> None:
        await self._manager.terminated.wait()
        if not self._stopping:
            if self._join_task is not None and not self._join_task.done():
                return  # start() raises DeclaredDeadError and finishes
            await self._finish(ExitCode.DECLARED_DEAD)

    async def _finish(self, code: ExitCode) -> None:
        """Stop every role once; later callers wait for the first one to complete."""
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._stop_roles(code))
        await asyncio.shield(self._finishing)

    async def _watch_lease(self) -> None:
        """Log and announce each change between fenced and not: sleeps until the lease would run
        out, then, while fenced, checks every renewal interval whether a confirmation came."""
        lease = self._manager.lease
        while True:
            remaining = lease.remaining()
            if remaining >= 0:
                await self._clock.sleep(remaining + self._options.lease_renew_interval / 10)
                continue
            if self._fenced_since is None:
                self._fenced_since = self._clock.monotonic()
                logger.warning(
                    "silo %s is fenced: the membership table has not confirmed it Active for %.1fs "
                    "(lease_timeout %ss); it serves no work, leads nothing and casts no votes until it does",
                    self._address, lease.age(), self._options.lease_timeout,
                )  # fmt: skip
                await self._announce_fencing(True)
            await self._clock.sleep(self._options.lease_renew_interval / 2)
            if lease.valid() and self._fenced_since is not None:
                logger.warning(
                    "silo %s is no longer fenced: the table confirmed it Active again after %.1fs fenced",
                    self._address, self._clock.monotonic() - self._fenced_since,
                )  # fmt: skip
                self._fenced_since = None
                await self._announce_fencing(False)

    def _record_claim(self) -> None:
        """Append what we may serve from now on (``silo.runtime.claims``): called at every change of it."""
        if self._claims is None:
            return
        now = self._clock.monotonic()
        ring, ghosts, serving_from, token = self._ownership.claim()
        expires = self._manager.lease.expires_at()
        valid_until = expires if self._status is SiloStatus.ACTIVE and expires is not None else now
        self._claims.append(
            ServingClaim(
                silo=str(self._address),
                at=now,
                ring=tuple(sorted(str(silo) for silo in ring)),
                ghosts={str(silo): until for silo, until in ghosts.items()},
                serving_from=serving_from,
                valid_until=valid_until,
                token=token,
            )
        )

    async def _follow_ownership(self) -> None:
        """Feed every snapshot to the ownership guard as it comes: a death starts its takeover wait
        (and the check whether the dead silo's endpoint refuses) when we learn of it."""
        async for snapshot in self.snapshots():
            self._ownership.observe(snapshot)

    async def _gone(self, silo: SiloAddress) -> bool:
        """Whether ``silo`` provably cannot serve: its endpoint refuses, or another incarnation answers."""
        return await self._prober.ping(silo, self._options.probe_timeout) is ProbeOutcome.REFUSED

    async def _announce_fencing(self, fenced: bool) -> None:
        for listener in self._fencing_listeners:
            try:
                await listener(fenced)
            except Exception:
                logger.exception("a fencing listener of silo %s failed", self._address)

    async def _stop_roles(self, code: ExitCode) -> None:
        for task in (self._lease_watch, self._ownership_follower):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._ownership.close()
        await self._gossip_tasks.cancel_all()
        await self._cluster.stop()
        await self._agent.stop_heartbeat()
        await self._cleanup.stop()
        await self._health.stop()
        await self._gossiper.stop(drain=self._options.probe_timeout)  # our last writes reach the others
        await self._manager.stop()
        if self._event_log is not None:  # ends with the snapshots (the publisher closed)
            await asyncio.gather(self._event_log, return_exceptions=True)
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
        self._status = SiloStatus.DEAD
        self._record_claim()
        self._exit_code = code
        logger.info("silo %s stopped (exit code %d %s)", self._address, code, code.name)
        self._done.set()
