"""``benchmarks.detection --transport``: parsing and the TLS / plaintext comparison (pure)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.detection import parse, transport_ratios


def trials(crash: float, hang: float) -> dict[str, object]:
    return {"crash": {"table_dead": {"median": crash}}, "hang": {"table_dead": {"median": hang}}}


def test_transport_defaults_to_plaintext_and_takes_both(tmp_path: Path) -> None:
    assert parse(["--quick", "--output-dir", str(tmp_path)])[1].transports == ("plaintext",)
    chosen = parse(["--quick", "--transport", "plaintext,tls", "--output-dir", str(tmp_path)])[1]
    assert chosen.transports == ("plaintext", "tls")
    with pytest.raises(SystemExit, match="--transport: unknown"):
        parse(["--quick", "--transport", "quic", "--output-dir", str(tmp_path)])


def test_the_ratio_is_tls_over_plaintext_per_size_and_failure_with_the_10_percent_target() -> None:
    comparison = transport_ratios({"5": trials(1.0, 2.0), "10": trials(1.0, 1.0)}, {"5": trials(1.05, 2.4)})
    assert set(comparison) == {"5"}
    assert comparison["5"]["crash"]["tls_over_plaintext"] == pytest.approx(1.05)
    assert comparison["5"]["crash"]["within_target"] is True
    assert comparison["5"]["hang"]["tls_over_plaintext"] == pytest.approx(1.2)
    assert comparison["5"]["hang"]["within_target"] is False
    missing = transport_ratios({"5": trials(math.nan, 1.0)}, {"5": trials(1.0, 1.0)})
    assert missing["5"]["crash"]["within_target"] is None
