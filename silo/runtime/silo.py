"""``Silo``: one cluster member, composed of the membership roles.

Roles (one module each, built and wired by ``silo.runtime._roles``): the table manager (the
only writer; snapshots; self-termination), the cluster health monitor (whom to probe), one silo
health monitor per target, the local health score, the gossiper, the agent (join, IAmAlive,
leave) and the cleanup agent. What the silo may serve is decided by ``silo.runtime.serving``
(its queries: ``silo.runtime._serving_queries``).
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
import logging
import random as random_module
from collections.abc import AsyncIterator, Mapping

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
from silo.membership.background import BackgroundTasks
from silo.membership.clock import Clock, SystemClock, with_timeout
from silo.membership.lease import MembershipConfirmation
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import (
    GossipMessage,
    GossipSender,
    IndirectProbeResult,
    Prober,
)
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import BlockingRunner, run_in_thread
from silo.observability.event_log import log_membership_events
from silo.runtime._roles import SiloRoles
from silo.runtime._serving_queries import ServingQueries
from silo.runtime.claims import ClaimsFile
from silo.runtime.serving import ServingGuard

logger = logging.getLogger(__name__)


class Silo(ServingQueries):
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
        self._clock: Clock = clock or SystemClock()
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
        self._roles = SiloRoles(
            table=table,
            address=address,
            options=options,
            prober=prober,
            gossip=gossip,
            clock=self._clock,
            random=random or random_module.Random(),
            run_blocking=run_blocking or run_in_thread,
            observer=observer,
            trusted_gossip=trusted_gossip,
            fenced=lambda: self._serving.fenced,
        )
        self._manager = self._roles.manager
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
        self._serving = ServingGuard(
            address=address,
            options=options,
            clock=self._clock,
            lease=self._manager.lease,
            status=lambda: self._status,
            draining=lambda: self._draining,
            snapshot=lambda: self._manager.snapshot,
            snapshots=self.snapshots,
            prober=prober,
            claims=claims,
        )

    # --- MembershipRpcHandler ---------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._table.cluster_id

    @property
    def silo_address(self) -> SiloAddress:
        return self._address

    def health_score(self) -> int:
        return self._roles.health.score()

    def hear_of(self, version: int) -> None:
        self._manager.hear_of(version)

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None) -> None:
        """Relay the message, and take it in the background: the sender's call returns at once.

        Catching up may take a while (a pull of the sender's view, a table read); the sender
        must not wait for it, or its bounded send slots fill up and its call times out, which
        makes it deal our relay group out itself (every silo of it would hear the write twice).
        """
        if self._done.is_set():
            return
        self._roles.gossiper.relay(message, self._manager.snapshot)
        self._gossip_tasks.spawn(self._roles.take_gossip(message, sender))

    async def probe_for_peer(self, target: SiloAddress, timeout: float) -> IndirectProbeResult:
        return await self._roles.probe_for_peer(target, timeout)

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

    async def catch_up(self, version: int) -> bool:
        """Bring our view to ``version`` (a caller's view is newer) within a probe timeout; True if it is."""
        return await self._manager.catch_up_to(version)

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
        self._roles.start()
        now = self._clock.now()
        entry = self._profile.replace(status=SiloStatus.JOINING, start_time=now, i_am_alive_time=now)
        self._join_task = asyncio.create_task(self._roles.agent.join(entry, self._on_joining))
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
        if self._roles.agent.unreached:
            self._serving.hold_own_keys(self._options.outage_takeover_wait)
        self._status = SiloStatus.ACTIVE
        self._serving.record_claim()
        self._roles.start_member()
        self._serving.start()

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
        self._serving.record_claim()
        await self._roles.cluster.stop()  # no votes while leaving
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
            return await self._roles.agent.leave(status, deadline)

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

    async def _stop_roles(self, code: ExitCode) -> None:
        await self._serving.stop()
        await self._gossip_tasks.cancel_all()
        await self._roles.stop()
        if self._event_log is not None:  # ends with the snapshots (the publisher closed)
            await asyncio.gather(self._event_log, return_exceptions=True)
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
        self._status = SiloStatus.DEAD
        self._serving.record_claim()
        self._exit_code = code
        logger.info("silo %s stopped (exit code %d %s)", self._address, code, code.name)
        self._done.set()
