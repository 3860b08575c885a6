"""Gray failures in network namespaces: non-transitive link cuts and one-way cuts.

Each silo is a ``silo run`` process on its own ``NetworkLab`` host and the table is a PostgreSQL
server on a lab host of its own (``NetCluster(table="postgres")``), which no fault here cuts.
What the failure detector must do (docs/protocol.md, "Non-transitive and one-way cuts"):

* **scattered link cuts** (A reaches B and C, B and C do not reach each other; several such
  cuts at once, some silos cut from two peers): nobody is declared Dead, for a minute (half a
  minute at N = 5) at the local preset's 1.5 s detection floor. Every cut silo is still reached by intermediaries that
  reach its prober, so every suspicion along a cut link is vetoed. And the cuts must not blunt
  the detector: with them in place, a hung silo is voted out by monitors whose local health
  score is not raised by their cut links (each veto used to add a point, up to nine floors).
  Nor do short pauses of a cut silo (a GC, a starved host): a silo cut from two peers that
  pauses for over half the floor, again and again, is never voted out by them;
* **a one-way cut of one silo** (it sends but receives nothing, or receives but its packets
  are dropped): it is declared Dead and exits (code 3), and nobody else is declared Dead. Over
  TCP half a link is no link: neither side's connection completes, so the silo hears none of
  its peers and they hear nothing from it; it still reaches the table and could vote, but it
  hears no majority.

N = 5 (every silo monitors every other one) and N = 20 (ring sampling: each silo monitors 10 of
19). Each test prints what it measured (``-s``). Bounds check that an outcome happens and that
nobody else is harmed, never how fast.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from membership_tables import SiloAddress
from silo.exit_codes import ExitCode
from silo.membership.indirect_rounds import ROUND_START
from silo.membership.options import SiloOptions
from silo.membership.ring import probe_targets
from testbed.net_cluster import NetCluster, active_and_running

pytestmark = [pytest.mark.slow]

OPTIONS = SiloOptions.local()
DETECTION_FLOOR = OPTIONS.detection_time
"""1.5 s: the silence after which a silo is suspected (local preset)."""
CUT_HOLD = 60.0
"""Seconds the scattered cuts last with nobody declared Dead: 40 detection floors, 20 vote expiries
(3 s), so every cut pair has gone through dozens of suspicions and indirect rounds."""
SHORT_CUT_HOLD = 30.0
"""The same at N = 5, which then also hangs a silo: 20 floors, 10 vote expiries; long enough that
a score raised a point per veto would have reached 7 (vetoes at 0, 2.2, 5.4, 8.9, 13.4, 18.7,
24.4 s in a run before the fix)."""
DEATH_BOUND = 30.0
"""Seconds from a one-way cut until the cut silo is Dead and has exited: a correctness bound for a
loaded two-core machine (``test_network_faults.DEATH_BOUND``), not a speed goal."""
OBSERVE = 10.0
"""Seconds the others must then stay Active and running: three vote expiries, so a vote cast
during the fault that was going to kill one of them has had its chance."""
MIN_VOTERS = OPTIONS.num_votes_for_death_declaration
HEALTHY_VOTER_SCORE = 3
"""The highest local-health score a voter may have when the frozen silo is voted out amid the cuts:
one point for the stall its cut link showed (``LocalHealth.record_veto``) and two for event-loop lag
on a loaded machine. A cut link that kept raising its ends' scores drove them to ``MAX_SCORE`` (8)
within a minute: a nine times longer silence before they suspected anyone."""
PAUSE = 0.8
"""Seconds each pause of a silo cut from two peers lasts: over half the floor (an indirect round
that watched only a probe timeout, 0.5 s, from half the silence was covered by such a pause, and two
cut partners voting through the same pause killed the silo), under the two thirds of it that a
round now watches (``ROUND_START``), and well under the floor its other monitors measure."""
PAUSE_EVERY = 3.0
"""Seconds from one pause's start to the next: the silo answers for over two seconds in between,
so none of its uncut monitors ever measures a silence near the floor."""
PAUSES_HOLD = 60.0
"""Seconds of pauses: 20 of them, each an even chance or better of a vote along both cut links
under the old round."""
LARGE = 20
"""N for ring sampling: each silo monitors ``num_probed_silos`` (10) of the 19 others."""
START_TIMEOUT_LARGE = 120.0
"""Seconds for 20 silos to start and turn Active on two shared cores."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    """A lab with the PostgreSQL table on host ``pg`` and no silos yet; all gone after the test."""
    with NetCluster(tmp_path, table="postgres") as net_cluster:
        yield net_cluster


def monitors(cluster: NetCluster) -> dict[str, set[str]]:
    """Whom each silo probes on the rings (names), computed from the addresses as the silos do."""
    addresses: dict[SiloAddress, str] = {}
    for silo in cluster.silos:
        assert silo.address is not None, f"{silo.name} never logged its address"
        addresses[silo.address] = silo.name
    return {
        name: {addresses[target] for target in probe_targets(address, addresses, OPTIONS.num_probed_silos)}
        for address, name in addresses.items()
    }


def scattered_cuts(probed: dict[str, set[str]], names: Sequence[str], count: int) -> list[tuple[str, str]]:
    """``count`` links to cut, each between two silos that probe each other, no silo on more than two.

    Pairs that probe each other make both ends suspect each other; degree two gives chains
    (A cut from B and from C, B and C still connected: the non-transitive case).
    """
    degree = dict.fromkeys(names, 0)
    cuts: list[tuple[str, str]] = []
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            if len(cuts) == count:
                return cuts
            if second in probed[first] and first in probed[second] and degree[first] < 2 and degree[second] < 2:
                cuts.append((first, second))
                degree[first] += 1
                degree[second] += 1
    assert len(cuts) == count, f"only {len(cuts)} mutually probed pairs to cut: {cuts}"
    return cuts


def cut_links(cluster: NetCluster, cuts: Sequence[tuple[str, str]]) -> None:
    """Cut each link both ways; check each cut is in effect and a silo cut from neither end reaches both."""
    for first, second in cuts:
        cluster.lab.partition([cluster.host(first)], [cluster.host(second)])
    for first, second in cuts:
        assert not cluster.reachable(first, second), f"the cut {first}-{second} must be in effect"
        cut_from_either = {name for pair in cuts if {first, second} & set(pair) for name in pair}
        third = next(name for name in cluster.names if name not in cut_from_either)
        assert cluster.reachable(third, first), f"{third} must still reach {first}: the cut is one link"
        assert cluster.reachable(third, second), f"{third} must still reach {second}: the cut is one link"


def hold_cuts(cluster: NetCluster, cuts: Sequence[tuple[str, str]], seconds: float) -> None:
    """Cut the links and hold ``seconds`` with every silo Active and running."""
    cut_links(cluster, cuts)
    print(f"\ncut {len(cuts)} links: {', '.join(f'{a}-{b}' for a, b in cuts)}; holding {seconds:.0f}s")
    cluster.hold(active_and_running(cluster.names), seconds, "every silo Active and running with links cut")


@contextmanager
def pausing(cluster: NetCluster, name: str, pause: float, every: float) -> Iterator[None]:
    """Stop ``name`` (SIGSTOP) for ``pause`` seconds every ``every`` seconds, as a GC or a starved
    host would, until the block ends; it is running again when the block ends."""
    silo, stopped = cluster.silo(name), threading.Event()

    def pause_repeatedly() -> None:
        while not stopped.wait(every - pause):
            silo.freeze()
            try:
                stopped.wait(pause)
            finally:
                silo.thaw()

    pauser = threading.Thread(target=pause_repeatedly, name=f"pausing {name}", daemon=True)
    pauser.start()
    try:
        yield
    finally:
        stopped.set()
        pauser.join()


def vote_scores(cluster: NetCluster, target: str) -> dict[str, list[int]]:
    """The local-health score each silo logged with each of its votes against ``target``."""
    address = cluster.silo(target).address
    pattern = re.compile(rf"votes against {re.escape(str(address))}: .*local health (\d+)\)")
    return {
        silo.name: [int(match.group(1)) for match in pattern.finditer(silo.log_text())]
        for silo in cluster.silos
        if silo.name != target
    }


def assert_hang_found_amid_cuts(cluster: NetCluster, hung: str) -> None:
    """With the cuts still in place, ``hung`` is frozen (SIGSTOP): it is declared Dead, nobody else,
    and its voters judged with a healthy score: a cut link must not blunt a silo's detector."""
    others = [name for name in cluster.names if name != hung]
    cluster.silo(hung).freeze()
    frozen = time.monotonic()
    cluster.wait_until_dead(hung, others, "frozen", DEATH_BOUND)
    found = time.monotonic() - frozen
    cluster.silo(hung).thaw()
    assert cluster.silo(hung).wait_exit(DEATH_BOUND) == ExitCode.DECLARED_DEAD
    scores = vote_scores(cluster, hung)
    floors = found / DETECTION_FLOOR
    print(f"frozen {hung} Dead {found:.1f}s ({floors:.1f} floors) after SIGSTOP; voters' scores {scores}")
    cast = [score for voter_scores in scores.values() for score in voter_scores]
    assert cast, f"nobody logged a vote against {hung}"
    assert max(cast) <= HEALTHY_VOTER_SCORE, f"voters judged {hung} with degraded scores {scores}"


def assert_one_way_cut_removes_only(cluster: NetCluster, target: str, *, receives: bool) -> None:
    """Cut ``target`` one way from every other silo (``receives``: its packets are dropped, it
    still receives; else it sends and receives nothing); it must die, and nobody else."""
    others = [name for name in cluster.names if name != target]
    cut = time.monotonic()  # the rules go in host by host, over a few hundred milliseconds
    if receives:
        cluster.lab.block(src=[cluster.host(target)], dst=cluster.hosts_of(others))
    else:
        cluster.lab.block(src=cluster.hosts_of(others), dst=[cluster.host(target)])
    assert not cluster.reachable(others[0], target), "the one-way cut must be in effect"
    assert cluster.reachable(others[0], others[1]), "the others must stay connected"
    cluster.wait_until_dead(target, others, "one-way cut", DEATH_BOUND)
    removed = time.monotonic() - cut
    cluster.wait_for(
        lambda view: view.all_exited([target], ExitCode.DECLARED_DEAD),
        DEATH_BOUND,
        f"{target} exited with {int(ExitCode.DECLARED_DEAD)}",
        invariant=active_and_running(others),
        invariant_what=f"every silo but {target} Active and running",
    )
    exited = time.monotonic() - cut
    direction = "receives but cannot send" if receives else "sends but cannot receive"
    size = len(cluster.names)
    print(f"\n{target} ({direction}, N = {size}): Dead {removed:.1f}s after the cut, exited {exited:.1f}s")
    cluster.hold(active_and_running(others), OBSERVE, "every other silo Active and running")
    cluster.check_history(MIN_VOTERS, protected=others)


@pytest.mark.timeout(240)
def test_scattered_cut_links_kill_nobody(cluster: NetCluster) -> None:
    """5 silos, 3 cut links: s2 is cut from s1 and s3 (who reach each other), and s4 from s5.
    Then, cuts in place, s4 hangs: its monitors, every one at the end of a cut link, find it."""
    cluster.start(5)
    hold_cuts(cluster, [("s1", "s2"), ("s2", "s3"), ("s4", "s5")], SHORT_CUT_HOLD)
    assert_hang_found_amid_cuts(cluster, "s4")
    cluster.lab.heal()
    cluster.check_history(MIN_VOTERS, protected=[name for name in cluster.names if name != "s4"])


@pytest.mark.timeout(240)
def test_short_pauses_of_a_silo_cut_from_two_peers_kill_nobody(cluster: NetCluster) -> None:
    """5 silos, s2 cut from s1 and s3, which suspect it all along; s2 pauses for 0.8 s every 3 s.
    Their indirect rounds watch s2 until their suspicions, so each pause ends with an answer
    to an intermediary: a veto, never a vote."""
    assert PAUSE < (1 - ROUND_START) * DETECTION_FLOOR, "the pause must end inside a round's watch"
    cluster.start(5)
    cut_links(cluster, [("s1", "s2"), ("s2", "s3")])
    print(f"\ns2 cut from s1 and s3, pausing {PAUSE}s every {PAUSE_EVERY}s for {PAUSES_HOLD:.0f}s")
    with pausing(cluster, "s2", PAUSE, PAUSE_EVERY):
        cluster.hold(active_and_running(cluster.names), PAUSES_HOLD, "every silo Active and running")
    cluster.lab.heal()
    cluster.check_history(MIN_VOTERS, protected=cluster.names)


@pytest.mark.timeout(420)
def test_scattered_cut_links_kill_nobody_with_ring_sampling(cluster: NetCluster) -> None:
    """20 silos, each monitoring 10: 8 cut links between silos that probe each other."""
    cluster.start(LARGE, timeout=START_TIMEOUT_LARGE)
    hold_cuts(cluster, scattered_cuts(monitors(cluster), cluster.names, 8), CUT_HOLD)
    cluster.lab.heal()
    cluster.check_history(MIN_VOTERS, protected=cluster.names)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("receives", [False, True], ids=["sends-only", "receives-only"])
def test_a_one_way_cut_silo_is_removed_and_nobody_else(cluster: NetCluster, receives: bool) -> None:
    cluster.start(5)
    assert_one_way_cut_removes_only(cluster, "s3", receives=receives)


@pytest.mark.timeout(420)
def test_a_one_way_cut_silo_is_removed_with_ring_sampling(cluster: NetCluster) -> None:
    """20 silos, each monitoring 10: the silo that receives nothing goes, nobody else."""
    cluster.start(LARGE, timeout=START_TIMEOUT_LARGE)
    assert_one_way_cut_removes_only(cluster, "s7", receives=False)
