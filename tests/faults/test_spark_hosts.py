"""``route_to_silos`` on a Spark standalone cluster whose workers are hosts of their own.

One ``SparkLab`` for the module (``testbed/spark_lab.py``): PostgreSQL, the master and the driver
each on a lab host, and three worker hosts, each with its Spark worker and a sidecar silo
advertising the host's address. The job routes keys with ``example.echo``; every row comes back
tagged with the sidecar of the executor that routed it (``testbed/spark_driver.py``).

- Healthy: every record reaches its owner, and exactly the records whose owner is the routing
  executor's own sidecar stay on their host; that share is the one the ring predicts.
- Discovery: with ``SILO_SIDECAR_ADDRESS`` empty in every executor, each finds the silo its host
  advertises (``silo.spark.sidecar``), and the same share stays on the host.
- A worker host crashed mid-job (its silo, worker and executor SIGKILLed), and a worker host
  cut from everything mid-job (iptables DROP both ways): the job finishes with every record
  once, none lost, none twice; only the lost silo's keys move, each to its next owner on the ring.

The fault is injected while a task is paused half-way through a partition (the driver's
``pause``), on a host other than that task's, so the paused task's remaining records meet the
fault whatever the machine's speed.

- A worker host decommissioned gracefully mid-job by ``deploy/spark/decommission-worker.sh``, run
  on that host: its sidecar drains (``silo drain --wait``: ShuttingDown in the view, then Dead),
  then the worker gets Spark's own decommission signal (SIGPWR, ``spark.decommission.enabled``)
  and ends DECOMMISSIONED. Every record once; the sidecar runs no batch that reached it after
  its ShuttingDown row but those already admitted; its keys move to their next owners.

Needs root; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from membership_tables import SiloStatus
from silo.client.topology import ClusterView
from silo.work.columnar_routing import DEFAULT_IN_FLIGHT
from silo.work.hashring import HashRing
from testbed.netfaults import Host
from testbed.services.process import wait_until
from testbed.spark_lab import UNDER_SPARK_LOAD, SparkLab
from tests.silo.runtime.test_drain import logged_at
from tests.silo.work_handlers import CALLS_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORKERS = 3
RECORDS = 6000
PARTITIONS = 12
PAUSE = (PARTITIONS // 2, RECORDS // PARTITIONS // 2)
"""The task of the middle partition pauses half-way through it: the other executors are busy with
the partitions around it, and a third of the job is still to come."""

DRIVER = "testbed.spark_driver"
ON_HOST_TOLERANCE = 0.05
"""Points the measured stayed-on-host share may differ from the ring's prediction."""


RECORDING_HANDLER = "rec"
"""``example.echo`` that also records each call (``tests.silo.work_handlers.echo_and_record``)."""
SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "spark" / "decommission-worker.sh"
PACE = 0.004
"""Seconds each task waits per record it feeds: a steady stream of batches for about 8 s."""
CALLS_BEFORE = 5
"""Calls the victim's sidecar has run when the test decommissions its host: the job is under way."""


@pytest.fixture(scope="module")
def calls_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where every sidecar records its ``rec`` calls (the silos inherit ``SILO_TEST_CALLS``)."""
    path = tmp_path_factory.mktemp("calls") / "calls.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CALLS_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, calls_file: Path) -> Iterator[SparkLab]:
    handler = ("--handler", f"{RECORDING_HANDLER}=tests.silo.work_handlers:echo_and_record")
    with SparkLab(tmp_path_factory.mktemp("spark-lab"), WORKERS, silo_args=(*UNDER_SPARK_LOAD, *handler)) as spark_lab:
        yield spark_lab


def check_once_each(rows: list[list[Any]]) -> None:
    """Every key in the output exactly once, and each result is the tag its row was sent with."""
    keys = Counter(row[0] for row in rows)
    lost = RECORDS - len(keys)
    duplicated = sum(count - 1 for count in keys.values())
    assert (lost, duplicated) == (0, 0), f"{lost} records lost, {duplicated} duplicated"
    assert set(keys) == {f"k{number}" for number in range(RECORDS)}


def predicted_on_host(rows: list[list[Any]], view: ClusterView) -> float:
    """The ring's prediction: each executor keeps the ring's share of keys its sidecar owns,
    weighted by the records that executor routed."""
    ring = HashRing(view.addresses)
    owned = Counter(ring.owner(row[0]).endpoint for row in rows)
    routed_by = Counter(row[1] for row in rows)
    return sum(count * owned[sidecar] / len(rows) for sidecar, count in routed_by.items()) / len(rows)


def test_records_stay_on_their_host_where_its_sidecar_owns_them(lab: SparkLab) -> None:
    view = lab.view()
    assert sorted(address.endpoint for address in view.addresses) == sorted(
        lab.sidecar_endpoint(host) for host in lab.net.hosts
    )
    out = lab.run_driver(DRIVER, {"records": RECORDS, "partitions": PARTITIONS, "summary": True}, "healthy")
    rows = out["rows"]
    check_once_each(rows)
    ring = HashRing(view.addresses)
    local = 0
    for key, tag, silo, rerouted, via_sidecar in rows:
        owner = ring.owner(key)
        assert (silo, rerouted) == (str(owner), False), (key, tag, silo)
        assert via_sidecar is (owner.endpoint == tag), (key, tag, silo, via_sidecar)
        local += via_sidecar
    routed_by = Counter(row[1] for row in rows)
    assert set(routed_by) == {lab.sidecar_endpoint(host) for host in lab.net.hosts}, routed_by
    summary = out["summary"]
    assert (summary["records"], summary["via_sidecar"], summary["rerouted"]) == (RECORDS, local, 0)
    predicted = predicted_on_host(rows, view)
    assert abs(summary["stayed_on_host_fraction"] - predicted) <= ON_HOST_TOLERANCE, (
        f"stayed on host {summary['stayed_on_host_fraction']:.3f}, the ring predicts {predicted:.3f}"
    )
    assert 0.2 < summary["stayed_on_host_fraction"] < 0.5, summary  # three hosts: about a third


def test_executors_without_a_sidecar_address_find_the_silo_advertised_at_their_hosts_address(lab: SparkLab) -> None:
    """``SILO_SIDECAR_ADDRESS`` empty in every executor: each finds its host's sidecar by the address
    it advertises, and exactly the records that sidecar owns stay on the host."""
    view = lab.view()
    out = lab.run_driver(
        DRIVER, {"records": RECORDS, "partitions": PARTITIONS, "summary": True, "discover": True}, "discovery"
    )
    rows = out["rows"]
    check_once_each(rows)
    ring = HashRing(view.addresses)
    for key, executor_address, silo, rerouted, via_sidecar in rows:
        owner = ring.owner(key)
        assert (silo, rerouted) == (str(owner), False), (key, executor_address, silo)
        assert via_sidecar is (owner.host == executor_address), (key, executor_address, silo, via_sidecar)
    assert {row[1] for row in rows} == {host.address for host in lab.net.hosts}
    predicted = predicted_on_host([[key, f"{address}:{lab.net.port}", *rest] for key, address, *rest in rows], view)
    measured = out["summary"]["stayed_on_host_fraction"]
    assert measured > 0.2, out["summary"]  # three hosts: about a third, none if discovery found nothing
    assert abs(measured - predicted) <= ON_HOST_TOLERANCE, f"stayed on host {measured:.3f}, predicted {predicted:.3f}"


def run_with_fault(lab: SparkLab, name: str, fault: str) -> tuple[list[list[Any]], ClusterView, Host]:
    """Run the job, inject ``fault`` ("kill" or "partition") on a worker host while a task on
    another host is paused; return the rows, the view the job started with and the victim."""
    view = lab.view()
    run = lab.start_driver(DRIVER, {"records": RECORDS, "partitions": PARTITIONS, "pause": list(PAUSE)}, name)
    paused_on = lab.host_of_sidecar(run.wait_signal("paused"))
    victim = next(host for host in lab.net.hosts if host is not paused_on)
    if fault == "kill":
        lab.kill_host(victim)
    else:
        lab.net.lab.isolate(victim)
    run.send_signal("go")
    out = run.result()
    return out["rows"], view, victim


def check_only_the_victims_keys_moved(rows: list[list[Any]], view: ClusterView, victim: Host) -> None:
    ring = HashRing(view.addresses)
    lost = next(address for address in view.addresses if address.host == victim.address)
    moved = 0
    for key, _, silo, rerouted, _ in rows:
        owners = ring.owners(key, 2)
        if rerouted:
            assert (owners[0], silo) == (lost, str(owners[1])), (key, silo, [str(owner) for owner in owners])
            moved += 1
        else:
            assert silo == str(owners[0]), (key, silo, str(owners[0]))
    assert moved, f"no record of {lost} was rerouted: the fault did not land mid-job"


def check_survivors(lab: SparkLab, victim: Host) -> None:
    """The other sidecars stayed Active through the fault; the victim's silo was declared Dead."""
    survivors = [silo.name for silo in lab.net.silos if silo.host is not victim]
    lab.net.wait_for(
        lambda view: view.statuses[victim.name] is SiloStatus.DEAD,
        60,
        f"{victim.name} Dead",
        invariant=lambda view: view.all_status(survivors, SiloStatus.ACTIVE),
        invariant_what="the other sidecars Active",
    )


def test_a_worker_host_killed_mid_job_loses_and_duplicates_nothing(lab: SparkLab) -> None:
    rows, view, victim = run_with_fault(lab, "killed", "kill")
    try:
        check_once_each(rows)
        check_only_the_victims_keys_moved(rows, view, victim)
        check_survivors(lab, victim)
    finally:
        lab.restore(victim)


def test_a_worker_host_partitioned_mid_job_loses_and_duplicates_nothing(lab: SparkLab) -> None:
    rows, view, victim = run_with_fault(lab, "partitioned", "partition")
    try:
        other = next(silo.name for silo in lab.net.silos if silo.host is not victim)
        assert not lab.net.reachable(other, victim.name), "the partition was not in effect during the job"
        check_once_each(rows)
        check_only_the_victims_keys_moved(rows, view, victim)
        check_survivors(lab, victim)
    finally:
        lab.restore(victim)


def calls_by(calls: Path, pid: int) -> list[dict[str, Any]]:
    """The calls ``pid`` has recorded (complete lines only: the silos append while the test reads)."""
    text = calls.read_text() if calls.exists() else ""
    lines = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
    return [line for line in lines if line["pid"] == pid]


def decommission_host(lab: SparkLab, host: Host, tmp_path: Path) -> str:
    """Run ``deploy/spark/decommission-worker.sh`` on ``host`` as on a real worker host: drain its
    sidecar with the ``silo`` command, then send its worker Spark's decommission signal; its output."""
    silo = next(silo for silo in lab.net.silos if silo.host is host)
    env_file = tmp_path / "sidecar.env"
    env_file.write_text(f"SILO_CLUSTER={lab.cluster_id}\nSILO_HOST={host.address}\nSILO_PORT={lab.net.port}\n")
    silo_bin = tmp_path / "silo"
    silo_bin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m silo "$@"\n')
    silo_bin.chmod(0o755)
    worker = lab.workers[lab.net.hosts.index(host)]
    settings = {
        "SILO_ENV_FILE": env_file,
        "SILO_BIN": silo_bin,
        "SILO_DRAIN_WAIT": "40s",
        "SPARK_DECOMMISSION_COMMAND": f"kill -{int(signal.SIGPWR)} {worker.process.process.pid}",
    }
    command = ["env", *(f"{name}={value}" for name, value in settings.items()), "sh", str(SCRIPT)]
    done = host.run(command, timeout=90)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{silo.log_text()[-3000:]}"
    return done.stdout


def test_a_worker_host_decommissioned_mid_job_drains_its_sidecar_first_and_loses_nothing(
    lab: SparkLab, calls_file: Path, tmp_path: Path
) -> None:
    view = lab.view()
    live = {address.host for address in view.addresses}
    victim = next(host for host in lab.net.hosts if host.address in live)
    silo = next(silo for silo in lab.net.silos if silo.host is victim)
    spec = {"records": RECORDS, "partitions": PARTITIONS, "pace": PACE, "handler": RECORDING_HANDLER}
    # Arrow batches of 100 rows reach the router while the task still feeds the rest.
    conf = {"spark.decommission.enabled": "true", "spark.sql.execution.arrow.maxRecordsPerBatch": "100"}
    run = lab.start_driver(DRIVER, spec, "decommissioned", conf)
    outcome: dict[str, str] = {}

    def decommission_mid_job() -> None:
        wait_until(lambda: len(calls_by(calls_file, silo.pid)) >= CALLS_BEFORE, 120, "the job to reach the victim")
        outcome["script"] = decommission_host(lab, victim, tmp_path)

    trigger = threading.Thread(target=decommission_mid_job, daemon=True)
    trigger.start()
    try:
        rows = run.result()
        trigger.join(120)
        assert "script" in outcome, f"the decommission did not run (see the thread's error):\n{run.log_tail()}"
        script = outcome["script"]
        assert script.index("has exited") < script.index("decommission-worker: kill"), script
        worker = lab.workers[lab.net.hosts.index(victim)]

        def victim_state() -> str:
            return next(
                entry["state"]
                for entry in lab.spark.state()["workers"]
                if entry["port"] == worker.port and entry["host"] == victim.address
            )

        wait_until(lambda: victim_state() == "DECOMMISSIONED", 60, "the victim's worker to be DECOMMISSIONED")
        assert lab.net.statuses()[victim.name] is SiloStatus.DEAD
        assert silo.exit_code == 0
        check_once_each(rows["rows"])
        check_only_the_victims_keys_moved(rows["rows"], view, victim)
        shutting_down = logged_at(silo.log_text(), "as SHUTTING_DOWN")
        late = [call for call in calls_by(calls_file, silo.pid) if call["at"] > shutting_down]
        # At most the calls the executors had in flight when the drain began (admitted before it).
        assert len(late) <= WORKERS * DEFAULT_IN_FLIGHT, late
        moved = sum(row[3] for row in rows["rows"])
        print(f"{moved} of {RECORDS} records rerouted; {len(late)} calls began on the sidecar after ShuttingDown")
    finally:
        lab.restore(victim)
