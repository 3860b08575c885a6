"""Probes that do not wait on a stalled connection: pings on new connections and path checks.

A monitor's pings share one long-lived connection per target. After a cut heals, that
connection waits out its TCP retransmission backoff (200 ms, 400, 800 ...), so a 1 s cut leaves
it mute until 1.4 s, past the floor. While a target is silent, its monitor therefore also pings
it on new connections, which the network carries as soon as it heals, and makes bare TCP
connects, which tell a path that is down (no answer) from a process that does not answer (its
host's kernel still accepts) and from a process that is gone (refused: a refusal like a refused
ping). Before a vote on silence, a path seen down gets one last check (docs/protocol.md, "Short
cuts"). While our own event loop lags, a silent target gets the bare connect alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from silo.membership.clock import with_timeout
from silo.membership.probing import MonitoredLink, ProbeOutcome
from silo.membership.target_evidence import REFUSALS_TO_SUSPECT

logger = logging.getLogger(__name__)


REFUSAL_RECHECK = 0.25
"""Fraction of a probe interval after a first refusal at which it is checked on a new connection:
two observations apart in time, without waiting for the next probe (a crash costs one interval
less to find)."""


class NewConnectionProbes:
    """One target's pings on new connections and bare connects, for its ``SiloHealthMonitor``."""

    def __init__(
        self, link: MonitoredLink, *, answered: Callable[[float], None], refused: Callable[[], Awaitable[None]]
    ) -> None:
        """``answered(sent)``: the target answered a ping on a new connection sent at ``sent``;
        ``refused()``: a bare connect to it was refused (nothing listens at its endpoint)."""
        self._link = link
        self._answered = answered
        self._refused = refused
        self._names = (link.local, link.target)
        self.path_down_at: float | None = None
        """Monotonic send time of the latest bare connect to the target that got no answer."""
        self._connects_only_since: float | None = None
        """Send time of a ping on a new connection that got no answer while a connect to the
        target's host got through (``probe_again``); None while new connections are worth it."""
        self._probing_again = False

    def wanted(self, silence: float, refusals: int) -> bool:
        """Whether the next probe is followed up (``probe_again``): silent for a probe timeout and a
        probe missed (``missed_probe_silence``), not yet proven gone by refusals (one refusal whose
        recheck went unanswered is followed up too: a late loop loses a refusal to its timeout).
        Also before the first answer: a silo cut off just after it joined is counted silent from
        its new monitors' start."""
        options = self._link.options
        threshold = max(options.probe_timeout, options.missed_probe_silence)
        return refusals < REFUSALS_TO_SUSPECT and silence >= threshold

    async def probe_again(self, last_heard: float) -> None:
        """A ping on a new connection (``ping``) and a bare connect (``check_path``) together, or the
        connect alone once a new connection went unanswered while a connect got through, until the
        target answers again (``last_heard``, our monitor's last answer, moves past it) or a connect
        finds the path down: its host accepts connections and its process does not answer (slow or
        hung), so a new connection is no better than the usual one, and each is a channel opened on
        both hosts. In a 2,000-silo join on two cores, with every host's loop late, they were an
        eighth of a silo host's samples. One at a time: a probe timeout that our local health
        stretches past the probe interval would overlap them.

        While our own event loop lags (``LocalHealth.lagging``) the connect alone: the silence is
        then more likely ours than a cut's, and a ping on a new connection is a channel opened on
        both hosts (in a 1,000-silo join storm on two cores a seventh of a silo host's samples);
        a bare connect is a handshake the kernels make, and its refusal, read from the socket
        however late our loop gets to it (``silo.wire.tcp_connect``), is what a crashed target's
        monitors on an overloaded host have: at 2,000 silos on two cores their pings timed out
        as often as not, and a crash found one voter in minutes."""
        if self._connects_only_since is not None and last_heard > self._connects_only_since:
            self._connects_only_since = None  # it answered since: a new silence starts afresh
        if self._probing_again:
            return
        self._probing_again = True
        try:
            await (self.check_path() if self._link.health.lagging() else self._probe_again())
        finally:
            self._probing_again = False

    async def _probe_again(self) -> None:
        if self._connects_only_since is not None:
            if await self.check_path() is ProbeOutcome.TIMED_OUT:
                self._connects_only_since = None  # the path is down now: a cut, which new connections outlast
            return
        sent = self._link.clock.monotonic()
        outcome, path = await asyncio.gather(self.ping(), self.check_path())
        if path is ProbeOutcome.ANSWERED and outcome is ProbeOutcome.TIMED_OUT:
            self._connects_only_since = sent

    async def ping(self) -> ProbeOutcome:
        """Ping the target on a connection opened for it; an answer goes to ``answered``.

        Not counted in local health (its loss share is the usual connection's), and a failure
        adds nothing: silence is measured on the usual connection as before."""
        sent = self._link.clock.monotonic()
        outcome = await self.outcome()
        if outcome is ProbeOutcome.ANSWERED:
            logger.debug("silo %s: %s answered on a new connection", *self._names)
            self._answered(sent)
        return outcome

    async def recheck(self) -> tuple[float, ProbeOutcome]:
        """After a first refusal: ``REFUSAL_RECHECK`` of a probe interval later, a ping on a new
        connection, and its send time and outcome. While our loop lags, a bare connect instead
        (``probe_again``), whose getting through says nothing of the process: REFUSED or TIMED_OUT."""
        await self._link.clock.sleep(REFUSAL_RECHECK * self._link.options.effective_probe_interval)
        sent = self._link.clock.monotonic()
        if not self._link.health.lagging():
            return sent, await self.outcome()
        refused = await self._connect(self._link.options.probe_timeout) is ProbeOutcome.REFUSED
        return sent, ProbeOutcome.REFUSED if refused else ProbeOutcome.TIMED_OUT

    async def outcome(self) -> ProbeOutcome:
        """How a ping of the target on a connection opened for it ends (any failure: timed out)."""
        timeout = self._link.probe_timeout()
        try:
            return await with_timeout(
                self._link.clock, self._link.prober.ping_on_new_connection(self._link.target, timeout), timeout
            )
        except Exception as exc:
            logger.debug("silo %s: ping of %s on a new connection failed: %r", self._link.local, self._link.target, exc)
            return ProbeOutcome.TIMED_OUT

    async def check_path(self) -> ProbeOutcome:
        """A bare TCP connect, and how it ended: remembers when the path to the target's host was
        last seen down, and reports a refusal (``refused``)."""
        sent = self._link.clock.monotonic()
        path = await self._connect(self._link.options.probe_timeout)
        if path is ProbeOutcome.TIMED_OUT:
            self.path_down_at = sent if self.path_down_at is None else max(self.path_down_at, sent)
        elif path is ProbeOutcome.REFUSED:
            logger.debug("silo %s: a connect to %s was refused", *self._names)
            await self._refused()
        return path

    async def last_check(self, silent_since: float) -> None:
        """Before a vote on a silence that began at ``silent_since``: if the path was seen down
        during it and a connect now (within half a probe interval) gets through, the cut has
        healed, and the target gets one ping on a new connection (an answer goes to ``answered``).

        Nothing happens for a hung process (its kernel accepts connects: no cut was seen), so
        its vote is not delayed; a cut still on delays it by the connect's wait."""
        if self.path_down_at is None or self.path_down_at < silent_since:
            return
        quick = min(self._link.options.probe_timeout, self._link.options.effective_probe_interval / 2)
        if await self._connect(quick) is ProbeOutcome.ANSWERED:
            logger.info("silo %s: the cut to %s healed; a ping on a new connection before any vote", *self._names)
            await self.ping()

    async def _connect(self, timeout: float) -> ProbeOutcome:
        try:
            return await with_timeout(self._link.clock, self._link.prober.connect(self._link.target, timeout), timeout)
        except Exception as exc:
            logger.debug("silo %s: connect to %s failed: %r", self._link.local, self._link.target, exc)
            return ProbeOutcome.TIMED_OUT
