"""Reading the Markdown the docs tests check: a table as rows of header -> cell."""

from __future__ import annotations

import re


def first_table(text: str) -> list[dict[str, str]]:
    """The first table in ``text``: one mapping of column header -> cell per row (``\\|`` is a pipe in a cell)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if not lines:
        raise ValueError("no Markdown table in the text")
    rows = [cells(line) for line in lines if not re.fullmatch(r"\|[-|: ]+\|", line.strip())]
    header, body = rows[0], rows[1:]
    return [dict(zip(header, row, strict=True)) for row in body]


def cells(line: str) -> list[str]:
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
