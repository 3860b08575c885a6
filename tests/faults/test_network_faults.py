"""Real silo clusters under real network faults: partitions, isolation, one-way cuts and packet loss.

Each silo is a ``silo run`` process on its own ``NetworkLab`` host, and all share one SQLite
table that every side of every partition can still reach (``testbed/net_cluster.py``): the
scenario of the bug report, where both sides of a partition vote into the same table. What the
failure detector must guarantee:

* a strict majority side is never declared Dead; the minority is, and its silos exit (code 3);
* an even split (2|2) declares nobody Dead: neither side can tell it is the healthy one;
* 20% random packet loss never gets a live silo declared Dead;
* a silo cut from every other silo (both ways, or only inbound) is declared Dead and exits.

Every test also checks the recorded history of versioned writes (``silo.membership.history_check``):
the survivors must never have been written Dead, and every death must carry a quorum of voters.
Bounds check that an outcome happens at all and that nobody else is harmed, never how fast.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from silo.exit_codes import ExitCode
from silo.membership.options import SiloOptions
from testbed.net_cluster import (
    HEALTH_CHECK,
    PORT,
    NetCluster,
    active_and_running,
    nobody_dead,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# --- timing, derived from the ``local`` preset every silo runs with ----------------------------
OPTIONS = SiloOptions.local()
# probe_timeout 0.5 s and num_missed_probes_limit 3: a silo suspects a target after 3 x 0.5 = 1.5 s
# of silence (the detection floor); the indirect round started at half of it takes one probe
# timeout (0.5 s); the second voter votes at its own floor or sees the first vote at once; and the
# silo declared Dead is told by gossip, or reads its own row within one table refresh (2 s), and
# exits: ~6.5 s at worst. A poor local-health score lengthens the floor (up to 1.5 x 9 s), and two
# cores run five Python silos, hence the generous bound.
DETECTION_FLOOR = OPTIONS.detection_time  # 1.5 s
NOMINAL_DEATH = DETECTION_FLOOR + 2 * OPTIONS.probe_timeout + 2 * OPTIONS.table_refresh_timeout  # 6.5 s
DEATH_BOUND = 30.0
"""Seconds from the fault until the cut-off silos are Dead in the table and have exited: about 4.5 x
NOMINAL_DEATH, a correctness bound for a loaded two-core machine, not a speed goal."""
OBSERVE = 10.0
"""Seconds the survivors must then stay Active and running: more than three vote expiries
(death_vote_expiration 3 s), so a suspicion cast during the fault that was going to kill a survivor
has had its chance."""
EVEN_SPLIT_HOLD = 20.0
"""Seconds of a 2|2 split with nobody declared Dead: 13 detection floors, 10 table refreshes,
twice the vote expiry (10 s), so both sides have voted repeatedly and votes have expired and renewed."""
AFTER_HEAL = 5.0
"""Seconds everyone must stay Active after a heal: 2 table refreshes (2 s) plus 5 heartbeats (1 s)."""
LOSS = 0.2
LOSS_DURATION = 60.0
"""Seconds of 20% loss: 120 probe rounds per probed pair, six vote expiries."""
LOSS_CHECK_ATTEMPTS = 30
"""Connects that prove the loss is in effect: all 30 answered at 36% loss per connect has odds 0.64^30 < 2e-6."""
MIN_VOTERS = OPTIONS.num_votes_for_death_declaration
"""2: the local preset needs 2 votes, and min(2, (active + 1) // 2) is still 2 for 3 to 5 Active silos."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    """A lab with no silos yet; every silo and namespace is gone after the test, pass or fail."""
    with NetCluster(tmp_path) as net_cluster:
        yield net_cluster


def assert_cut_off_silos_die(cluster: NetCluster, doomed: Sequence[str], survivors: Sequence[str]) -> None:
    """``doomed`` are declared Dead and exit with code 3; ``survivors`` stay Active throughout and after.

    Then the history: nobody but ``doomed`` was ever written Dead, and each death had a quorum.
    """
    cluster.wait_for(
        lambda view: view.all_status(doomed, SiloStatus.DEAD) and view.all_exited(doomed, ExitCode.DECLARED_DEAD),
        DEATH_BOUND,
        f"{', '.join(doomed)} Dead in the table and exited with {int(ExitCode.DECLARED_DEAD)}",
        invariant=active_and_running(survivors),
        invariant_what=f"{', '.join(survivors)} Active and running",
    )
    cluster.hold(active_and_running(survivors), OBSERVE, f"{', '.join(survivors)} Active and running")
    cluster.check_history(MIN_VOTERS, protected=survivors)


def test_the_cluster_forms_and_detects_a_kill_across_namespaces(cluster: NetCluster) -> None:
    """The harness itself: silos on separate hosts join over gRPC, and a SIGKILLed one is declared Dead.

    If this fails, the fault scenarios below say nothing about the failure detector. (The killed
    silo's host stays up, so its kernel refuses connections at once: a detector that treats a
    refusal as evidence may declare it Dead well before the 1.5 s detection floor.)
    """
    silos = cluster.start(5)
    for silo in silos:
        assert silo.address is not None
        assert (silo.address.host, silo.address.port) == (silo.host.address, PORT), "silos must use lab addresses"
    # gRPC from one namespace to another, outside the silos' own code: the lab carries it both ways.
    for source, target in (("s1", "s2"), ("s2", "s1")):
        health = cluster.host(source).run(
            [sys.executable, "-c", HEALTH_CHECK, f"{cluster.host(target).address}:{PORT}"], timeout=60
        )
        assert health.stdout.strip() == "SERVING", health.stdout + health.stderr

    victim, survivors = "s5", ["s1", "s2", "s3", "s4"]
    cluster.silo(victim).kill()
    cluster.wait_until_dead(victim, survivors, "killed", DEATH_BOUND)
    cluster.check_history(MIN_VOTERS, protected=survivors)


def test_a_three_two_partition_kills_the_minority_and_only_it(cluster: NetCluster) -> None:
    """The bug report: with a shared table, the 2-silo side must not out-vote the 3-silo side."""
    cluster.start(5)
    majority, minority = ["s1", "s2", "s3"], ["s4", "s5"]
    cluster.lab.partition(cluster.hosts_of(majority), cluster.hosts_of(minority))
    assert not cluster.reachable("s1", "s4"), "the partition must cut majority from minority"
    assert cluster.reachable("s1", "s2"), "the majority side must stay connected"
    assert cluster.reachable("s4", "s5"), "the minority side must stay connected"

    assert_cut_off_silos_die(cluster, minority, majority)


def test_an_isolated_silo_is_declared_dead_and_exits(cluster: NetCluster) -> None:
    """1|4: the silo that can reach nobody is the one to go; its lone suspicions kill nobody."""
    cluster.start(5)
    isolated, others = "s5", ["s1", "s2", "s3", "s4"]
    cluster.lab.isolate(cluster.host(isolated))
    assert not cluster.reachable("s1", isolated), "isolation must cut the silo off"
    assert cluster.reachable("s1", "s2"), "the others must stay connected"

    assert_cut_off_silos_die(cluster, [isolated], others)


def test_a_silo_that_receives_nothing_is_declared_dead_and_exits(cluster: NetCluster) -> None:
    """Asymmetric cut: every packet to X is dropped, X's own packets still leave.

    TCP needs both directions, so X can neither answer probes nor get an answer to its own, but
    its SYNs still arrive everywhere: a detector must not be fooled by half a link.
    """
    cluster.start(5)
    target, others = "s5", ["s1", "s2", "s3", "s4"]
    cluster.lab.block(src=cluster.hosts_of(others), dst=[cluster.host(target)])
    assert not cluster.reachable("s1", target), "the block must cut traffic to the silo"
    assert not cluster.reachable(target, "s1"), "a TCP connection needs the blocked direction too"
    assert cluster.reachable("s1", "s2"), "the others must stay connected"

    assert_cut_off_silos_die(cluster, [target], others)


def test_an_even_split_declares_nobody_dead(cluster: NetCluster) -> None:
    """2|2: neither side is a majority, so neither may kill the other; after a heal all are Active."""
    cluster.start(4)
    left, right = ["s1", "s2"], ["s3", "s4"]
    cluster.lab.partition(cluster.hosts_of(left), cluster.hosts_of(right))
    assert not cluster.reachable("s1", "s3"), "the partition must cut the sides apart"
    assert cluster.reachable("s1", "s2"), "each side must stay connected"

    cluster.hold(nobody_dead, EVEN_SPLIT_HOLD, "nobody Dead, every silo running during a 2|2 split")
    cluster.lab.heal()
    assert cluster.reachable("s1", "s3"), "heal must reconnect the sides"
    cluster.hold(active_and_running(cluster.names), AFTER_HEAL, "every silo Active and running after the heal")
    cluster.check_history(MIN_VOTERS, protected=cluster.names)


def test_random_packet_loss_kills_nobody(cluster: NetCluster) -> None:
    """20% loss on every host, both directions, for a minute: slow answers, never a false death."""
    cluster.start(5)
    assert cluster.unanswered("s1", "s2", LOSS_CHECK_ATTEMPTS) == 0, "the lab must start without loss"
    cluster.lab.set_loss(LOSS)
    # A connect is answered only if both its SYN and the RST survive: 0.8 x 0.8 = 64% of the time.
    assert cluster.unanswered("s1", "s2", LOSS_CHECK_ATTEMPTS) > 0, "the loss must be in effect"

    cluster.hold(
        active_and_running(cluster.names), LOSS_DURATION, f"every silo Active and running under {LOSS:.0%} loss"
    )
    cluster.lab.heal()
    cluster.check_history(MIN_VOTERS, protected=cluster.names)


RING_PROBED_SILOS = 2
"""Each silo monitors only 2 of the 6 others (N = 7 > num_probed_silos + 1): ring sampling, where a
minority silo can hear a majority of its own sample by chance and pass the majority rule."""


def test_with_ring_sampling_the_table_arbitrates_a_partition(tmp_path: Path) -> None:
    """4|3 of 7 silos that each monitor 2: the minority side's votes must not kill the majority.

    With two targets a minority silo often hears one of two (a strict majority of itself plus
    two), so before a vote every silo pings the fresh silos outside its sample
    (``ClusterHealthMonitor.reaches_majority``): a minority silo reaches 3 of 7 and never votes.
    Behind that, the table arbitrates: a death is written only when the accusations in the table
    put the target on the smaller side of the cut (``votes.arbitrate_cut``).
    """
    with NetCluster(tmp_path, extra_args=["--set", f"num_probed_silos={RING_PROBED_SILOS}"]) as cluster:
        cluster.start(7)
        majority, minority = ["s1", "s2", "s3", "s4"], ["s5", "s6", "s7"]
        cluster.lab.partition(cluster.hosts_of(majority), cluster.hosts_of(minority))
        assert not cluster.reachable("s1", "s5"), "the partition must cut majority from minority"
        assert_cut_off_silos_die(cluster, minority, majority)
