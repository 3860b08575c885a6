"""The membership lease: how long a silo may act as a member without hearing from the table.

A silo is a member only as long as the table says so, and the others may declare it Dead at
any moment. The lease bounds how long it can go on serving after that without knowing: it
is *confirmed* by every table call that shows this silo's own row Active (or ShuttingDown: a
draining silo's keys stay held until it writes itself Dead), and it runs out
``lease_timeout`` seconds (on this silo's monotonic clock) after the **start** of the last such
call (for a read, when it began to run in its worker thread: ``TableAccess.call_timed``). A
confirmation is anchored at the call's start, not its end, because the call may have been
linearized anywhere in between: anchored at the start, the anchor precedes a moment at which
the table held the row Active, so it precedes any Dead write of it.

That gives the one inequality the takeover wait (``takeover_wait``) rests on: a silo declared
Dead at real time ``T`` is fenced by ``T + lease_timeout / (1 - rho)``, where ``rho`` bounds
how much faster or slower than real time any silo's clock runs (``max_clock_drift``). A new
owner that learns of the death at ``t >= T`` and waits ``W`` on its own clock, at least
``W * (1 - rho)`` of real time, starts after the old one is fenced when
``W >= lease_timeout / (1 - rho) ** 2``; ``takeover_wait`` rounds that up to
``lease_timeout * (1 + rho) / (1 - rho) ** 2``. No synchronized clocks are assumed: only rates.

A silo whose lease ran out is *fenced*: it serves no work, is not leader and casts no votes on
silence (only on refusals, which no cut makes) until a confirmation comes. The lease is checked
before each request rather than by a timer alone, so a silo resuming from a pause (GC, SIGSTOP,
a stalled VM) is fenced before it serves anything. It is checked again when the handler returns
(``held_since``): a call during which the lease ran out at any moment, even if it was renewed
since, returns no results, because the others may have moved its keys meanwhile and served them.

The lease also vouches for the silo's *view*: a confirmation counts only if the view is at least
as new as the confirming read, so a silo that missed a change (a join that took some of its
keys) stops serving them within ``lease_timeout`` however its gossip was lost.

**Through peers.** A silo whose own table calls fail asks a few members (its probe targets), and
if none of them could read the table every other non-Dead member of its view (or, when their
answers already rule out an outage vouch, a few more: ``outage_vouch_possible``), to read its
row for it (``ConfirmMembership``). A peer that reads it Active (in a table
no newer than the asker's view, which the asker first pulls from the peer otherwise) confirms
the lease, anchored when the asker *sent* the request (the peer's read starts after that). If no
peer can read the table either, the outage may be everyone's: the asker goes on serving only
if **every** other non-Dead member of its view answered that it cannot reach the table, holds
the same view version, has heard of no newer one and has no write whose outcome it does not
know. Then no write has been made since that version by any of them, so none declared anyone
Dead, and a silo that joined meanwhile told them of its insert before it turned Active: its
connectivity pings carry the newest version it knows of (``PingRequest.known_version``), as
does every ``ConfirmMembership``, and the silo asked takes it as heard before it answers.
A member whose view lags takes the newest view an answer shows from that member and is
judged on it (``LeaseKeeper``): the views meet again without the table. One member that does
not answer (crashed, cut off) or has heard of a version nobody holds, and the asker fences: it
cannot tell an outage for all from a cut between it and the part that has the table.

An outage vouch is good for ``max_outage_vouch`` after the table last confirmed the silo
(``table_anchor``), no longer: a group cut off from the table *and* from a silo that joined
meanwhile (which could not tell them of its join) vouches for one another, and the joiner
must know when they stop. It holds the keys it took for ``outage_takeover_wait`` when some
member never answered its pings nor refused them (``silo.membership.agent``).
docs/protocol.md, "The membership lease", has the argument.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from membership_tables import SiloAddress, SiloStatus

__all__ = [
    "LEASE_STATUSES",
    "MembershipConfirmation",
    "MembershipLease",
    "PeerVerdict",
    "judge_confirmations",
    "outage_vouch_possible",
    "takeover_wait",
]

LEASE_STATUSES = (SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN)
"""The statuses of our own row that confirm the lease: a member, or one draining its calls in flight."""


def takeover_wait(lease_timeout: float, max_clock_drift: float) -> float:
    """Seconds a new owner waits, on its own clock, after it learned of a death and before it
    serves the dead silo's keys: by then the dead silo is fenced (module docstring)."""
    return lease_timeout * (1 + max_clock_drift) / (1 - max_clock_drift) ** 2


class MembershipLease:
    """The time of the last table confirmation and whether it is still good."""

    def __init__(self, timeout: float, monotonic: Callable[[], float]) -> None:
        self._timeout = timeout
        self._monotonic = monotonic
        self._anchor: float | None = None
        self._table_anchor: float | None = None
        """The anchor of the newest confirmation by a read of the table (ours or a peer's): an
        outage vouch does not move it (``max_outage_vouch`` counts from it)."""
        self._unbroken_since: float | None = None
        """When (monotonic) the lease last became good after having run out (or the first confirmation)."""
        self.on_confirm: Callable[[], None] | None = None
        """Called after each confirmation that moved the anchor (a claims recorder)."""

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def anchor(self) -> float | None:
        """The start (monotonic) of the newest call that confirmed us Active; None before the first."""
        return self._anchor

    @property
    def table_anchor(self) -> float | None:
        """The start (monotonic) of the newest call that read our row Active in the table (not an outage vouch)."""
        return self._table_anchor

    def confirm(self, started_at: float, *, by_table: bool = True) -> bool:
        """A table call started at ``started_at`` showed our row Active (``by_table=False``: the
        peers vouched for an outage); True if that renews the lease."""
        if by_table and (self._table_anchor is None or started_at > self._table_anchor):
            self._table_anchor = started_at
        if self._anchor is not None and started_at <= self._anchor:
            return False
        if not self.valid():
            # it ran out before this confirmation (the silo was fenced until now): whatever
            # started before now did not run under an unbroken lease
            self._unbroken_since = self._monotonic()
        self._anchor = started_at
        if self.on_confirm is not None:
            self.on_confirm()
        return True

    def expires_at(self) -> float | None:
        """When (monotonic) the lease runs out; None before the first confirmation."""
        return None if self._anchor is None else self._anchor + self._timeout

    def age(self) -> float:
        """Seconds since the anchor (infinite before the first confirmation)."""
        if self._anchor is None:
            return float("inf")
        return self._monotonic() - self._anchor

    def valid(self) -> bool:
        """Whether the lease is still good now (checked live: a pause cannot skip it)."""
        return self.age() <= self._timeout

    def held_since(self, mark: float) -> bool:
        """Whether the lease was good at every moment from ``mark`` (monotonic) until now.

        The age only grows between confirmations, so a lease that is good at a confirmation was
        good all the time since the one before; ``confirm`` notes when it was not."""
        return self.valid() and self._unbroken_since is not None and self._unbroken_since <= mark

    def remaining(self) -> float:
        """Seconds until the lease runs out (negative once it has)."""
        return self._timeout - self.age()


@dataclass(frozen=True)
class MembershipConfirmation:
    """A peer's answer to "confirm me in the table" (``ConfirmMembership``; ``silo.membership.lease``).

    ``table_read``: the peer read the asker's row after the request arrived; ``asker_status``
    is then what the row says (``NONE``: no row) and ``version`` the read's table version.
    Otherwise the peer could not reach the table either, and says what it knows: its view's
    ``version``, the ``newest_version_heard`` of (gossip, lost races), and whether it has
    ``unconfirmed_writes`` (a write whose outcome it does not know, not read back yet).
    """

    responder: SiloAddress
    table_read: bool
    asker_status: SiloStatus
    version: int
    newest_version_heard: int
    unconfirmed_writes: bool


class PeerVerdict(enum.Enum):
    """What the peers' answers to ``ConfirmMembership`` mean for the asker's lease."""

    CONFIRMED = "confirmed"
    """A peer read our row Active at our view's version or older: renew the lease."""
    NOT_ACTIVE = "not_active"
    """A peer read our row and it is not Active (Dead, gone): stay fenced; the table decides."""
    OUTAGE = "outage"
    """Nobody reaches the table, everyone holds our view and wrote nothing since: renew the lease."""
    UNKNOWN = "unknown"
    """Anything else (a member silent, a newer view somewhere, a write in doubt): stay fenced."""


def judge_confirmations(
    version: int,
    newest_heard: int,
    members: Collection[SiloAddress],
    answers: Mapping[SiloAddress, MembershipConfirmation],
) -> PeerVerdict:
    """The verdict of ``answers`` (by responder) for a silo whose view is at ``version`` and who has
    heard of ``newest_heard``; ``members``: every other non-Dead silo of that view."""
    reads = [answer for answer in answers.values() if answer.table_read]
    if any(answer.asker_status not in LEASE_STATUSES for answer in reads):
        return PeerVerdict.NOT_ACTIVE
    if any(answer.version <= version for answer in reads):
        return PeerVerdict.CONFIRMED  # read Active, and our view is at least as new as that read
    if reads:
        return PeerVerdict.UNKNOWN  # read Active in a newer table than our view: we may have missed a join
    if newest_heard > version or any(member not in answers for member in members):
        return PeerVerdict.UNKNOWN
    for member in members:
        answer = answers[member]
        if answer.version != version or answer.newest_version_heard > version or answer.unconfirmed_writes:
            return PeerVerdict.UNKNOWN
    return PeerVerdict.OUTAGE


def outage_vouch_possible(
    version: int,
    newest_heard: int,
    asked: Collection[SiloAddress],
    answers: Mapping[SiloAddress, MembershipConfirmation],
) -> bool:
    """Whether the answers of the first members ``asked`` leave an outage vouch possible, so that
    asking every other member is worth it: among themselves they already make the OUTAGE verdict
    of ``judge_confirmations`` at their view, and that view is no older than ours (``version``: we
    would take it from them). Anything else makes the verdict UNKNOWN whatever the rest say, and
    N asks from each of N silos (a join storm, when every read is slow and every view differs)
    cost more than the table itself."""
    if not asked or any(member not in answers for member in asked):
        return False
    agreed = answers[next(iter(asked))].version
    given = {member: answers[member] for member in asked}
    return agreed >= version and judge_confirmations(agreed, newest_heard, asked, given) is PeerVerdict.OUTAGE
