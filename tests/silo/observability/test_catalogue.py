"""The metric catalogue follows OpenMetrics naming and equals the list in docs/operations.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from silo.observability.catalogue import METRIC_NAMES, METRICS, MetricKind, MetricSpec
from silo.observability.prometheus import SiloMetrics

ROOT = Path(__file__).resolve().parents[3]
DOC_ROW = re.compile(r"^\| `(silo_[a-z_]+)` \|")
UNITS = ("_seconds", "_total", "_score", "_version", "silo_silos", "silo_fenced")  # silo_fenced: a 0/1 state


def documented_names() -> list[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    return [match.group(1) for line in text.splitlines() if (match := DOC_ROW.match(line))]


def test_docs_list_exactly_the_exported_metrics_in_order() -> None:
    assert documented_names() == list(METRIC_NAMES)


@pytest.mark.parametrize("spec", METRICS, ids=lambda spec: spec.name)
def test_names_have_the_prefix_and_a_unit(spec: MetricSpec) -> None:
    name = spec.name
    assert name.startswith("silo_")
    assert re.fullmatch(r"[a-z_]+", name)
    assert any(name.endswith(unit) or name == unit for unit in UNITS), f"{name} names no unit"
    assert (spec.kind is MetricKind.COUNTER) == name.endswith("_total")


def counter_total(metrics: SiloMetrics, family_name: str) -> float:
    families = text_string_to_metric_families(generate_latest(metrics.registry).decode())
    family = next(family for family in families if family.name == family_name)
    return next(sample.value for sample in family.samples if sample.name == f"{family_name}_total")


def test_each_silo_has_a_registry_of_its_own() -> None:
    first, second = SiloMetrics("memory"), SiloMetrics("memory")
    first.gossip_sent()
    assert (counter_total(first, "silo_gossip_sent"), counter_total(second, "silo_gossip_sent")) == (1, 0)


def test_version_only_refreshes_are_counted_apart_from_full_ones() -> None:
    metrics = SiloMetrics("memory")
    metrics.refresh_skipped()
    metrics.refresh_skipped()
    metrics.refresh_completed(0.01)
    assert counter_total(metrics, "silo_table_refreshes_skipped") == 2
