"""A slow store (a gray failure): every round trip to PostgreSQL held 1-5 s for a while.

Five ``silo run`` processes (local preset) reach a real PostgreSQL table through a
``CountingProxy`` that holds each request 1 to 5 s (``testbed.slow_store``). Every table call
then takes longer than the whole lease (1 s), so no silo's own reads can renew it: the lease
goes through the peers, who cannot read in time either, all at the same view with no write in
doubt, which is the outage verdict (``silo.membership.lease``): nobody fences. Probes do not
touch the table, so nobody is suspected, and nobody is declared Dead. The silos do not make up
for slow calls with more of them: one lease read per silo at a time, the periodic work waits
for its call. What is checked:

* nobody Dead and every silo running at every poll of the slow phase, nobody fenced;
* requests to the store while slow at most 2 x the steady state's rate (counted on the wire);
* one refresh period after the store is fast again, a SIGKILLed silo is declared Dead within
  the death bound (the figure, with the baseline kill's, is printed: run with ``-s``).

The suite's slow phase is 30 s (``SILO_SLOW_STORE_SECONDS``); ``benchmarks.slow_store`` runs the five-minute one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.services.postgres import PostgresServer
from testbed.slow_store import SlowStoreCluster

pytestmark = [pytest.mark.slow]

SLOW_SECONDS = float(os.environ.get("SILO_SLOW_STORE_SECONDS", "30"))
"""Seconds the store is slow; the issue's target is five minutes (``benchmarks.slow_store``)."""
STEADY_SECONDS = 20.0
"""Seconds of full-speed traffic the slow phase is compared with (ten table refreshes)."""
TRAFFIC_LIMIT = 2.0
"""Store requests per second while slow, at most this times the steady state's."""


@pytest.mark.timeout(SLOW_SECONDS + STEADY_SECONDS + 240)
def test_a_slow_store_kills_nobody_fences_nobody_and_costs_no_extra_traffic(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    with SlowStoreCluster(tmp_path, postgres_server, "slow_store") as bench:
        run = bench.run(STEADY_SECONDS, SLOW_SECONDS)
        describe = bench.cluster.describe()
        survivors = [silo for silo in bench.cluster.silos if silo.running]
        assert len(survivors) == run.size - 1, describe
        # every versioned write: deaths with their quorum, and none of a silo that still runs
        bench.cluster.check_history(bench.cluster.options.num_votes_for_death_declaration, protected=survivors)
    steady, slow = run.steady.per_second(), run.slow.per_second()
    print(
        f"\n[slow store {run.delay[0]:g}-{run.delay[1]:g}s per round trip, {run.slow.seconds:.0f}s] "
        f"requests/s {steady['round_trips']:.1f} steady, {slow['round_trips']:.1f} slow ({run.traffic_ratio:.2f} x), "
        f"connections/s {steady['connections']:.2f} -> {slow['connections']:.2f}; fenced {run.fenced or 'nobody'}; "
        f"kill -> Dead {run.baseline_kill_to_dead:.2f}s before, {run.kill_to_dead:.2f}s one refresh after "
        f"(floor {run.floor}s)"
    )
    assert run.slow.tally.delayed > 0, "the proxy must have held the silos' requests"
    assert not run.dead_while_slow, f"declared Dead or exited while the store was slow: {run.dead_while_slow}"
    assert not run.fenced, f"fenced while the store was slow (reachable, only slow): {run.fenced}\n{describe}"
    assert run.traffic_ratio <= TRAFFIC_LIMIT, f"store traffic {run.traffic_ratio:.2f} x the steady state"
    assert run.kill_to_dead <= run.death_bound, f"kill -> Dead {run.kill_to_dead:.2f}s after the store recovered"
