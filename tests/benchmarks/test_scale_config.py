"""``benchmarks.scale``: its command line and how it spreads silos over host processes (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import scale
from benchmarks.scale import Config, hosts_for, join_pace, options, overrides, parse, report, set_arguments
from membership_tables import SiloStatus
from tests.silo.harness import T0, address, row, view


def test_the_acceptance_sizes_with_gossip_on_and_five_steady_minutes_by_default(tmp_path: Path) -> None:
    config = parse(["--output-dir", str(tmp_path)])[1]
    assert config.sizes == (200, 500, 1000)
    assert config.gossip is True
    assert config.steady_window == 300.0
    assert overrides(config)["use_liveness_gossip"] == "true"
    assert "use_liveness_gossip=true" in set_arguments(config)


def test_sizes_gossip_steady_per_process_and_max_load_from_the_command_line(tmp_path: Path) -> None:
    argv = ["--sizes", "200,500", "--gossip", "off", "--steady", "30", "--per-process", "25", "--max-load", "45"]
    config = parse([*argv, "--mass-kill", "4", "--output-dir", str(tmp_path)])[1]
    assert (config.sizes, config.gossip, config.steady_window, config.per_process) == ((200, 500), False, 30.0, 25)
    assert (config.max_load, config.mass_kill) == (45.0, 4)
    assert parse(["--mass-kill", "0", "--output-dir", str(tmp_path)])[1].mass_kill == 0
    assert parse(["--output-dir", str(tmp_path)])[1].mass_kill == 10
    assert overrides(config)["use_liveness_gossip"] == "false"


def test_a_join_rate_interleaves_the_hosts_so_the_cluster_starts_that_many_joins_a_second(tmp_path: Path) -> None:
    assert parse(["--output-dir", str(tmp_path)])[1].join_rate is None  # the storm by default
    config = parse(["--join-rate", "40", "--sizes", "120", "--output-dir", str(tmp_path)])[1]
    assert config.join_rate == 40.0
    assert join_pace(0, 3, Config()) == []
    hosts = hosts_for(120, config, cores=2)
    starts = []
    for index, count in enumerate(hosts):
        pace = join_pace(index, len(hosts), config)
        flags = dict(zip(pace[::2], pace[1::2], strict=True))
        offset, spacing = float(flags["--join-offset"]), float(flags["--join-spacing"])
        starts += [offset + silo * spacing for silo in range(count)]
    assert sorted(starts) == pytest.approx([silo / 40 for silo in range(120)])


def test_set_changes_silo_options_over_the_preset_and_the_json_records_them(tmp_path: Path) -> None:
    argv = ["--set", "probe_timeout=5s", "--set", "probe_interval=5s", "--gossip", "off", "--output-dir"]
    config = parse([*argv, str(tmp_path)])[1]
    chosen = overrides(config)
    assert (chosen["probe_timeout"], chosen["probe_interval"]) == ("5s", "5s")
    assert chosen["num_probed_silos"] == "3"  # the rest of the preset stays
    assert chosen["use_liveness_gossip"] == "false"
    assert options(config).detection_time == 15.0
    assert set_arguments(config).count("--set") == len(chosen)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "200,x"], "--sizes must be a number"),
        (["--sizes", ","], "--sizes must list"),
        (["--gossip", "maybe"], "--gossip must be on or off"),
        (["--steady", "0"], "--steady must be a number of at least 1"),
        (["--per-process", "-3"], "--per-process must be"),
        (["--max-load", "none"], "--max-load must be a number"),
        (["--mass-kill", "-1"], "--mass-kill must be a number of at least 0"),
        (["--join-rate", "0.5"], "--join-rate must be a number of at least 1"),
        (["--set", "probe_timout=5s"], r"--set: unknown option 'probe_timout'; did you mean probe_timeout"),
        (["--set", "probe_timeout=soon"], r"--set: .*probe_timeout"),
        (["--set", "use_liveness_gossip=false"], r"--set: use --gossip on\|off"),
        (["--set", "death_vote_expiration=1s"], r"--set: death_vote_expiration \(1.0s\) must be longer"),
        (
            [
                "--set",
                "table_refresh_timeout=20s",
                "--set",
                "i_am_alive_table_publish_timeout=20s",
                "--set",
                "full_refresh_every=1",
            ],
            r"--set: the silos' refresh, full-read and heartbeat period \(20s\) must be at least the 25s",
        ),
    ],
)
def test_bad_options_exit_saying_what_is_wrong(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        parse([*argv, "--output-dir", str(tmp_path)])


def test_silos_are_spread_over_at_most_ten_processes_per_core() -> None:
    assert hosts_for(2000, Config(), cores=2) == [50] * 40  # at most 50 a process
    assert hosts_for(1000, Config(), cores=2) == [50] * 20
    assert hosts_for(500, Config(), cores=2) == [25] * 20
    assert hosts_for(200, Config(), cores=2) == [10] * 20
    assert hosts_for(25, Config(), cores=2) == [13, 12]  # at least ten a process
    assert hosts_for(5, Config(), cores=2) == [5]
    assert hosts_for(45, Config(per_process=20), cores=2) == [20, 20, 5]


def test_a_size_stopped_in_its_kill_trials_reports_its_join_and_steady_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steady = {"full_reads": 1.5, "all_reads": 9.0, "version_writes": 0.0, "heartbeats": 50.0, "statements": 120.0}
    stopped = {
        "silos": 500,
        "processes": 20,
        "all_active_s": 54.7,
        "join_curve": [[1.0, 0, 0, 0], [54.7, 500, 0, 0]],
        "false_deaths_joining": 0,
        "false_deaths_steady": 1,
        "rss_mb_per_silo": 9.5,
        "cpu_percent_per_silo": 0.4,
        "steady_ops_per_s": steady,
        "error": "timed out after 300.0s waiting for ACTIVE for 127.0.0.1:36883@1795662992903",
    }
    report({"gossip": True, "floor_s": 6.0, "sizes": {"500": stopped}})
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("500 "))
    assert row[:12] == ["500", "20", "54.7", "0", "1", "9.5", "0.4", "1.5", "9", "0", "50", "120"]
    assert row[12:] == ["-"] * 4  # no kill trial finished
    assert "500 silos stopped: timed out after 300.0s waiting for ACTIVE" in out


def test_an_interrupted_run_keeps_the_sizes_finished_and_the_phases_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped by hand (SIGTERM unwinds as KeyboardInterrupt) used to write no JSON at all."""

    async def fake_size(silos: int, config: Config, root: Path, measured: dict[str, Any]) -> None:
        measured.update(all_active_s=float(silos) / 10, false_deaths_joining=0)
        if silos == 500:
            raise KeyboardInterrupt  # during 500's steady window
        measured["false_deaths_steady"] = 0

    monkeypatch.setattr(scale, "one_size", fake_size)
    results = scale.measure(Config(sizes=(200, 500, 1000)))
    assert results["sizes"] == {
        "200": {"silos": 200, "all_active_s": 20.0, "false_deaths_joining": 0, "false_deaths_steady": 0},
        "500": {"silos": 500, "all_active_s": 50.0, "false_deaths_joining": 0, "error": scale.INTERRUPTED},
    }


def test_a_kill_is_compared_with_the_window_one_full_read_cycle_earlier() -> None:
    """The baseline window must hold the same periodic statements: heartbeats and version reads
    every 30 s, and each silo's full read every third refresh (90 s)."""
    assert scale.baseline_period(Config()) == 90.0
    assert scale.baseline_period(Config(options_set=(("full_refresh_every", "1"),))) == 30.0
    assert scale.baseline_period(Config(options_set=(("i_am_alive_table_publish_timeout", "20s"),))) == 180.0


def test_postgres_gets_a_connection_for_each_executor_thread_of_every_silo_process() -> None:
    """40 hosts of 2,000 silos and 10 victims, each with up to 6 table calls at once on two cores."""
    assert scale.connections_needed(50, cores=2) == 50 * 6 + scale.BENCHMARK_CONNECTIONS
    assert scale.connections_needed(50, cores=64) == 50 * 15 + scale.BENCHMARK_CONNECTIONS  # the pool's limit
    assert scale.connections_needed(3, cores=2) == 200  # never below the server's default


def test_a_join_that_stopped_says_how_long_nothing_moved_and_what_the_hosts_used() -> None:
    curve = [(0.0, 0, 10, 0), (30.0, 5, 5, 0), (60.0, 8, 2, 0), (120.0, 8, 2, 0), (180.0, 8, 2, 0)]
    host_cpu = [(float(t), 1.9 * t) for t in range(0, 181, 10)]
    limit = scale.stall_limit(curve, host_cpu)
    assert limit["active_unchanged_s"] == 120.0
    assert limit["host_cores_busy"] == pytest.approx(1.9)
    assert limit["cores"] >= 1
    assert scale.stall_limit([], host_cpu) == {}
    assert scale.stall_limit(curve, host_cpu[:1]) == {}


def test_a_join_that_ran_out_of_time_is_reported_where_it_stopped_beside_its_window_and_kills(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The size went on after its join ran out of time: its row shows how many were Active then."""
    curve = [(0.0, 13, 1987, 0), (300.0, 1514, 486, 0)]
    error = scale.JoinDidNotFinishError("not all Active", curve, {"active_unchanged_s": 194.0,
                                        "host_cores_busy": 1.83, "cores": 2.0}, timed_out=True)  # fmt: skip
    stopped = {
        "silos": 2000,
        "processes": 53,
        "join_stopped": error.stopped(),
        "false_deaths_joining": 0,
        "false_deaths_steady": 0,
        "versions_per_removal": [2, 2, 2],
    }
    assert stopped["join_stopped"] == {
        "after_s": 300.0, "active": 1514, "joining": 486, "dead": 0,
        "active_unchanged_s": 194.0, "host_cores_busy": 1.83, "cores": 2.0,
    }  # fmt: skip
    report({"gossip": True, "floor_s": 15.0, "sizes": {"2000": stopped}})
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("2000 "))
    assert row[:5] == ["2000", "53", "1514@300s", "0", "0"]
    assert "2000 silos: 1514 Active when the join stopped after 300s; the Active count stood still for 194s" in out
    assert "2000 silos stopped" not in out


def test_a_joiner_that_gave_up_is_not_counted_as_a_false_death(tmp_path: Path) -> None:
    """Its row stays Joining with a heartbeat that stands still, and the cluster rightly declares it
    Dead; every other Dead row is a silo the benchmark kept running, a false death."""
    gone, live = address(7001), address(7002)
    log = tmp_path / "host-0.log"
    log.write_text(
        f"2026-11-30 11:13:25,958 ERROR silo.runtime.silo: silo {gone} failed to start: silo {gone} could not "
        f"reach these Active silos within 600.0s: {live}\n"
    )
    assert scale.gave_up([log, tmp_path / "never-written.log"]) == {str(gone)}
    voted = ((address(7009), T0),)
    data = view(
        row(gone, SiloStatus.DEAD).replace(suspect_times=voted),  # voted against while it waited, then gave up
        row(live, SiloStatus.DEAD).replace(suspect_times=voted),
        row(address(7003)),
        row(address(7004), SiloStatus.DEAD),  # no vote: it wrote its Dead row itself (gave up, not logged yet)
    ).data
    assert scale.dead_silos(data) == sorted([str(gone), str(live)])
    assert scale.dead_silos(data, scale.gave_up([log])) == [str(live)]


def test_joiners_that_gave_up_are_taken_out_of_the_false_deaths_once_more_at_the_end() -> None:
    """A joiner writes its Dead row before its lagging loop logs that it gave up: the check at the
    end of the steady window counted 81 such rows as false deaths."""
    measured: dict[str, Any] = {
        "declared_dead": {"joining": ["a"], "steady": ["b", "c", "d"]},
        "false_deaths_joining": 1,
        "false_deaths_steady": 3,
        "gave_up_joining": 1,
    }
    scale.leave_out_gave_up(measured, {"c", "d", "e"})
    assert measured == {
        "declared_dead": {"joining": ["a"], "steady": ["b"]},
        "false_deaths_joining": 1,
        "false_deaths_steady": 1,
        "gave_up_joining": 3,
    }


def test_a_kill_in_a_cluster_whose_join_stopped_is_watched_as_long_as_the_poorest_health_needs() -> None:
    chosen = options(Config())
    assert scale.overloaded_death_bound(chosen) == pytest.approx(
        scale.death_bound(chosen) + 8 * chosen.detection_time
    )  # local health MAX_SCORE 8: nine times the silence before a monitor suspects
