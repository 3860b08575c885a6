"""SPIN proves the model of the failure detector (``spin_model/membership.pml``) within its bounds.

The model (docs/protocol.md, "The model") has N silos, the table as a versioned store with
conditional writes, and an environment that partitions the silos into any two sides, loses
messages, crashes and hangs silos and takes the table down, within bounds. SPIN explores every
behaviour:

* safety, as assertions checked at every write: every version is written once, Dead is
  terminal, a Dead silo writes nothing, a write adds only its writer's vote, cast on S rounds
  of silence it observed, a death has the required distinct voters, and no silo that never
  failed, on a side whose never-failed silos are a strict majority, is ever declared Dead;
* liveness under weak fairness (``-a -f``): a silo declared Dead stops serving, and a crashed
  silo is declared Dead while a majority of the silos is connected;
* with the membership lease and the takeover wait (``-DLEASE``): at no serving step can two
  silos serve the one key, while silos hang, are cut off and are declared Dead, leave
  gracefully, and reads return rounds after they were sent;
* with the lease through peers too (``-DPEERS``): the same, while silos that cannot read the
  table renew their leases on their peers' word during table outages;
* with a join too (``-DJOINS``): the same, while a silo joins (inserted Joining, validated by
  pings that carry its version, Active) and takes the key after its takeover wait.

Each mutant reintroduces one broken rule and must give a counterexample: the model is not
vacuous and the properties see what they claim to; two witnesses show that the zombie (a silo
declared Dead that still believes it owns the key, hung or cut off) does occur while the next
owner serves. A mutant whose counterexample lies within ~100,000 states is compiled
without optimization (``optimize=False``: gcc -O0 takes 1 s instead of 4). The whole module
takes about three minutes on two cores and up to ~1 GB of memory (the N=4 liveness run).
"""

from __future__ import annotations

import pytest

from spin_model import spin_check
from spin_model.spin_check import (
    CHECKED,
    JOINS_CHECKED,
    JOINS_MUTANT_BOUNDS,
    LEASE_CHECKED,
    PEERS_CHECKED,
    PEERS_MUTANT_BOUNDS,
    Bounds,
    Verdict,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", autouse=True)
def spin_installed() -> None:
    """Debian's spin and gcc: installed here when missing and running as root, else skip."""
    reason = spin_check.ensure_tools()
    if reason is not None:
        pytest.skip(f"SPIN model check needs spin and gcc: {reason}")


def describe(verdict: Verdict) -> str:
    return f"{verdict.summary()}\n{verdict.output[-3000:]}"


@pytest.mark.parametrize("n", sorted(CHECKED))
def test_safety_properties_hold(n: int) -> None:
    """Every assertion holds in every reachable state (N=3: ~1M states, N=4: ~3M)."""
    verdict = spin_check.verify(CHECKED[n], hash_bits=25)
    assert verdict.proved, describe(verdict)


@pytest.mark.parametrize("n", sorted(CHECKED))
def test_liveness_properties_hold_under_weak_fairness(n: int) -> None:
    """``ltl liveness``: Dead silos stop serving; crashed ones are declared Dead while a majority is connected."""
    verdict = spin_check.verify(CHECKED[n], ltl="liveness", hash_bits=25)
    assert verdict.proved, describe(verdict)


SMALL = Bounds(3, loss=2, faults=2, outages=1)
LOSS_ONLY = Bounds(3, loss=2, faults=0, outages=0)
FIVE_LOSS_ONLY = Bounds(5, loss=2, faults=0, outages=0)


@pytest.mark.parametrize(
    ("defines", "bounds", "expected", "optimize"),
    [
        # the first version's bug: an intermediary whose probe failed counted as a second vote
        (["MUTANT_INTERMEDIARY_VOTES"], SMALL, "own_vote_only", False),
        # ... and the partition property alone catches it: a majority silo is declared Dead
        (["MUTANT_INTERMEDIARY_VOTES", "PARTITION_PROPERTY_ONLY"], CHECKED[3], "majority_side_survives", True),
        # without the majority rule, a minority silo helps kill a majority silo
        (["MUTANT_NO_MAJORITY_RULE", "PARTITION_PROPERTY_ONLY"], LOSS_ONLY, "majority_side_survives", False),
        # one vote is a quorum: one observer of a lossy link kills
        (["MUTANT_QUORUM_ONE"], SMALL, "majority_side_survives", False),
        # an unconditional write: two writers write the same version
        (["MUTANT_BLIND_WRITE"], SMALL, "version_written_once", False),
        # a silo that reads itself Dead and keeps going writes again
        (["MUTANT_NO_SELF_TERMINATION"], SMALL, "dead_silo_writes_nothing", False),
        # the majority rule's first form: a silo suspected a probe later still counts as heard
        (["MUTANT_HEARD_UNTIL_SUSPECTED", "PARTITION_PROPERTY_ONLY"], FIVE_LOSS_ONLY, "majority_side_survives", True),
        # a resumed observer counts its own pause as the targets' silence
        (["MUTANT_PAUSE_IS_SILENCE"], CHECKED[3], "majority_side_survives", True),
    ],
    ids=[
        "intermediary-votes",
        "intermediary-votes-partition",
        "no-majority-rule",
        "quorum-one",
        "blind-write",
        "no-self-termination",
        "heard-until-suspected",
        "pause-is-silence",
    ],
)
def test_a_broken_rule_gives_a_counterexample(
    defines: list[str], bounds: Bounds, expected: str, optimize: bool
) -> None:
    verdict = spin_check.verify(bounds, defines=defines, hash_bits=22, optimize=optimize)
    assert verdict.errors > 0, describe(verdict)
    assert verdict.violation == expected, describe(verdict)


@pytest.mark.parametrize(
    ("defines", "ltl"),
    [
        # Dead written over by a stale, unconditional write (a safety ltl block)
        (["MUTANT_BLIND_WRITE"], "dead_terminal"),
        # a silo declared Dead keeps serving forever
        (["MUTANT_NO_SELF_TERMINATION"], "dead_stops"),
        # an intermediary that cannot reach the target vetoes too: a crash is never declared
        (["MUTANT_FAILURE_VETOES"], "crash_detected"),
    ],
    ids=["dead-terminal", "dead-stops", "crash-detected"],
)
def test_a_broken_rule_violates_its_ltl_property(defines: list[str], ltl: str) -> None:
    """Only the ltl block is checked (``NO_ASSERTIONS``): its never claim finds the counterexample."""
    verdict = spin_check.verify(SMALL, ltl=ltl, defines=[*defines, "NO_ASSERTIONS"], hash_bits=22, optimize=False)
    assert verdict.errors > 0, describe(verdict)
    if ltl in spin_check.SAFETY_LTL:  # the never claim's own assertion: "!( !(<the ltl state formula>))"
        assert verdict.violation is not None, describe(verdict)
        assert verdict.violation.startswith("!"), describe(verdict)
    else:
        assert verdict.violation == "acceptance cycle", describe(verdict)


def test_the_loss_bound_is_tight() -> None:
    """One more lost link-round than the suite allows at N=3 can kill a silo of the majority side.

    The counterexample is the one no detector can avoid: both links of one silo drop for a
    whole suspicion (two rounds, four link-rounds), so it is indistinguishable from a crash
    and the other two declare it Dead. The rules absorb every smaller loss (``CHECKED``); if
    this starts passing, isolated silos are no longer detected: a liveness bug.
    """
    verdict = spin_check.verify(Bounds(3, loss=CHECKED[3].loss + 1, faults=0, outages=0), hash_bits=22, optimize=False)
    assert verdict.violation == "majority_side_survives", describe(verdict)


def test_one_silo_serves_the_key_with_the_lease_and_the_takeover_wait() -> None:
    """``-DLEASE``: every assertion, ``one_server_per_key`` included, holds (N=3: ~0.9M states).

    The environment may hang and crash a silo, partition, lose messages, take the table down,
    let one silo leave gracefully and hold one read's answer back for rounds."""
    verdict = spin_check.verify(LEASE_CHECKED, lease=True, hash_bits=24)
    assert verdict.proved, describe(verdict)


@pytest.mark.parametrize(
    "defines",
    [
        # a new owner serves as soon as it reads the death: the zombie, cut off and just
        # confirmed by a read that preceded the Dead write, still serves on its lease
        ["MUTANT_NO_TAKEOVER_WAIT"],
        # the wait is one round shorter than the lease: the same, a round later (W >= L is tight)
        ["LEASE_TICKS=2", "WAIT_TICKS=1"],
        # the lease checked by a timer, not before each request: a silo resuming from a pause
        # serves on its old state until the timer runs, after its successor's wait ended
        ["MUTANT_NO_LEASE_CHECK_AFTER_PAUSE"],
        # the lease anchored when the confirming read returned: a read sent before the Dead
        # write that returns after the successor's wait renews the zombie's lease
        ["MUTANT_LEASE_FROM_RETURN"],
        # the wait only for the owner of the new owner's previous view: it learned of the
        # zombie's death earlier, while a silo between them owned the key, which then left
        # gracefully; the new owner takes over at once while the zombie's lease still runs
        ["MUTANT_WAIT_FOR_PREVIOUS_OWNER_ONLY"],
        # a leaving silo writes its row before it stops serving: its successor needs no wait
        ["MUTANT_LEAVE_WRITES_FIRST"],
    ],
    ids=[
        "no-takeover-wait",
        "wait-shorter-than-lease",
        "no-lease-check-after-pause",
        "lease-from-return",
        "wait-for-previous-owner-only",
        "leave-writes-first",
    ],
)
def test_a_broken_lease_rule_gives_a_counterexample(defines: list[str]) -> None:
    verdict = spin_check.verify(LEASE_CHECKED, lease=True, defines=defines, hash_bits=22, optimize=False)
    assert verdict.errors > 0, describe(verdict)
    assert verdict.violation == "one_server_per_key", describe(verdict)


@pytest.mark.parametrize("witness", [1, 2], ids=["hung", "cut-off"])
def test_the_zombie_occurs_while_the_next_owner_serves(witness: int) -> None:
    """Not vacuous: the next owner serves while the silo declared Dead before it, which served
    the key on its lease after the Dead write, is alive and still believes it owns the key:
    hung (1), or running alone on its side of a partition (2). ``no_zombie_takeover`` asserts
    that this never happens, so SPIN must find it."""
    verdict = spin_check.verify(
        LEASE_CHECKED, lease=True, defines=[f"ZOMBIE_WITNESS={witness}"], hash_bits=22, optimize=False
    )
    assert verdict.violation == "no_zombie_takeover", describe(verdict)


def test_one_silo_serves_the_key_with_the_lease_renewed_through_peers_in_table_outages() -> None:
    """``-DLEASE -DPEERS``: every assertion holds (N=3: ~0.8M states) while silos that cannot read
    the table renew their leases when every other member of their view answers at the same view
    version, having heard of no newer one and with no write of unknown outcome; two outages, and
    one write that commits while its writer sees it fail."""
    verdict = spin_check.verify(PEERS_CHECKED, peers=True, hash_bits=24)
    assert verdict.proved, describe(verdict)


@pytest.mark.parametrize(
    "defines",
    [
        # the members that answer, with the asker, are a majority: the silo declared Dead (hung,
        # resumed in the outage) renews on the word of a member that has not read the death,
        # while its successor, which did and waited out W, is on the other side of a partition
        ["MUTANT_VOUCH_MAJORITY"],
        # a member whose view is newer than the asker's (it read the death) vouches anyway: the
        # zombie renews on the word of its own successor
        ["MUTANT_VOUCH_IGNORES_NEWER"],
    ],
    ids=["vouch-majority", "vouch-ignores-newer"],
)
def test_a_broken_vouching_rule_gives_a_counterexample(defines: list[str]) -> None:
    verdict = spin_check.verify(PEERS_MUTANT_BOUNDS, peers=True, defines=defines, hash_bits=22, optimize=False)
    assert verdict.errors > 0, describe(verdict)
    assert verdict.violation == "one_server_per_key", describe(verdict)


def test_the_peers_do_renew_a_lease_that_ran_out() -> None:
    """Not vacuous: ``no_fenced_owner_vouched`` asserts that vouching never renews the lease of a
    silo that owns the key and whose lease ran out during an outage, so SPIN must find one."""
    verdict = spin_check.verify(
        PEERS_MUTANT_BOUNDS, peers=True, defines=["VOUCH_WITNESS"], hash_bits=22, optimize=False
    )
    assert verdict.violation == "no_fenced_owner_vouched", describe(verdict)


def test_one_silo_serves_the_key_while_a_silo_joins_and_takes_it() -> None:
    """``-DLEASE -DPEERS -DJOINS``: every assertion holds (N=3: ~1M states) while silo 0 joins (its
    row absent, Joining, then Active) and takes the key from silo 1 after its takeover wait, with
    a table outage during which the others vouch for one another, a lost link-round and a fault."""
    verdict = spin_check.verify(JOINS_CHECKED, joins=True, hash_bits=24)
    assert verdict.proved, describe(verdict)


@pytest.mark.parametrize(
    ("defines", "bounds"),
    [
        # the validation pings carry no version: silo 1 (the key's owner, its view without the
        # joiner) and silo 2 vouch for each other in the outage after the join, and silo 1 serves
        # on that lease while the joiner, its wait over, serves too
        (["MUTANT_JOIN_PING_SILENT"], JOINS_MUTANT_BOUNDS),
        # the joiner serves as soon as it is Active, while silo 1 still serves on its lease
        (["MUTANT_JOINER_NO_WAIT"], JOINS_MUTANT_BOUNDS),
        # a silo whose view never had the joiner Active reads it Dead and serves at once, while
        # the joiner, declared Dead, still serves on its lease
        (["MUTANT_GHOST_ONLY_IF_SEEN_ACTIVE"], Bounds(3, loss=0, faults=1, outages=1)),
    ],
    ids=["join-ping-silent", "joiner-no-wait", "ghost-only-if-seen-active"],
)
def test_a_broken_join_rule_gives_a_counterexample(defines: list[str], bounds: Bounds) -> None:
    verdict = spin_check.verify(bounds, joins=True, defines=defines, hash_bits=22, optimize=False)
    assert verdict.errors > 0, describe(verdict)
    assert verdict.violation == "one_server_per_key", describe(verdict)
