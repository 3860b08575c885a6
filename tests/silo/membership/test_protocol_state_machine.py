"""Stateful property tests of the failure detector (docs/protocol.md) against a reference model.

Hypothesis drives the real roles on one ``FakeClock`` and one in-memory table, which the
test can switch off and into which it can slip another writer's write just before a
silo's conditional write lands (a lost race):

* ``TableManagerMachine``: several ``MembershipTableManager``s (silos) whose votes, lost
  races, refreshes, heartbeats, gossip, crashes, departures and table outages are rules,
  in any order, with any timing;
* ``MonitorMachine``: the whole failure detector of each silo (``ClusterHealthMonitor``, one
  ``SiloHealthMonitor`` per target, ``LocalHealth``, periodic refresh, heartbeats, gossip)
  driven by a scripted network (each link answers, refuses or times out; indirect probes
  and the vetoes they give follow the same links), crashes, hangs and table outages.

Every silo writes through a ``RecordingTable``, and a reference model keeps what each silo
read and when. After every step:

* ``check_history``: one winner per version and no gaps, Dead is terminal, a death is written
  by one of its voters; and the table's version is exactly the number of successful writes;
* every write was announced to the writer's ``on_write`` (gossip), in order;
* every death another silo wrote carries at least ``required_votes(...)`` distinct voters for
  a *lower bound* of the killer's fresh Active count, derived from what it read (a silo it saw
  heartbeat, or first saw, within the freshness limit of its vote is certainly fresh: time it
  could not read only makes peers fresher); a vote that did not kill had fewer votes than
  required for the upper bound (every Active silo of its read);
* no vote is double-counted, no vote of a silo Dead in the read survives, and no expired vote
  is written; nothing is written while the table is down, and a silo whose table is down does
  not even try to vote;
* a silo that read itself Dead terminated, one that terminated was declared Dead, and a
  terminated silo writes nothing more.

``MonitorMachine`` also checks each vote where it is cast, against the scripted network:

* the monitor suspected the target and the majority rule (``votes.may_vote`` over the
  monitored silos it hears) allowed it, at that moment;
* the voter's own probes of the target had been failing long enough: for the detection time
  less one probe interval, or refusals for ``REFUSAL_RECHECK`` of an interval (a first refusal
  and its recheck on a new connection). An answer, or an intermediary's failure, never makes a
  vote; a target that crashed, hung or exited may be voted against;
* no vote while every other silo was alive and reached the target, and the voter reached
  them, ever since the voter's probes started failing: the indirect round that has to
  precede a vote would have been vetoed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from membership_tables import (
    CommittedWrite,
    MembershipEntry,
    MembershipTable,
    MembershipTableData,
    SiloAddress,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
)
from membership_tables.history import HistoryRecord, RecordingTable
from membership_tables.memory import InMemoryMembershipTable
from silo.membership.agent import MembershipAgent
from silo.membership.clock import FakeClock, settle
from silo.membership.cluster_health import ClusterHealthMonitor
from silo.membership.gossiper import Gossiper
from silo.membership.history_check import check_history
from silo.membership.liveness import freshness_limit
from silo.membership.local_health import LocalHealth
from silo.membership.new_connections import REFUSAL_RECHECK
from silo.membership.options import SiloOptions
from silo.membership.probing import GossipMessage, IndirectProbeResult, ProbeOutcome
from silo.membership.silo_health import SiloHealthMonitor
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.table_access import run_inline
from silo.membership.table_manager import MembershipTableManager
from silo.membership.vote_caster import VIEW_VOTE_GOSSIP_WAIT, VOTE_ATTEMPTS
from silo.membership.votes import VoteOutcome, fresh_votes, may_vote, required_votes
from tests.silo.harness import T0, FunctionProber, RecordingGossip, address, memory_table, row

_T = TypeVar("_T")

OPTIONS = SiloOptions.local()
LIMIT = freshness_limit(OPTIONS)
EXPIRY = OPTIONS.death_vote_expiration
LOST_RACE_WAIT = VIEW_VOTE_GOSSIP_WAIT * OPTIONS.probe_timeout
"""How long a vote that lost its race waits for the winner's gossip before it reads again."""
MAX_SILOS = 5
SKEWS = [0.0, 0.0, -EXPIRY / 8, EXPIRY / 5]
"""Wall-clock skews of the silos: well within the vote expiry (votes of clocks further apart
than the expiry cannot meet, by design)."""
INTRUDER = "operator"
"""The writer of the "touch" lost races: a write by someone outside the cluster."""


# --- the table the test controls ------------------------------------------------------------


def canonical(entry: MembershipEntry) -> MembershipEntry:
    """The row but for its heartbeat, which moves without a version."""
    return entry.replace(i_am_alive_time=entry.start_time)


@dataclass(frozen=True)
class Written:
    """One successful versioned write, in the order the store took them."""

    seq: int
    record: HistoryRecord
    time: float
    """Fake monotonic time of the write."""
    table_down: bool


@dataclass(frozen=True)
class Observation:
    """One snapshot a silo's liveness tracker was fed, and when."""

    seq: int
    time: float
    snapshot: MembershipSnapshot


class Switchboard:
    """The one store every silo shares, with the test's hands on it: off switch, lost races, records."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.store = memory_table()
        self.down = False
        self.written: list[Written] = []
        self.observations: dict[SiloAddress, list[Observation]] = {}
        self.intrusions: dict[SiloAddress, deque[Callable[[], None]]] = {}
        self.calls: Counter[SiloAddress] = Counter()
        self.sequence = itertools.count()
        self.states: dict[int, dict[SiloAddress, MembershipEntry]] = {}
        """The store's rows (heartbeats aside) right after each silo write, by the version it set."""

    def record_state(self) -> None:
        data = self.store.read_all()
        self.states[data.version.version] = {entry.silo_address: canonical(entry) for entry in data.entries}

    def append(self, record: HistoryRecord) -> None:  # the HistorySink of every RecordingTable
        self.written.append(Written(next(self.sequence), record, self.clock.monotonic(), self.down))

    def observed(self, silo: SiloAddress, snapshot: MembershipSnapshot) -> None:
        observation = Observation(next(self.sequence), self.clock.monotonic(), snapshot)
        self.observations.setdefault(silo, []).append(observation)

    def records(self) -> list[HistoryRecord]:
        return [written.record for written in self.written]

    def writes_by(self, writer: SiloAddress, since: int) -> list[Written]:
        return [written for written in self.written[since:] if written.record.writer == str(writer)]


class Gate(MembershipTable):
    """One silo's view of the shared store: raises while the switchboard is down, and lets a
    queued intrusion (another writer) write just before each of this silo's versioned writes."""

    def __init__(self, board: Switchboard, silo: SiloAddress) -> None:
        super().__init__(board.store.cluster_id)
        self.max_rows_per_update = board.store.max_rows_per_update
        self.board = board
        self.silo = silo

    def _enter(self) -> None:
        self.board.calls[self.silo] += 1
        if self.board.down:
            raise TableUnavailableError("the test switched the table off") from ConnectionError("refused")

    def _intrude(self) -> None:
        queue = self.board.intrusions.get(self.silo)
        if queue:
            queue.popleft()()

    def initialize(self, try_init_version: bool = True) -> None:
        self._enter()
        self.board.store.initialize(try_init_version)

    def read_all(self) -> MembershipTableData:
        self._enter()
        return self.board.store.read_all()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        self._enter()
        return self.board.store.read_row(silo_address)

    def read_version(self) -> TableVersion:
        self._enter()
        return self.board.store.read_version()

    def insert_row(self, entry: MembershipEntry, version: TableVersion) -> bool:
        self._enter()
        self._intrude()
        return self.board.store.insert_row(entry, version)

    def update_row(self, entry: MembershipEntry, etag: str, version: TableVersion) -> bool:
        self._enter()
        self._intrude()
        return self.board.store.update_row(entry, etag, version)

    def update_rows(self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion) -> bool:
        self._enter()
        self._intrude()
        return self.board.store.update_rows(updates, version)

    def insert_row_with_etags(self, entry: MembershipEntry, version: TableVersion) -> CommittedWrite | None:
        self._enter()
        self._intrude()
        committed = self.board.store.insert_row_with_etags(entry, version)
        if committed is not None:
            self.board.record_state()
        return committed

    def insert_row_at_next_version(self, entry: MembershipEntry) -> CommittedWrite | None:
        self._enter()
        self._intrude()
        committed = self.board.store.insert_row_at_next_version(entry)
        if committed is not None:
            self.board.record_state()
        return committed

    def update_row_at_next_version(self, entry: MembershipEntry, etag: str) -> CommittedWrite | None:
        self._enter()
        self._intrude()
        committed = self.board.store.update_row_at_next_version(entry, etag)
        if committed is not None:
            self.board.record_state()
        return committed

    def update_rows_with_etags(
        self, updates: Sequence[tuple[MembershipEntry, str]], version: TableVersion
    ) -> CommittedWrite | None:
        self._enter()
        self._intrude()
        committed = self.board.store.update_rows_with_etags(updates, version)
        if committed is not None:
            self.board.record_state()
        return committed

    def update_i_am_alive(self, silo_address: SiloAddress, when: datetime) -> None:
        self._enter()
        self.board.store.update_i_am_alive(silo_address, when)

    def cleanup_defunct_entries(self, before: datetime) -> int:
        self._enter()
        return self.board.store.cleanup_defunct_entries(before)

    def delete_cluster_entries(self) -> None:
        self._enter()
        self.board.store.delete_cluster_entries()


class SkewedClock:
    """The shared fake clock, with this silo's wall clock off by ``skew`` seconds."""

    def __init__(self, base: FakeClock, skew: float) -> None:
        self.base = base
        self.skew = skew

    def now(self) -> datetime:
        return self.base.now() + timedelta(seconds=self.skew)

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)


def run_to_completion(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine that never suspends (the inline table runner): one ``send`` finishes it.

    This is how a rival's whole vote (read, decide, write, re-read) slips in between another
    silo's read and its write: from inside that silo's table call.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    coroutine.close()
    raise AssertionError("a table-manager call suspended although the table runs inline")


async def cancel_the_rest() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- silos ----------------------------------------------------------------------------------------


@dataclass
class Member:
    index: int
    address: SiloAddress
    clock: SkewedClock
    manager: MembershipTableManager
    state: str = "up"
    """"up", "crashed" (nothing listens: probes are refused) or "hung" (probes time out)."""
    down_at: float | None = None
    leaving: bool = False
    writes: list[int] = field(default_factory=list)
    declared: list[SiloAddress] = field(default_factory=list)
    last_gossip: GossipMessage | None = None
    """What this silo gossiped after its latest write (a delta)."""

    @property
    def up(self) -> bool:
        return self.state == "up"

    @property
    def terminated(self) -> bool:
        return self.manager.terminated.is_set()

    @property
    def acting(self) -> bool:
        """Still running its roles: neither crashed, hung, terminated nor gone."""
        return self.up and not self.terminated and not self.leaving


silo_indexes = st.integers(0, MAX_SILOS - 1)


class ErrorLog(logging.Handler):
    """Collects the errors the roles log (a periodic task that raised, an unretrieved task exception)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.errors.append(record.getMessage() + (f": {record.exc_info[1]!r}" if record.exc_info else ""))


QUIET = ("silo", "asyncio")
"""Loggers turned down to errors while a machine runs: the roles warn on every outage and vote."""


class ClusterMachine(RuleBasedStateMachine):
    """What both machines share: the clock, the table, the silos, and the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.error_log = ErrorLog()
        self.log_levels = {name: logging.getLogger(name).level for name in QUIET}
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.ERROR)
            logging.getLogger(name).addHandler(self.error_log)
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock(T0)
        self.board = Switchboard(self.clock)
        self.members: list[Member] = []
        self.checked = 0
        """How many written records the per-write checks have seen."""
        self.replayed: dict[SiloAddress, MembershipEntry] = {}
        self.snapshot_versions: dict[SiloAddress, int] = {}
        self.terminated_before: set[SiloAddress] = set()
        self.written_before = 0
        self.outage_ends = 0.0

    # --- plumbing -------------------------------------------------------------------------

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coroutine)

    async def voted(self, vote: Coroutine[Any, Any, VoteOutcome]) -> VoteOutcome:
        """``vote``'s outcome, time moving on while it waits for a lost race's winner to gossip
        (nobody gossips here unless the ``gossip`` rule says so)."""
        task = asyncio.ensure_future(vote)
        await settle()
        while not task.done():
            await self.clock.advance(LOST_RACE_WAIT)
        return task.result()

    def member(self, index: int) -> Member:
        return self.members[index % len(self.members)]

    def by_writer(self, writer: str) -> Member | None:
        return next((member for member in self.members if str(member.address) == writer), None)

    def new_manager(self, index: int, skew: float) -> Member:
        silo = address(11001 + index)
        clock = SkewedClock(self.clock, skew)
        table = RecordingTable(Gate(self.board, silo), str(silo), self.board)
        member: Member

        def on_write(
            message: GossipMessage, snapshot: MembershipSnapshot, declared_dead: tuple[SiloAddress, ...]
        ) -> None:
            member.writes.append(message.version)
            member.last_gossip = message
            member.declared.extend(declared_dead)
            self.after_write(member, message, declared_dead)

        manager = MembershipTableManager(
            table=table,
            address=silo,
            options=OPTIONS,
            clock=clock,
            random=random.Random(index),
            run_blocking=run_inline,
            on_write=on_write,
        )
        observe = manager.liveness.observe

        def observe_and_log(snapshot: MembershipSnapshot) -> None:
            self.board.observed(silo, snapshot)
            observe(snapshot)

        manager.liveness.observe = observe_and_log  # type: ignore[method-assign]
        member = Member(index, silo, clock, manager)
        return member

    def after_write(self, member: Member, message: GossipMessage, declared_dead: tuple[SiloAddress, ...]) -> None:
        """Hook for the machines (gossip)."""

    async def join_all(self) -> None:
        """Every silo inserts itself Joining, then writes itself Active (the real write paths)."""
        self.board.store.initialize()
        for member in self.members:
            now = member.clock.now()
            await member.manager.insert_self(
                row(member.address, SiloStatus.JOINING, now), member.manager.deadline_in(5)
            )
        for member in self.members:
            assert await member.manager.update_own_status(SiloStatus.ACTIVE, member.manager.deadline_in(5))
        for member in self.members:
            await member.manager.refresh()

    def teardown(self) -> None:
        try:
            self.run(self.stop_everything())
            self.run(cancel_the_rest())
        finally:
            self.loop.close()
            InMemoryMembershipTable.reset(self.board.store.name)  # type: ignore[attr-defined]
            for name, level in self.log_levels.items():
                logging.getLogger(name).setLevel(level)
                logging.getLogger(name).removeHandler(self.error_log)

    async def stop_everything(self) -> None:
        for member in self.members:
            await member.manager.stop()

    def set_down(self, down: bool) -> None:
        self.board.down = down

    def advance(self, seconds: float) -> None:
        """Move time on; an outage ends when its time is up (at that moment, not at the end)."""
        end = self.clock.monotonic() + seconds
        if self.board.down and self.outage_ends < end:
            self.run(self.clock.advance(max(0.0, self.outage_ends - self.clock.monotonic())))
            self.set_down(False)
        self.run(self.clock.advance(max(0.0, end - self.clock.monotonic())))

    @rule(seconds=st.sampled_from([0.25, 1.0, 3.0, 8.0]))
    def table_outage(self, seconds: float) -> None:
        """The table becomes unreachable for ``seconds`` (other rules run meanwhile)."""
        if not self.board.down:
            self.set_down(True)
            self.outage_ends = self.clock.monotonic() + seconds

    @rule()
    def table_comes_back(self) -> None:
        self.set_down(False)

    def intrusion(self, kind: str, rival: Member, voter: Member, target: SiloAddress) -> Callable[[], None]:
        """A write that lands between ``voter``'s read and its write."""

        def touch() -> None:
            data = self.board.store.read_all()
            live = [(entry, etag) for entry, etag in data.rows if entry.status is not SiloStatus.DEAD]
            if not live:
                return
            entry, etag = next(((e, t) for e, t in live if e.silo_address == target), live[0])
            touched = entry.replace(properties={**entry.properties, "touched": str(data.version.version)})
            RecordingTable(self.board.store, INTRUDER, self.board).update_row(touched, etag, data.version.next())

        def rival_vote() -> None:
            outcome = run_to_completion(rival.manager.try_vote(target))
            event(f"rival vote slipped in: {outcome.value}")

        if kind == "rival" and rival is not voter and rival.up:
            return rival_vote
        return touch

    # --- the reference model: what each silo read -----------------------------------------------

    def fresh_bounds(self, voter: SiloAddress, before_seq: int) -> tuple[int, int, MembershipSnapshot]:
        """(certainly fresh, at most fresh) Active silos for ``voter``'s vote read, and that read.

        A peer is certainly fresh if the voter saw its heartbeat change (or first saw it)
        within the freshness limit before the vote: the tracker only ever moves that moment
        later (it does not count time it could not read), never earlier.
        """
        observations = [o for o in self.board.observations.get(voter, []) if o.seq < before_seq]
        assert observations, f"{voter} wrote a vote without reading the table first"
        highest: dict[SiloAddress, datetime] = {}
        changed: dict[SiloAddress, float] = {}
        for observation in observations:
            present = set()
            for entry in observation.snapshot.entries:
                silo = entry.silo_address
                present.add(silo)
                if silo not in highest or entry.i_am_alive_time > highest[silo]:
                    highest[silo], changed[silo] = entry.i_am_alive_time, observation.time
            for gone in set(highest) - present:
                del highest[gone], changed[gone]
        read = observations[-1]
        active = [entry.silo_address for entry in read.snapshot.with_status(SiloStatus.ACTIVE)]
        certain = sum(1 for silo in active if read.time - changed[silo] <= LIMIT)
        return certain, len(active), read.snapshot

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def no_role_failed(self) -> None:
        assert not self.error_log.errors, "\n".join(self.error_log.errors)

    @invariant()
    def history_holds(self) -> None:
        records = self.board.records()
        violations = check_history(records, min_voters=1, protected=self.protected())
        assert not violations, "\n".join(violations)
        version = self.board.store.read_all().version.version
        assert version == len(records), f"table at version {version} after {len(records)} successful writes"

    def protected(self) -> set[SiloAddress]:
        return set()

    def stored_status(self, silo: SiloAddress) -> SiloStatus:
        found = self.board.store.read_row(silo).get(silo)
        return found[0].status if found else SiloStatus.NONE

    @invariant()
    def every_write_follows_the_vote_rules(self) -> None:
        ordered = sorted(self.board.written[self.checked :], key=lambda written: written.record.version)
        for written in ordered:
            self.check_write(written)
            self.replayed[written.record.silo] = written.record.entry
        self.checked = len(self.board.written)

    def check_write(self, written: Written) -> None:
        record, entry = written.record, written.record.entry
        assert not written.table_down, f"written while the table was down: {record.describe()}"
        voters = [voter for voter, _ in entry.suspect_times]
        assert len(set(voters)) == len(voters), f"a vote counted twice: {record.describe()}"
        writer = self.by_writer(record.writer)
        if writer is None or record.silo == writer.address:
            return  # the operator's touch, or a silo writing its own row
        assert writer.address in voters, (
            f"{writer.address} wrote {record.silo}'s row without voting: {record.describe()}"
        )
        now = T0 + timedelta(seconds=written.time + writer.clock.skew)
        kept = tuple(vote for vote in entry.suspect_times if vote[0] != writer.address)
        assert fresh_votes(kept, now, EXPIRY) == kept, f"an expired vote was kept: {record.describe()}"
        dead = {silo for silo, before in self.replayed.items() if before.status is SiloStatus.DEAD}
        assert not (set(voters) - {writer.address}) & dead, f"a Dead silo's vote was kept: {record.describe()}"
        certain, at_most, read = self.fresh_bounds(writer.address, written.seq)
        required = required_votes(OPTIONS.num_votes_for_death_declaration, certain)
        if entry.status is SiloStatus.DEAD:
            assert voters[-1] == writer.address, f"the killer's vote must come last: {record.describe()}"
            assert len(set(voters)) >= required, (
                f"{record.describe()}: {len(set(voters))} voter(s), but at least {certain} Active silos were "
                f"fresh for {writer.address}, so {required} are required (its read: v{read.version})"
            )
            event(f"death declared with {len(voters)} of {required}+ votes")
        else:
            ceiling = required_votes(OPTIONS.num_votes_for_death_declaration, at_most)
            assert len(voters) < ceiling, f"{record.describe()}: {len(voters)} votes reach the quorum {ceiling}"

    @invariant()
    def silos_terminate_exactly_when_declared_dead(self) -> None:
        rows = {entry.silo_address: entry for entry in self.board.store.read_all().entries}
        for member in self.members:
            own = member.manager.snapshot.entry(member.address)
            if own is not None and own.status is SiloStatus.DEAD and not member.leaving:
                assert member.terminated, f"{member.address} read itself Dead but did not terminate"
            if member.terminated:
                assert rows[member.address].status is SiloStatus.DEAD, (
                    f"{member.address} terminated ({member.manager.termination_reason}) but is not Dead"
                )
        for silo in self.terminated_before:
            late = self.board.writes_by(silo, self.written_before)
            assert not late, f"{silo} wrote after it terminated: {late[0].record.describe()}"
        self.terminated_before = {member.address for member in self.members if member.terminated}
        self.written_before = len(self.board.written)

    @invariant()
    def every_write_was_announced(self) -> None:
        """The writer's ``on_write`` (the gossiper) heard of each of its successful writes, in order."""
        for member in self.members:
            versions = [w.record.version for w in self.board.written if w.record.writer == str(member.address)]
            assert member.writes == versions, f"{member.address} wrote {versions} but announced {member.writes}"

    @invariant()
    def every_snapshot_is_the_table_at_its_version(self) -> None:
        """Snapshots built from deltas and peers' views hold exactly the rows the table held at that version.

        Heartbeats aside; a Dead row may be missing (cleanup removes Dead rows without a version).
        """
        for member in self.members:
            snapshot = member.manager.snapshot
            state = self.board.states.get(snapshot.version)
            if state is None:
                continue  # a version set by an intruder, or before the first silo write
            held = {entry.silo_address: canonical(entry) for entry in snapshot.entries}
            for silo, entry in state.items():
                if entry.status is SiloStatus.DEAD and silo not in held:
                    continue
                assert held.get(silo) == entry, f"{member.address} holds {held.get(silo)} at version {snapshot.version}"
            assert held.keys() <= state.keys(), f"{member.address} holds rows the table never had at that version"

    @invariant()
    def snapshots_never_go_back(self) -> None:
        for member in self.members:
            version = member.manager.snapshot.version
            assert version >= self.snapshot_versions.get(member.address, 0), f"{member.address} went back"
            self.snapshot_versions[member.address] = version


# --- machine 1: table managers driven by rules ---------------------------------------------------


class TableManagerMachine(ClusterMachine):
    """Votes, lost races, reads, heartbeats, gossip, crashes and outages in any order."""

    @initialize(
        size=st.integers(3, MAX_SILOS),
        skews=st.lists(st.sampled_from(SKEWS), min_size=MAX_SILOS, max_size=MAX_SILOS),
    )
    def start_cluster(self, size: int, skews: list[float]) -> None:
        self.members = [self.new_manager(index, skews[index]) for index in range(size)]
        self.run(self.join_all())
        note(f"silos: {', '.join(f'{m.address} (clock {m.clock.skew:+}s)' for m in self.members)}")

    @rule(
        voter=silo_indexes,
        suspect_index=silo_indexes,
        races=st.integers(0, VOTE_ATTEMPTS + 1),
        kind=st.sampled_from(["touch", "rival"]),
        rival=silo_indexes,
    )
    def vote(self, voter: int, suspect_index: int, races: int, kind: str, rival: int) -> None:
        member, suspect = self.member(voter), self.member(suspect_index)
        if not member.up or member is suspect:
            return
        written, calls, start = len(self.board.written), self.board.calls[member.address], self.clock.monotonic()
        was_down, board_down = member.manager.table_down, self.board.down
        known_dead = member.manager.can_vote() and member.manager.snapshot.status_of(suspect.address) is SiloStatus.DEAD
        queue = self.board.intrusions.setdefault(member.address, deque())
        queue.extend(self.intrusion(kind, self.member(rival), member, suspect.address) for _ in range(races))
        outcome = self.run(self.voted(member.manager.try_vote(suspect.address)))
        queue.clear()
        event(f"vote: {outcome.value}" + (f" after {races} lost race(s)" if races else ""))
        waited = self.clock.monotonic() - start
        assert waited <= races * LOST_RACE_WAIT + 1e-9, f"waited {waited}s after {races} lost race(s)"
        mine = self.board.writes_by(member.address, written)
        if known_dead:  # Dead is terminal: no read, no write
            assert outcome is VoteOutcome.ALREADY_GONE
            assert self.board.calls[member.address] == calls, "a gossiped death spares the read"
        elif board_down:
            assert outcome is VoteOutcome.NOT_ALLOWED, f"voted while the table was down: {outcome}"
        if board_down:
            assert len(self.board.written) == written
        if was_down:
            assert outcome is VoteOutcome.NOT_ALLOWED
            assert self.board.calls[member.address] == calls, "a silo whose table is down must not even try"
        if outcome in (VoteOutcome.VOTED, VoteOutcome.DECLARED_DEAD):
            assert len(mine) == 1, f"{outcome}: {len(mine)} writes"
            entry = mine[0].record.entry
            assert entry.silo_address == suspect.address
            assert (entry.status is SiloStatus.DEAD) == (outcome is VoteOutcome.DECLARED_DEAD)
            assert suspect.address in member.declared or outcome is VoteOutcome.VOTED
        else:
            assert not mine, f"{outcome} but {member.address} wrote {mine[0].record.describe()}"
        if outcome is VoteOutcome.LOST_RACE:
            assert races >= VOTE_ATTEMPTS, f"lost the race with only {races} intruder(s)"
        if outcome is VoteOutcome.ALREADY_GONE:
            assert self.stored_status(suspect.address) is SiloStatus.DEAD
        if kind == "touch" and races >= VOTE_ATTEMPTS and outcome not in (VoteOutcome.NOT_ALLOWED,):
            assert outcome in (VoteOutcome.LOST_RACE, VoteOutcome.ALREADY_GONE), outcome

    @rule(silo=silo_indexes)
    def heartbeat(self, silo: int) -> None:
        member = self.member(silo)
        if member.acting:
            self.beat(member)

    def beat(self, member: Member) -> None:
        try:
            self.run(member.manager.heartbeat(None))  # type: ignore[arg-type]  # no deadline: one attempt
        except TableUnavailableError:
            event("heartbeat while the table is down")

    @rule(silo=silo_indexes)
    def refresh(self, silo: int) -> None:
        member = self.member(silo)
        if not member.up:
            return
        written = len(self.board.written)
        try:
            self.run(member.manager.refresh())
        except TableUnavailableError:
            event("refresh while the table is down")
        assert len(self.board.written) == written, "a read wrote something"

    @rule(sender_index=silo_indexes, receiver_index=silo_indexes)
    def gossip(self, sender_index: int, receiver_index: int) -> None:
        sender, receiver = self.member(sender_index), self.member(receiver_index)
        if sender.up and receiver.up:
            written = len(self.board.written)
            message = sender.last_gossip or GossipMessage(sender.manager.snapshot.version)
            self.run(receiver.manager.on_gossip(message, sender.address))
            assert len(self.board.written) == written, "gossip wrote something"

    @rule(seconds=st.sampled_from([0.25, 1.0, 2.0, 3.0, 5.0, 8.0, 15.0]))
    def time_passes(self, seconds: float) -> None:
        """Time passes; every silo still running heartbeats once a period, as its agent would."""
        period = OPTIONS.i_am_alive_table_publish_timeout
        for _ in range(int(seconds // period)):
            self.advance(period)
            for member in self.members:
                if member.acting:
                    self.beat(member)
        self.advance(seconds % period)

    @rule(silo=silo_indexes)
    def crash(self, silo: int) -> None:
        member = self.member(silo)
        if member.up:
            member.state, member.down_at = "crashed", self.clock.monotonic()

    @precondition(lambda self: not self.board.down)
    @rule(silo=silo_indexes)
    def leave(self, silo: int) -> None:
        """Graceful stop: ShuttingDown, then Dead (the table is up, so nothing waits)."""
        member = self.member(silo)
        if not member.acting:
            return
        member.leaving = True
        member.manager.mark_leaving()
        deadline = member.manager.deadline_in(OPTIONS.detection_time)
        for status in (SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD):
            if not self.run(member.manager.update_own_status(status, deadline)):
                break


# --- machine 2: the whole failure detector on a scripted network ------------------------------


LINK_OUTCOMES = [ProbeOutcome.ANSWERED, ProbeOutcome.TIMED_OUT, ProbeOutcome.REFUSED]


@dataclass
class Detector:
    """The failure-detection roles of one silo, composed as ``silo.runtime.Silo`` composes them."""

    health: LocalHealth
    cluster: ClusterHealthMonitor
    agent: MembershipAgent
    gossiper: Gossiper
    watcher: asyncio.Task[None] | None = None
    stopped: bool = False

    async def stop(self, manager: MembershipTableManager) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.cluster.stop()
        await self.agent.stop_heartbeat()
        await self.gossiper.stop()
        await manager.stop()


@dataclass(frozen=True)
class GateCheck:
    """What a monitor saw when it asked whether it may vote."""

    time: float
    suspected: bool
    majority: bool
    allowed: bool


class MonitorMachine(ClusterMachine):
    """Probes answer, refuse or time out per link; silos crash or hang; the detector votes by itself."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[tuple[int, int], ProbeOutcome] = {}
        self.link_log: dict[tuple[int, int], list[tuple[float, ProbeOutcome]]] = {}
        self.detectors: dict[int, Detector] = {}
        self.gates: dict[tuple[int, SiloAddress], GateCheck] = {}
        self.violations: list[str] = []

    @initialize(
        size=st.integers(3, MAX_SILOS),
        skews=st.lists(st.sampled_from(SKEWS), min_size=MAX_SILOS, max_size=MAX_SILOS),
    )
    def start_cluster(self, size: int, skews: list[float]) -> None:
        self.members = [self.new_manager(index, skews[index]) for index in range(size)]
        self.run(self.join_all())
        for member in self.members:
            self.detectors[member.index] = self.run(self.start_detector(member))
        note(f"silos: {', '.join(f'{m.address} (clock {m.clock.skew:+}s)' for m in self.members)}")

    # --- the network --------------------------------------------------------------------------

    def link(self, source: int, target: int) -> ProbeOutcome:
        return self.links.get((source, target), ProbeOutcome.ANSWERED)

    def set_link(self, source: int, target: int, outcome: ProbeOutcome) -> None:
        if source == target or self.link(source, target) is outcome:
            return
        self.links[(source, target)] = outcome
        self.link_log.setdefault((source, target), []).append((self.clock.monotonic(), outcome))

    def failing_since(self, source: int, target: int, until: float) -> tuple[float, bool] | None:
        """When the link's latest run of failures up to ``until`` began, and whether it refused.

        A probe leaves every interval, so an answering spell no longer than one interval may
        have carried no probe at all: it does not end the run. None if the link has answered
        for more than one interval.
        """
        interval, slack = OPTIONS.effective_probe_interval, 1e-6
        changes = [(0.0, ProbeOutcome.ANSWERED)]
        changes += [(when, outcome) for when, outcome in self.link_log.get((source, target), []) if when <= until]
        ends = [when for when, _ in changes[1:]] + [until]
        spells = [(start, end, outcome) for (start, outcome), end in zip(changes, ends, strict=True)]
        if spells[-1][2] is ProbeOutcome.ANSWERED and spells[-1][1] - spells[-1][0] > interval + slack:
            return None
        run: list[tuple[float, float, ProbeOutcome]] = []
        for spell in reversed(spells):
            if spell[2] is ProbeOutcome.ANSWERED and spell[1] - spell[0] > interval + slack:
                break
            run.insert(0, spell)
        failures = [spell for spell in run if spell[2] is not ProbeOutcome.ANSWERED]
        if not failures:
            return None
        return failures[0][0], any(outcome is ProbeOutcome.REFUSED for _, _, outcome in failures)

    def link_bad_within(self, source: int, target: int, since: float, until: float) -> bool:
        """Whether the link failed (did not answer) at any moment of [since, until]."""
        state = ProbeOutcome.ANSWERED
        for when, outcome in self.link_log.get((source, target), []):
            if when <= since:
                state = outcome
            elif when <= until and outcome is not ProbeOutcome.ANSWERED:
                return True
        return state is not ProbeOutcome.ANSWERED

    def alive(self, member: Member) -> bool:
        """Up and serving: a silo that terminated itself has exited (its port refuses)."""
        return member.up and not member.terminated

    def prober(self, source: Member) -> FunctionProber:
        def reachable(target: SiloAddress) -> bool | ProbeOutcome | asyncio.Future[bool]:
            peer = self.by_address(target)
            if peer.state == "crashed" or peer.terminated:
                return ProbeOutcome.REFUSED
            outcome = self.link(source.index, peer.index)
            if peer.state == "hung" or outcome is ProbeOutcome.TIMED_OUT:
                return self.loop.create_future()  # silence: the ping's timeout ends it
            return True if outcome is ProbeOutcome.ANSWERED else ProbeOutcome.REFUSED

        def indirect(intermediary: SiloAddress, target: SiloAddress) -> asyncio.Future[IndirectProbeResult]:
            via, peer = self.by_address(intermediary), self.by_address(target)
            answer: asyncio.Future[IndirectProbeResult] = self.loop.create_future()
            if via.state == "crashed" or via.terminated or self.link(source.index, via.index) is ProbeOutcome.REFUSED:
                answer.set_exception(ConnectionError(f"{intermediary} refused"))
            elif via.up and self.link(source.index, via.index) is ProbeOutcome.ANSWERED:
                reached = self.alive(peer) and self.link(via.index, peer.index) is ProbeOutcome.ANSWERED
                answer.set_result(IndirectProbeResult(reached, 0, 0.01, "" if reached else "no answer"))
            return answer  # otherwise never answers: the caller's timeout ends it

        return FunctionProber(reachable=reachable, indirect=indirect)

    def by_address(self, silo: SiloAddress) -> Member:
        return next(member for member in self.members if member.address == silo)

    # --- one silo's detector ------------------------------------------------------------------------

    async def start_detector(self, member: Member) -> Detector:
        manager, prober = member.manager, self.prober(member)
        health = LocalHealth(
            address=member.address, options=OPTIONS, clock=member.clock, snapshot=lambda: manager.snapshot
        )

        async def deliver(target: SiloAddress, message: GossipMessage) -> None:
            peer = self.by_address(target)
            if not self.alive(peer) or self.link(member.index, peer.index) is not ProbeOutcome.ANSWERED:
                raise ConnectionError(f"{target} is unreachable from {member.address}")
            await peer.manager.on_gossip(message, member.address)

        gossiper = Gossiper(
            address=member.address,
            options=OPTIONS,
            clock=member.clock,
            sender=RecordingGossip(deliver=deliver),
            is_fresh=manager.liveness.is_fresh,
        )

        def create_monitor(target: SiloAddress, cluster: ClusterHealthMonitor) -> SiloHealthMonitor:
            monitors: list[SiloHealthMonitor] = []

            def gate() -> bool:
                allowed = cluster.may_vote()
                fresh = [m for silo, m in cluster.monitors.items() if manager.liveness.is_fresh(silo)]
                majority = may_vote(sum(1 for m in fresh if m.heard_recently()), len(fresh))
                self.gates[(member.index, target)] = GateCheck(
                    self.clock.monotonic(), monitors[0].suspected(), majority, allowed
                )
                return allowed

            async def vote(suspect: SiloAddress, *, refused: bool, still_holds: Callable[[], bool]) -> VoteOutcome:
                self.check_vote(member, suspect, cluster, refused=refused)
                calls, was_down = self.board.calls[member.address], manager.table_down
                outcome = await manager.try_vote(suspect, refused=refused, still_holds=still_holds)
                event(f"monitor vote: {outcome.value}")
                if was_down and self.board.calls[member.address] != calls:
                    self.violations.append(f"{member.address} tried to vote while its table was down")
                return outcome

            monitor = SiloHealthMonitor(
                target=target,
                local=member.address,
                options=OPTIONS,
                clock=member.clock,
                prober=prober,
                local_health=health,
                intermediaries=cluster.intermediaries,
                may_vote=gate,
                vote=vote,
                random=random.Random(member.index * 100 + target.port),
                vote_delay=lambda: cluster.vote_delay(target),
            )
            monitors.append(monitor)
            return monitor

        cluster = ClusterHealthMonitor(
            local=member.address,
            options=OPTIONS,
            clock=member.clock,
            publisher=manager.publisher,
            liveness=manager.liveness,
            create_monitor=create_monitor,
            local_health=health,
            prober=prober,
            on_minority=manager.request_refresh,
        )
        agent = MembershipAgent(
            manager=manager, address=member.address, options=OPTIONS, clock=member.clock, prober=prober
        )
        detector = Detector(health, cluster, agent, gossiper)
        manager.start()
        agent.start_heartbeat()
        cluster.start()

        async def stop_when_terminated() -> None:
            await manager.terminated.wait()
            await detector.stop(manager)

        detector.watcher = asyncio.create_task(stop_when_terminated())
        return detector

    def after_write(self, member: Member, message: GossipMessage, declared_dead: tuple[SiloAddress, ...]) -> None:
        detector = self.detectors.get(member.index)
        if detector is not None and not detector.stopped:
            detector.gossiper.publish(message, member.manager.snapshot, declared_dead)

    def check_vote(self, member: Member, suspect: SiloAddress, cluster: ClusterHealthMonitor, *, refused: bool) -> None:
        """The rules a vote must follow, checked when the monitor casts it. A vote on refusals
        (``refused``) does not ask the majority rule (no cut refuses:
        ``SiloHealthMonitor._allowed_to_vote``) nor wait for an indirect round, which vetoes only
        silence (``SiloHealthMonitor._round_wanted``); its suspicion is checked below like any other."""
        now, target = self.clock.monotonic(), self.by_address(suspect)
        gate = self.gates.get((member.index, suspect))
        if not refused and (
            gate is None or gate.time != now or not (gate.suspected and gate.majority and gate.allowed)
        ):
            self.violations.append(f"{member.address} voted against {suspect} at {now}s without {gate}")
        if not self.alive(target):
            return  # it crashed, hung or exited: any vote against it is fair
        interval, slack = OPTIONS.effective_probe_interval, 1e-6
        failing = self.failing_since(member.index, target.index, now)
        if failing is None:
            self.violations.append(
                f"{member.address} voted against {suspect} at {now}s although its probes answered for over an interval"
            )
            return
        began, link_refused = failing
        needed = REFUSAL_RECHECK * interval if link_refused else OPTIONS.detection_time - interval
        if now - began < needed - slack:
            self.violations.append(
                f"{member.address} voted against {suspect} at {now}s after its link failed for only "
                f"{now - began}s (since {began}s{', refusing' if link_refused else ''}): no suspicion yet"
            )
        others = [m for m in self.members if m is not member and m is not target]
        since = began - interval  # the round that allowed this vote started after the last answer
        vetoed = all(
            self.alive(other)
            and not self.link_bad_within(member.index, other.index, since, now)
            and not self.link_bad_within(other.index, target.index, since, now)
            for other in others
        )
        if not refused and others and vetoed and cluster.intermediaries():
            self.violations.append(
                f"{member.address} voted against {suspect} at {now}s although every intermediary reached it "
                f"since its link failed ({began}s)"
            )

    async def stop_everything(self) -> None:
        for member in self.members:
            detector = self.detectors.get(member.index)
            if detector is not None:
                await detector.stop(member.manager)
                if detector.watcher is not None:
                    detector.watcher.cancel()
        await asyncio.sleep(0)

    def protected(self) -> set[SiloAddress]:
        """Silos never down and never cut from anyone: nobody has evidence against them."""
        return {
            member.address
            for member in self.members
            if member.down_at is None and not any(target == member.index for (_, target) in self.link_log)
        }

    # --- rules --------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.advance(seconds)

    @rule(prober=silo_indexes, probed=silo_indexes, outcome=st.sampled_from(LINK_OUTCOMES))
    def probe_outcome(self, prober: int, probed: int, outcome: ProbeOutcome) -> None:
        """From now on, ``prober``'s probes of ``probed`` (direct, or as an intermediary) end this way."""
        self.set_link(self.member(prober).index, self.member(probed).index, outcome)

    @rule(side=st.sets(silo_indexes, min_size=1, max_size=2))
    def partition(self, side: set[int]) -> None:
        """Cut every link between ``side`` and the rest both ways (silence), heal the others."""
        chosen = {self.member(index).index for index in side}
        for a, b in itertools.permutations(range(len(self.members)), 2):
            cut = (a in chosen) != (b in chosen)
            self.set_link(a, b, ProbeOutcome.TIMED_OUT if cut else ProbeOutcome.ANSWERED)

    @rule()
    def heal(self) -> None:
        for a, b in itertools.permutations(range(len(self.members)), 2):
            self.set_link(a, b, ProbeOutcome.ANSWERED)

    @rule(silo=silo_indexes, hang=st.booleans())
    def crash(self, silo: int, hang: bool) -> None:
        """SIGKILL (probes are refused) or SIGSTOP (probes time out): the silo does nothing any more."""
        member = self.member(silo)
        if not member.up or sum(1 for m in self.members if m.up) <= 2:
            return
        member.state, member.down_at = ("hung" if hang else "crashed"), self.clock.monotonic()
        self.run(self.detectors[member.index].stop(member.manager))

    @invariant()
    def votes_follow_the_detector_rules(self) -> None:
        assert not self.violations, "\n".join(self.violations)


# The budget comes from the hypothesis profile (tests/conftest.py), scaled by what a run costs:
# the table-manager machine is all in memory (~25 ms per 30-step run), the monitor machine
# simulates every probe (~200 ms per run).
TestTableManagerStateMachine = TableManagerMachine.TestCase
TestTableManagerStateMachine.settings = settings(max_examples=20 * settings().max_examples)
TestMonitorStateMachine = MonitorMachine.TestCase
TestMonitorStateMachine.settings = settings(max_examples=3 * settings().max_examples)


def check_every_invariant(machine: ClusterMachine) -> None:
    for name in (
        "no_role_failed",
        "history_holds",
        "every_write_follows_the_vote_rules",
        "silos_terminate_exactly_when_declared_dead",
        "every_write_was_announced",
        "every_snapshot_is_the_table_at_its_version",
        "snapshots_never_go_back",
        "votes_follow_the_detector_rules",
    ):
        getattr(machine, name)()


@settings(max_examples=1, database=None, deadline=None)
@given(st.none())  # one run, inside Hypothesis (the machine records notes)
def test_a_silo_that_reads_itself_dead_while_a_view_change_stops_a_monitor_casts_no_vote_later(nothing: None) -> None:
    """A run the monitor machine found in CI, replayed step by step.

    Silo 3 (127.0.0.1:11004) read itself Dead at 15.5 s while its cluster monitor was stopping
    its monitor of silo 0 for a view change; the detector's stop cancelled that stop mid-wait,
    and the monitor's probes, never cancelled, timed out and voted against silo 0 at 17.75 s.
    """
    machine = MonitorMachine()
    steps: list[Callable[[], None]] = [
        lambda: machine.start_cluster(size=5, skews=[SKEWS[0], SKEWS[0], SKEWS[3], SKEWS[3], SKEWS[2]]),
        lambda: machine.time_passes(3.0),
        lambda: machine.crash(silo=2, hang=False),
        lambda: machine.time_passes(0.25),
        lambda: machine.time_passes(5.0),
        lambda: machine.partition(side={0}),
        lambda: machine.partition(side={0, 4}),
        lambda: machine.time_passes(1.0),
        lambda: machine.crash(silo=1, hang=False),
        lambda: machine.time_passes(2.0),
        lambda: machine.time_passes(0.5),
        lambda: machine.time_passes(5.0),
        lambda: machine.partition(side={1, 2}),
        lambda: machine.time_passes(0.25),
        lambda: machine.time_passes(0.25),
        lambda: machine.partition(side={3}),
        lambda: machine.crash(silo=3, hang=True),
        lambda: machine.time_passes(0.25),
        lambda: machine.time_passes(0.5),
    ]
    try:
        for step in steps:
            step()
            check_every_invariant(machine)
    finally:
        machine.teardown()
