"""The table manager: the only role that writes to the membership table, put together from its parts.

* ``table_view.TableView``: the latest snapshot, how reads, learned views and our own writes
  move it, and the judge of self-termination;
* ``row_writer.RowWriter``: our own row (insert, status, heartbeat) and read-modify-writes;
* ``vote_caster.VoteCaster``: suspicion votes and death declarations, batched, with the cut
  arbitration hold of ring sampling;
* ``gossip_catch_up.GossipCatchUp``: catching up when gossip or a Work caller announces a newer version;
* ``table_refresh.TableRefresh``: the periodic refresh, requested looks at our own row, row re-reads;
* ``lease_keeper.LeaseKeeper``: the membership lease, through the table or through peers.

Safety when the table is down: infrastructure errors are retried with exponential backoff and
jitter, never turned into a vote. The table is *down* once calls have failed for
``probe_timeout`` without a success in between; one failed call is a hiccup and suspends
nothing. Heartbeats that lapsed during an outage do not shrink the quorum: the
``LivenessTracker`` does not count time during which we could not read.
"""

from __future__ import annotations

import asyncio
import functools
import random as random_module
from collections.abc import Callable, Collection

from membership_tables import MembershipEntry, MembershipTable, SiloAddress, SiloStatus
from silo.membership.clock import Clock
from silo.membership.gossip_catch_up import GossipCatchUp
from silo.membership.lease import MembershipConfirmation, MembershipLease
from silo.membership.lease_keeper import AskConfirmation, LeaseKeeper
from silo.membership.liveness import LivenessTracker
from silo.membership.observer import NULL_OBSERVER, MembershipObserver
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage
from silo.membership.row_writer import RowWriter
from silo.membership.snapshot import MembershipSnapshot, SnapshotPublisher
from silo.membership.table_access import BlockingRunner, run_in_thread
from silo.membership.table_refresh import TableRefresh
from silo.membership.table_view import FetchView, OnWrite, TableView
from silo.membership.vote_caster import VoteCaster, settle_time
from silo.membership.votes import VoteOutcome


class MembershipTableManager:
    """The only writer of the table; the source of snapshots; the judge of self-termination."""

    def __init__(
        self,
        *,
        table: MembershipTable,
        address: SiloAddress,
        options: SiloOptions,
        clock: Clock,
        random: random_module.Random,
        run_blocking: BlockingRunner = run_in_thread,
        on_write: OnWrite | None = None,
        fetch_view: FetchView | None = None,
        ask_confirmation: AskConfirmation | None = None,
        overloaded: Callable[[], bool] = lambda: False,
        observer: MembershipObserver = NULL_OBSERVER,
        trusted_gossip: bool = False,
    ) -> None:
        """``trusted_gossip``: only members of the cluster can send us gossip (mutual TLS with
        silo certificates), so votes may be decided on the view (``VoteCaster``). ``overloaded``:
        our event loop lags (``LeaseKeeper``)."""
        self._options = options
        self.view = TableView(
            table=table,
            address=address,
            options=options,
            clock=clock,
            run_blocking=run_blocking,
            on_write=on_write,
            fetch_view=fetch_view,
            observer=observer,
        )
        self.writer = RowWriter(self.view, random)
        self.votes = VoteCaster(self.view, self.writer, can_vote=self.can_vote, trusted_gossip=trusted_gossip)
        self.catch_up = GossipCatchUp(self.view)
        self.refresher = TableRefresh(self.view, random)
        self.lease_keeper = LeaseKeeper(self.view, ask_confirmation, overloaded)

    # --- state -----------------------------------------------------------------------------

    @property
    def snapshot(self) -> MembershipSnapshot:
        return self.view.snapshot

    @property
    def publisher(self) -> SnapshotPublisher:
        return self.view.publisher

    @property
    def terminated(self) -> asyncio.Event:
        return self.view.terminated

    @property
    def termination_reason(self) -> str:
        return self.view.termination_reason

    @property
    def liveness(self) -> LivenessTracker:
        """Which peers are fresh, on our own monotonic clock (fed by every read)."""
        return self.view.liveness

    @property
    def lease(self) -> MembershipLease:
        """When the table last confirmed us Active (``silo.membership.lease``)."""
        return self.view.lease

    @property
    def newest_version_heard(self) -> int:
        return self.view.newest_version_heard

    @property
    def table_available(self) -> bool:
        return self.view.access.available

    @property
    def table_down(self) -> bool:
        """True once table calls have failed for ``probe_timeout`` with no success in between."""
        return self.view.table_down

    @property
    def settle_time(self) -> float:
        return settle_time(self._options)

    def can_vote(self) -> bool:
        """False once this silo terminated or while the table is down (one failed call is not enough)."""
        return not self.view.terminated.is_set() and not self.view.table_down

    def mark_leaving(self) -> None:
        """This silo is about to write itself Dead: reading that back is not a reason to terminate."""
        self.view.leaving = True

    def terminate(self, reason: str) -> None:
        """Signal the runtime to stop serving at once; the first reason wins."""
        self.view.terminate(reason)

    def deadline_in(self, seconds: float) -> float:
        return self.view.access.deadline_in(seconds)

    # --- reads -----------------------------------------------------------------------------

    async def initialize(self, deadline: float | None) -> None:
        view = self.view
        await view.access.call(functools.partial(view.table.initialize, try_init_version=True), deadline)

    async def refresh(self, deadline: float | None = None) -> MembershipSnapshot:
        return await self.view.refresh(deadline)

    async def reread_rows(
        self, silos: Collection[SiloAddress], deadline: float | None = None
    ) -> dict[SiloAddress, MembershipEntry | None]:
        return await self.refresher.reread_rows(silos, deadline)

    def request_refresh(self) -> None:
        self.refresher.request_refresh()

    async def on_gossip(self, message: GossipMessage, sender: SiloAddress | None = None) -> None:
        await self.catch_up.on_gossip(message, sender)

    async def catch_up_to(self, version: int) -> bool:
        return await self.catch_up.catch_up_to(version)

    async def renew_lease(self) -> None:
        await self.lease_keeper.renew_lease()

    async def confirm_member(self, asker: SiloAddress, known_version: int = 0) -> MembershipConfirmation:
        return await self.lease_keeper.confirm_member(asker, known_version)

    def hear_of(self, version: int) -> None:
        self.view.hear_of(version)

    # --- writes ----------------------------------------------------------------------------

    async def insert_self(self, entry: MembershipEntry, deadline: float) -> None:
        await self.writer.insert_self(entry, deadline)

    async def update_row(
        self, silo: SiloAddress, change: Callable[[MembershipEntry], MembershipEntry | None], deadline: float
    ) -> bool:
        return await self.writer.update_row(silo, change, deadline)

    async def update_own_status(self, status: SiloStatus, deadline: float) -> bool:
        return await self.writer.update_own_status(status, deadline)

    async def heartbeat(self, deadline: float) -> None:
        await self.writer.heartbeat(deadline)

    async def cleanup_defunct(self, older_than: float) -> int:
        return await self.writer.cleanup_defunct(older_than)

    async def try_vote(
        self,
        target: SiloAddress,
        *,
        others_unheard: bool = False,
        refused: bool = False,
        still_holds: Callable[[], bool] = lambda: True,
    ) -> VoteOutcome:
        return await self.votes.try_vote(
            target, others_unheard=others_unheard, refused=refused, still_holds=still_holds
        )

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start re-reading the table every ``table_refresh_timeout`` (first tick randomized)."""
        self.refresher.start()

    def start_lease_renewal(self) -> None:
        """Renew the membership lease every ``lease_renew_interval`` (once this silo is Active)."""
        self.lease_keeper.start()

    async def stop(self) -> None:
        """Cancel the queued votes, the lease reads and the requested refresh before the first
        await: a stop cancelled while it waits must not leave a batch of votes to be written later."""
        tasks = [*self.votes.cancel(), *self.refresher.cancel_requested()]
        reads = self.lease_keeper.cancel_reads()
        await self.refresher.stop()
        await self.lease_keeper.stop()
        await asyncio.gather(*tasks, *reads, return_exceptions=True)
        await self.view.publisher.close()
