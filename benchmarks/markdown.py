"""Markdown table lines for the benchmark pages (``benchmarks.report`` and the renderers beside it)."""

from __future__ import annotations

from benchmarks.common import fmt


def row(*cells: object) -> str:
    return "| " + " | ".join(fmt(c) if isinstance(c, float) else str(c) for c in cells) + " |"


def header(*names: str) -> list[str]:
    return [row(*names), row(*["---"] * len(names))]
