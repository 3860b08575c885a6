"""Kill to Dead with a lossy link to the store: ``benchmarks.detection``'s ``lossy-store`` scenario.

Five silos, each on a network-namespace host of its own, on a PostgreSQL table on a host of its
own (``NetCluster(table="postgres")``). Only the table's link is lossy: ``set_link_loss`` drops
each packet to or from the PostgreSQL host with probability ``loss`` (both ways, so a request
and its answer are each lost independently); the silos' links to each other stay whole, so
probing is what it always is and the time a verdict takes in the store shows on its own. Trials
alternate a lossless control and a lossy kill on the same cluster: set the loss, let it settle,
SIGKILL a random silo, and poll the table (through PostgreSQL's unix socket, which no lab fault
touches) every ``POLL`` until its row is Dead; then heal, start a replacement on a new host and
wait until it is Active. (Not on the victim's host: a silo restarted at once on the endpoint of
one just declared Dead was seen voted Dead itself, its peers reporting refusals from it 0.2 s
after it turned Active, as if their channels to the endpoint still held the old process's
failure.) Kill -> Dead visible in the table, as a multiple of the floor. Live silos declared
Dead meanwhile are counted (false deaths).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import ratio, summarize
from membership_tables import MembershipTableError, SiloStatus

POLL = 0.05
"""Seconds between the table reads that time the Dead row (its resolution)."""
BOUND = 60.0
"""Seconds after a kill by which the victim must be Dead (a correctness bound, not a goal)."""
TARGET = 1.3
"""Kill -> Dead with the lossy store link, median, at most this times the floor (issue 43)."""


@dataclass
class LossyStoreTrial:
    loss: float
    victim: str
    kill_to_dead: float | None = None
    """Seconds from the SIGKILL to the first read showing the victim Dead; None past ``BOUND``."""
    false_deaths: list[str] = field(default_factory=list)


def kill_and_time(cluster: Any, victim: str) -> LossyStoreTrial:
    """SIGKILL ``victim`` and poll the table until its row is Dead (``cluster``: a ``NetCluster``).

    Every silo must be Active and running before the kill (else it is a false death already)."""
    trial = LossyStoreTrial(0.0, victim)
    view, alive = cluster.view(), live_silos(cluster)
    trial.false_deaths = [name for name in alive if view.statuses[name] is not SiloStatus.ACTIVE]
    if trial.false_deaths:
        return trial
    address = cluster.silo(victim).address
    others = {cluster.silo(name).address: name for name in alive if name != victim}
    killed_at = time.monotonic()
    cluster.silo(victim).kill()
    while time.monotonic() - killed_at < BOUND:
        try:
            data = cluster.read()
        except MembershipTableError:
            data = None
        read_at = time.monotonic() - killed_at
        for entry in data.entries if data is not None else ():
            if entry.status is not SiloStatus.DEAD:
                continue
            if entry.silo_address == address and trial.kill_to_dead is None:
                trial.kill_to_dead = read_at
            name = others.get(entry.silo_address)
            if name is not None and name not in trial.false_deaths:
                trial.false_deaths.append(name)
        if trial.kill_to_dead is not None:
            return trial
        time.sleep(POLL)
    return trial


def live_silos(cluster: Any) -> list[str]:
    return [name for name in cluster.names if cluster.silo(name).running]


def lossy_store_trials(workdir: Path, trials: int, loss: float, rng: random.Random, settle: float) -> dict[str, Any]:
    """``trials`` lossless and ``trials`` lossy kills, alternated, on one 5-silo cluster (module docstring)."""
    from testbed.net_cluster import NetCluster  # needs root and iptables: imported only when used

    workdir.mkdir(parents=True, exist_ok=True)
    done: list[LossyStoreTrial] = []
    with NetCluster(workdir, cluster_id="lossy_store", table="postgres") as cluster:
        cluster.start(5)
        table_host = cluster.table_host
        assert table_host is not None
        for index in range(2 * trials):
            level = loss if index % 2 else 0.0
            cluster.lab.set_link_loss(level, table_host)
            time.sleep(settle)
            victim = rng.choice(live_silos(cluster))
            trial = kill_and_time(cluster, victim)
            trial.loss = level
            done.append(trial)
            print(
                f"  lossy store {index // 2 + 1}/{trials}, {level:.0%} loss on the table's link: {victim} Dead after "
                + ("-" if trial.kill_to_dead is None else f"{trial.kill_to_dead:.3f}s")
                + (f", false deaths {trial.false_deaths}" if trial.false_deaths else ""),
                flush=True,
            )
            cluster.lab.heal()
            cluster.start(1)  # on a host of its own: see the module docstring
    return summarize_lossy_store(done, loss, cluster.options.detection_time)


def summarize_lossy_store(trials: list[LossyStoreTrial], loss: float, floor: float) -> dict[str, Any]:
    results: dict[str, Any] = {"loss": loss, "target_x_floor": TARGET}
    for key, level in (("lossless", 0.0), ("lossy", loss)):
        mine = [trial for trial in trials if trial.loss == level]
        stats = summarize([trial.kill_to_dead for trial in mine if trial.kill_to_dead is not None])
        results[key] = {
            "trials": len(mine),
            "kill_to_dead": stats,
            "ratio_to_floor": {"median": ratio(stats["median"], floor), "p99": ratio(stats["p99"], floor)},
            "not_dead_within_bound": sum(trial.kill_to_dead is None for trial in mine),
            "false_deaths": sum(len(trial.false_deaths) for trial in mine),
            "samples": [trial.kill_to_dead for trial in mine],
        }
    median = results["lossy"]["ratio_to_floor"]["median"]
    results["target_met"] = None if median != median else median <= TARGET
    return results


LOSSY_STORE_HEADERS = ["table link", "trials", "kill -> Dead median s", "p99 s", "median/floor", "p99/floor",
                       "target (x floor)", "not Dead in bound", "false deaths"]  # fmt: skip


def lossy_store_rows(lossy: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for key, label in (("lossless", "no loss"), ("lossy", f"{lossy['loss']:.0%} loss")):
        entry = lossy[key]
        stats, relative = entry["kill_to_dead"], entry["ratio_to_floor"]
        target = f"median <= {lossy['target_x_floor']}" if key == "lossy" else "-"
        rows.append(
            [label, entry["trials"], stats["median"], stats["p99"], relative["median"], relative["p99"], target,
             entry["not_dead_within_bound"], entry["false_deaths"]]
        )  # fmt: skip
    return rows
