"""``benchmarks.propagation``: its command line (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.propagation import MODES, parse, silo_options


def test_the_defaults_are_the_three_sizes_on_the_local_preset(tmp_path: Path) -> None:
    config = parse(["--output-dir", str(tmp_path)])[1]
    assert (config.sizes, config.trials, config.window, config.modes) == ((5, 10, 20), 6, 6.0, MODES)
    assert silo_options(config).probe_interval == 0.25


def test_production_probe_timings_at_one_size_from_the_command_line(tmp_path: Path) -> None:
    argv = ["--sizes", "20", "--trials", "12", "--window", "10", "--modes", "gossip_on_tls"]
    timings = ["--set", "probe_timeout=5s", "--set", "probe_interval=2s", "--set", "death_vote_expiration=120s"]
    config = parse([*argv, *timings, "--output-dir", str(tmp_path)])[1]
    assert (config.sizes, config.trials, config.window, config.modes) == ((20,), 12, 10.0, ("gossip_on_tls",))
    assert config.silo_options == (("probe_timeout", "5s"), ("probe_interval", "2s"), ("death_vote_expiration", "120s"))
    options = silo_options(config)
    assert (options.probe_timeout, options.probe_interval, options.num_probed_silos) == (5.0, 2.0, 10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "20,x"], "--sizes must be a number"),
        (["--sizes", ","], "--sizes must list"),
        (["--trials", "0"], "--trials must be a number of at least 1"),
        (["--window", "soon"], "--window must be a number of at least 1"),
        (["--set", "probe_timout=5s"], "--set: unknown option 'probe_timout'"),
        (["--set", "probe_timeout=5s"], r"--set: death_vote_expiration \(3.0s\) must be longer"),
    ],
)
def test_a_bad_flag_exits_with_what_to_change(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        parse([*argv, "--output-dir", str(tmp_path)])
