"""How a joining silo paces its connectivity pings, and when others' word lets it stop waiting.

A joiner pings the Active silos it must reach (``MembershipAgent._validate_connectivity``) in
rounds; ``ValidationPace`` sizes and spaces the rounds of a large view, and ``JoinWitnesses``
asks silos that answered the joiner about those that did not (an indirect probe), to tell a
silo slow or cut off for everyone from a bad link of the joiner's own.
"""

from __future__ import annotations

import asyncio
import logging
import random as random_module
from collections.abc import Awaitable, Callable

from membership_tables import SiloAddress
from silo.membership.options import SiloOptions

logger = logging.getLogger(__name__)


JOIN_PINGS_IN_FLIGHT = 32
"""At most this many connectivity pings of one joining silo in flight at once: a silo joining a
cluster of a thousand must not open a thousand calls (and channels) in one burst."""


_OTHERS_REACH = "silo %s is joining; %s reaches %s, which does not answer us (our link to it may be bad)"
_NOBODY_REACHES = "silo %s is joining; %s cannot reach %s either: it no longer blocks the join"


JOIN_BACKOFF_LIMIT = 8
"""At most this many ``probe_timeout`` between two validation rounds of a joiner (``validation_pause``)."""


def validation_pause(
    options: SiloOptions, idle_rounds: int, large: bool, left: float, rng: random_module.Random
) -> float:
    """Seconds a joiner waits before its next validation round: ``probe_timeout``; in a large view
    (``LARGE_VIEW``) after ``idle_rounds`` rounds in a row in which fewer than half of the silos
    pinged answered, from one to twice as many ``probe_timeout`` per such round past the first
    (jittered, up to ``JOIN_BACKOFF_LIMIT``); not past ``left`` less one round, unless that is
    less than ``probe_timeout``."""
    pause = options.probe_timeout
    if large and idle_rounds > 1:
        pause *= rng.uniform(1.0, min(2.0 ** min(idle_rounds - 1, 16), JOIN_BACKOFF_LIMIT))
    return min(pause, max(left - options.probe_timeout, options.probe_timeout))


class ValidationPace:
    """How many of the silos it still waits for a joiner of a large view pings in a round, which
    ones, and how long it pauses after a round that went badly: fewer than half answered halves
    the pings of the next round (down to one, the others left for later rounds) and lengthens the
    pause (``validation_pause``); a round that went well doubles them again (up to
    ``JOIN_PINGS_IN_FLIGHT``). The ones pinged longest ago go first, so a few pings a round still
    try every silo waited for in turn. A small view pings every silo it waits for, every round.

    Each round pinged every silo the joiner still waited for, so where a join overloads the
    machine the pings time out, the joiners stay, and their pings are the load that keeps the
    answers away: in a 2,000-silo join paced at 25 silos a second, 1,800 joiners pinged about
    3,400 silos a second and the Active count stood still at 191 for minutes. A pause alone did
    not do: one answer in a round reset it."""

    def __init__(self, rng: random_module.Random) -> None:
        self._rng = rng
        self.window = JOIN_PINGS_IN_FLIGHT
        self.idle_rounds = 0
        self._rounds = 0
        self._pinged_in: dict[SiloAddress, int] = {}

    def pick(self, waiting: list[SiloAddress], large: bool) -> list[SiloAddress]:
        """The silos to ping this round, of those we wait for."""
        self._rounds += 1
        if not large or len(waiting) <= self.window:
            picked = waiting
        else:  # the longest unpinged first; in a random order among equals, so joiners spread their pings
            shuffled = self._rng.sample(waiting, len(waiting))
            picked = sorted(shuffled, key=lambda silo: self._pinged_in.get(silo, 0))[: self.window]
        self._pinged_in.update((silo, self._rounds) for silo in picked)
        return picked

    def update(self, pinged: int, answered: int) -> None:
        if 2 * answered >= pinged:
            self.idle_rounds, self.window = 0, min(JOIN_PINGS_IN_FLIGHT, 2 * self.window)
        else:
            self.idle_rounds, self.window = self.idle_rounds + 1, max(1, self.window // 2)

    def pause(self, options: SiloOptions, large: bool, left: float) -> float:
        return validation_pause(options, self.idle_rounds, large, left, self._rng)


def join_heartbeat_watch(options: SiloOptions) -> float:
    """Seconds a joining silo watches an unreachable peer's heartbeat before ignoring it:
    one heartbeat period plus two of our re-reads (we re-read its row every ``probe_timeout``)."""
    return options.i_am_alive_table_publish_timeout + 2 * options.probe_timeout


AskThrough = Callable[[SiloAddress, SiloAddress], Awaitable["bool | None"]]
"""Ask a silo (the first) to ping another (the second) for us: True it reached it, False it did
not, None no report (the witness could not be asked, or did not answer in time)."""


class JoinWitnesses:
    """What silos that answered a joiner said of the ones that did not, over one join."""

    def __init__(self, address: SiloAddress, options: SiloOptions, ask: AskThrough, rng: random_module.Random) -> None:
        self._address = address
        self._options = options
        self._ask = ask
        self._rng = rng
        self.others_reach: set[SiloAddress] = set()
        self.nobody_reaches: set[SiloAddress] = set()

    async def judge(
        self, silent: list[SiloAddress], blocking: list[SiloAddress], answered: set[SiloAddress]
    ) -> list[SiloAddress]:
        """The silos of ``blocking`` (all we still wait for: ``silent`` to us this round, the
        others when last pinged, or not pinged yet) that still block the join, once at least
        half of the silos to reach answered us directly: each of ``silent`` not judged yet is
        pinged through a silo that answered us (an indirect probe, another witness each time),
        once it reports.

        - The witness cannot reach it either (``nobody_reaches``): its silence says nothing of
          our connectivity. It is slow or cut off for everyone (in a 2,000-silo storm on two
          cores, the first Active silos, pinged by every joiner, stayed silent on hosts whose
          loops lagged past the probe timeout, and 506 joiners waited on them for minutes); the
          cluster's failure detector judges it, not our join. It no longer blocks, is not pinged
          again and is among the members we may not have reached (``MembershipAgent._unreached_members``).
        - The witness reaches it (``others_reach``): only our link to it is bad or slow. It
          counts as reached once all that block are few (at most ``num_indirect_probes``) and
          others reach each; many silos that others reach and we do not mean we are cut off
          from a share of the cluster, and the join waits (and fails at its deadline if that
          lasts). The count is of all that block, not of one round's: after bad rounds a round
          pings a few (``ValidationPace``), and a few silent in each passed for "the last few".
        - No report (the witness could not be asked, or did not answer in time): asked again
          when next silent.

        Judged one round at a time, a joiner whose rounds had shrunk to one ping never let others
        judge the four or five silos it waited for (a round judged only if it pinged all of them):
        in a 2,000-silo storm, hundreds of joiners waited on such silos until their join limit.

        Each silo is asked of others at most until one reports, not every round: in a storm many
        silos do not answer and asking others for each every round adds load where there is too
        much (two 1,000-silo storms whose joiners asked three intermediaries for every silo that
        did not answer never finished). Only once at least half answered us directly, so a
        joiner cut off from the cluster still fails; not at all with indirect probes disabled.
        """
        if not self._options.enable_indirect_probes or not answered:
            return blocking
        witnesses = sorted(answered)
        unjudged = [peer for peer in silent if peer not in self.others_reach and peer not in self.nobody_reaches]
        vias = [self._rng.choice(witnesses) for _ in unjudged]
        reports = await asyncio.gather(*(self._ask(via, peer) for via, peer in zip(vias, unjudged, strict=True)))
        for via, peer, report in zip(vias, unjudged, reports, strict=True):
            if report is None:
                continue  # asked again when next silent
            judged, said = (self.others_reach, _OTHERS_REACH) if report else (self.nobody_reaches, _NOBODY_REACHES)
            judged.add(peer)
            logger.info(said, self._address, via, peer)
        blocking = [peer for peer in blocking if peer not in self.nobody_reaches]
        if len(blocking) <= self._options.num_indirect_probes:
            answered.update(peer for peer in blocking if peer in self.others_reach)
            blocking = [peer for peer in blocking if peer not in self.others_reach]
        return blocking
