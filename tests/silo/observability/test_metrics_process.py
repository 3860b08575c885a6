"""Real ``silo run --metrics-port`` processes: scrape ``/metrics`` over HTTP while a silo dies.

Bounds come from the options plus slack (``death_bound``): they check that the counters
move, never how fast.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from silo.exit_codes import ExitCode
from silo.observability.catalogue import METRICS, MetricKind
from testbed.cluster_harness import ROOT, Cluster, death_bound, sqlite_cluster
from testbed.scrape import Scrape

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with sqlite_cluster(tmp_path, "metrics") as made:
        yield made


def test_counters_move_as_probes_fail_and_a_silo_is_declared_dead(cluster: Cluster) -> None:
    silos = cluster.start_active(3, "--metrics-port", "0")
    victim, survivors = silos[0], silos[1:]
    victim_label = str(victim.address)
    # A silo's monitors start once its own view shows it Active, which for the last joiner may be
    # just after start_active returns (the table says Active before that silo's view does); and a
    # survivor may probe the first silo before its view takes in the last joiner.
    cluster.wait_for(
        lambda _: all(
            Scrape.of(s).total("silo_probes_sent_total") > 0 and Scrape.of(s).value("silo_silos", status="active") == 3
            for s in survivors
        ),
        10,
        "the first probes, in views of all three silos",
    )
    before = [Scrape.of(silo) for silo in survivors]
    for scrape in before:
        assert scrape.value("silo_view_version") >= 3
        assert ("silo_local_health_score", ()) in scrape.samples, "read on the silo's event loop"
        assert scrape.value("silo_silos", status="active") == 3
        assert scrape.total("silo_table_operations_total", backend="sqlite", operation="read_all") > 0
        assert scrape.total("silo_probes_sent_total") > 0
        assert scrape.value("silo_deaths_declared_total", target=victim_label) == 0

    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    cluster.wait_for(
        lambda _: all(Scrape.of(s).value("silo_silos", status="dead") == 1 for s in survivors),
        20,
        "the survivors to see the death",
    )

    after = [Scrape.of(silo) for silo in survivors]
    failed = sum(
        scrape.value("silo_probes_refused_total", target=victim_label)
        + scrape.value("silo_probes_timed_out_total", target=victim_label)
        for scrape in after
    )
    assert failed >= 2, "the survivors' probes of the killed silo failed"
    assert sum(scrape.value("silo_suspicions_total", target=victim_label) for scrape in after) >= 1
    assert sum(scrape.value("silo_votes_cast_total", target=victim_label) for scrape in after) >= 1
    assert sum(scrape.value("silo_deaths_declared_total", target=victim_label) for scrape in after) == 1
    for old, new in zip(before, after, strict=True):
        assert new.value("silo_view_version") > old.value("silo_view_version")
        assert new.value("silo_silos", status="active") == 2
        assert new.total("silo_table_operations_total") > old.total("silo_table_operations_total")
        assert new.value("silo_probe_round_trip_seconds_count") > 0
        assert new.value("silo_table_refresh_duration_seconds_count") > 0
    assert sum(scrape.value("silo_gossip_sent_total") for scrape in after) >= 1
    assert sum(scrape.value("silo_gossip_received_total") for scrape in after) >= 1


def test_a_silo_exports_exactly_the_documented_metrics(cluster: Cluster) -> None:
    (silo,) = cluster.start_active(1, "--metrics-port", "0")
    scrape = Scrape.of(silo)
    # prometheus_client adds a ``<name>_created`` timestamp family per counter and histogram
    exported = {name for name in scrape.families if name.startswith("silo_") and not name.endswith("_created")}
    assert exported == {spec.family for spec in METRICS}
    for spec in METRICS:
        family = scrape.families[spec.family]
        assert family.type == spec.kind.value, spec.name
        if spec.kind is MetricKind.COUNTER:
            assert spec.name.endswith("_total")


def test_without_the_flag_a_silo_serves_no_metrics(cluster: Cluster) -> None:
    (silo,) = cluster.start_active(1)
    assert "serves metrics" not in silo.log_text()


def test_a_taken_metrics_port_is_a_configuration_error(cluster: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "silo", "run", "--table", cluster.table_uri, "--cluster", cluster.cluster_id]
        argv.append("--insecure")  # the production preset, in plaintext
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        finished = subprocess.run(
            [*argv, "--metrics-port", str(port)], capture_output=True, text=True, timeout=60, env=env, check=False
        )
    assert finished.returncode == ExitCode.BAD_CONFIGURATION
    assert f"cannot serve metrics on 127.0.0.1:{port}" in finished.stderr
    assert "pick a free --metrics-port" in finished.stderr
    assert not cluster.read().rows, "the silo never joined"
