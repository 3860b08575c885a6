"""``benchmarks.scale``: its command line and how it spreads silos over host processes (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scale import Config, hosts_for, overrides, parse, set_arguments


def test_the_acceptance_sizes_with_gossip_on_and_five_steady_minutes_by_default(tmp_path: Path) -> None:
    config = parse(["--output-dir", str(tmp_path)])[1]
    assert config.sizes == (200, 500, 1000)
    assert config.gossip is True
    assert config.steady_window == 300.0
    assert overrides(config)["use_liveness_gossip"] == "true"
    assert "use_liveness_gossip=true" in set_arguments(config)


def test_sizes_gossip_steady_and_per_process_from_the_command_line(tmp_path: Path) -> None:
    argv = ["--sizes", "200,500", "--gossip", "off", "--steady", "30", "--per-process", "25", "--output-dir"]
    config = parse([*argv, str(tmp_path)])[1]
    assert (config.sizes, config.gossip, config.steady_window, config.per_process) == ((200, 500), False, 30.0, 25)
    assert overrides(config)["use_liveness_gossip"] == "false"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "200,x"], "--sizes must be a number"),
        (["--sizes", ","], "--sizes must list"),
        (["--gossip", "maybe"], "--gossip must be on or off"),
        (["--steady", "0"], "--steady must be a number of at least 1"),
        (["--per-process", "-3"], "--per-process must be"),
    ],
)
def test_bad_options_exit_saying_what_is_wrong(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        parse([*argv, "--output-dir", str(tmp_path)])


def test_silos_are_spread_over_at_most_ten_processes_per_core() -> None:
    assert hosts_for(1000, Config(), cores=2) == [50] * 20
    assert hosts_for(500, Config(), cores=2) == [25] * 20
    assert hosts_for(200, Config(), cores=2) == [10] * 20
    assert hosts_for(25, Config(), cores=2) == [13, 12]  # at least ten a process
    assert hosts_for(5, Config(), cores=2) == [5]
    assert hosts_for(45, Config(per_process=20), cores=2) == [20, 20, 5]
