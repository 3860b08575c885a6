from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from silo.errors import SiloError
from silo.membership.options import PRESETS, OptionsError, SiloOptions, parse_duration
from tests.docs.markdown import first_table


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("5m", 300.0), ("1h", 3600.0), ("7d", 604800.0), ("1.5", 1.5), (" 3 s ", 3.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5 weeks", "-1s", "1.2.3s"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(OptionsError, match="cannot parse duration"):
        parse_duration(text)


def test_production_defaults_match_the_design() -> None:
    options = SiloOptions.production()
    assert options == SiloOptions()
    assert (options.probe_timeout, options.num_missed_probes_limit, options.num_probed_silos) == (5.0, 3, 10)
    assert (options.num_votes_for_death_declaration, options.death_vote_expiration) == (2, 120.0)
    assert (options.i_am_alive_table_publish_timeout, options.num_missed_table_i_am_alive_limit) == (30.0, 3)
    assert (options.table_refresh_timeout, options.max_join_attempt_time) == (60.0, 300.0)
    assert options.use_liveness_gossip
    assert options.enable_indirect_probes
    assert (options.defunct_silo_expiration, options.defunct_silo_cleanup_period) == (7 * 86400.0, 3600.0)
    assert options.detection_time == 15.0
    assert options.stale_after == 90.0
    assert (options.full_refresh_every, options.full_refresh_interval) == (3, 180.0)


def test_local_preset_is_derived_from_production_with_fast_timings() -> None:
    local = SiloOptions.local()
    assert local.probe_timeout < 1.0
    assert local.num_votes_for_death_declaration == SiloOptions().num_votes_for_death_declaration
    assert set(PRESETS) == {"production", "local"}
    assert PRESETS["local"]() == local
    assert PRESETS["production"]() == SiloOptions()


def test_with_overrides_parses_strings_per_field_type() -> None:
    options = SiloOptions().with_overrides(
        {"probe_timeout": "500ms", "use_liveness_gossip": "false", "num_probed_silos": "4", "death_vote_expiration": 9}
    )
    assert options.probe_timeout == 0.5
    assert options.use_liveness_gossip is False
    assert options.num_probed_silos == 4
    assert options.death_vote_expiration == 9.0
    assert isinstance(options.death_vote_expiration, float)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"probe_timout": "1s"}, "unknown option 'probe_timout'; did you mean probe_timeout"),
        ({"frobnicate": "1"}, "known options: probe_timeout"),
        ({"probe_timeout": "soon"}, "bad value for option probe_timeout"),
        ({"num_probed_silos": "ten"}, "bad value for option num_probed_silos"),
        ({"use_liveness_gossip": "maybe"}, "bad value for option use_liveness_gossip: expected true or false"),
        ({"probe_timeout": "0s"}, "probe_timeout must be positive"),
        ({"num_missed_probes_limit": -1}, "num_missed_probes_limit must be positive"),
        ({"num_votes_for_death_declaration": "11"}, "exceeds num_probed_silos"),
        ({"death_vote_expiration": "10s"}, "must be longer than the detection time"),
        ({"num_probed_silos": 2.5}, "num_probed_silos must be a int"),
        ({"enable_indirect_probes": 1}, "enable_indirect_probes must be a bool"),
    ],
)
def test_bad_overrides_name_the_field_and_the_fix(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        SiloOptions().with_overrides(overrides)


def test_options_error_is_a_silo_error_and_a_value_error() -> None:
    assert issubclass(OptionsError, SiloError)
    assert issubclass(OptionsError, ValueError)


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SiloOptions().probe_timeout = 1.0  # type: ignore[misc]


OPTIONS_PAGE = Path(__file__).parents[3] / "docs" / "options.md"
PRESET_COLUMNS = {"production (default)": "production", "local": "local"}
"""The columns of the page's option table that show a preset, and the ``PRESETS`` name of each."""


def documented_options(page: str) -> dict[str, dict[str, str]]:
    """The option table of docs/options.md: option name -> column header -> cell."""
    return {row["option"].strip("`"): row for row in first_table(page)}


def documented_value_matches(cell: str, value: object) -> bool:
    """``cell`` (``5``, ``0.25``, ``true``, ``604800 (7 d)``) shows ``value``."""
    shown = cell.split(" ")[0]
    if isinstance(value, bool):
        return shown == str(value).lower()
    assert isinstance(value, int | float), value
    return float(shown) == float(value)


def test_the_options_page_shows_every_option_once_with_each_presets_value() -> None:
    table = documented_options(OPTIONS_PAGE.read_text())
    assert sorted(table) == sorted(field.name for field in dataclasses.fields(SiloOptions))
    assert set(PRESET_COLUMNS.values()) == set(PRESETS)
    wrong = [
        f"{name} ({column}): page says {row[column]!r}, code says {getattr(PRESETS[preset](), name)!r}"
        for name, row in table.items()
        for column, preset in PRESET_COLUMNS.items()
        if not documented_value_matches(row[column], getattr(PRESETS[preset](), name))
    ]
    assert wrong == []


DERIVED = re.compile(r"`options\.(\w+)[^`]*`\s*\(([\d.]+)\s+s\s+in\s+production,\s+([\d.]+)\s+s\s+locally\)")


def test_the_options_pages_derived_values_are_the_codes() -> None:
    """Each ``(X s in production, Y s locally)`` equals the property, rounded as the page shows it."""
    found = DERIVED.findall(OPTIONS_PAGE.read_text())
    assert {name for name, _, _ in found} == {"detection_time", "stale_after", "takeover_wait"}
    for name, production, local in found:
        for shown, options in ((production, SiloOptions.production()), (local, SiloOptions.local())):
            decimals = len(shown.partition(".")[2])
            assert round(getattr(options, name), decimals) == float(shown), (name, shown)


@pytest.mark.parametrize(
    ("cell", "value", "matches"),
    [("5", 5.0, True), ("604800 (7 d)", 604800.0, True), ("true", True, True), ("0.5", 0.25, False),
     ("false", True, False), ("3", 2, False)],
)  # fmt: skip
def test_the_page_check_tells_a_drifted_value(cell: str, value: object, matches: bool) -> None:
    assert documented_value_matches(cell, value) is matches


def test_the_local_preset_reads_the_whole_table_every_period() -> None:
    assert SiloOptions.local().full_refresh_every == 1
    assert SiloOptions.local().full_refresh_interval == SiloOptions.local().table_refresh_timeout


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "often"])
def test_full_refresh_every_must_be_a_positive_count_of_periods(value: str) -> None:
    with pytest.raises(OptionsError, match="full_refresh_every"):
        SiloOptions().with_overrides({"full_refresh_every": value})
