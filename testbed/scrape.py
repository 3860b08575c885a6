"""Scraping a silo's ``/metrics`` over HTTP, for tests."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from testbed.cluster_harness import SiloProcess

METRICS_URL_RE = re.compile(r"serves metrics at (http://\S+/metrics)")


def metrics_url(silo: SiloProcess) -> str:
    match = METRICS_URL_RE.search(silo.log_text())
    assert match is not None, f"no metrics URL in the log:\n{silo.log_tail()}"
    return match.group(1)


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


class Scrape:
    """One scrape: families by name, and sample values by (sample name, labels)."""

    def __init__(self, text: str) -> None:
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in self.families.values()
            for sample in family.samples
        }

    @classmethod
    def of(cls, silo: SiloProcess) -> Scrape:
        return cls(scrape_text(metrics_url(silo)))

    def value(self, name: str, **labels: str) -> float:
        """A sample's value (0 when absent: a labelled counter appears at its first increment)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum over every sample ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(value for (sample, have), value in self.samples.items() if sample == name and wanted <= set(have))
