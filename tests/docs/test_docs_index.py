"""docs/README.md lists every page of docs/ once, and every link of the docs resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
INDEX = DOCS / "README.md"
LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")


def test_the_index_lists_every_page_once() -> None:
    listed = re.findall(r"^\| \[([\w.-]+\.md)\]\(\1\) \| \S", INDEX.read_text(), flags=re.MULTILINE)
    pages = sorted(path.name for path in DOCS.glob("*.md") if path != INDEX)
    assert sorted(listed) == pages, "add a one-line entry to docs/README.md for each page (and only once)"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda path: path.name)
def test_every_relative_link_of_a_page_resolves(page: Path) -> None:
    broken = [target for target in LINK.findall(page.read_text()) if not (page.parent / target).exists()]
    assert broken == []
