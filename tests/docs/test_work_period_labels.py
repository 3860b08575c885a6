"""No tracked text file carries a work-period label: they mean nothing to a reader.

A label is a number after "session(s)" ("session N", "sessions N-M"), a bracketed one
("(sN)"), or a dated run folder with one ("YYYY-MM-DD-sN", "-sN-production"). Words such as
"test session", "Spark session", "SparkSession" or ZooKeeper's "Expiring session 0x1f" carry no
number of a period and pass.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LABEL = re.compile(
    r"\bsessions?[ _-]*\d+(?![\dx])"  # "session N", "sessions N-M", "session-N" (not a hex id 0x...)
    r"|\(s\d{1,2}\)"  # "(sN)"
    r"|\d{4}-\d{2}-\d{2}-s\d+"  # a dated run folder: "YYYY-MM-DD-sN"
    r"|(?<![\w-])-s\d{1,2}(?=-|\b)",  # its short form: "-sN-production"
    re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    """Every file git tracks that is text (no NUL byte); the test needs a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout, so the tracked files are unknown ({exc}); run from a clone")
    paths = [ROOT / name for name in listed.decode().split("\0") if name]
    return [path for path in paths if path.is_file() and b"\0" not in path.read_bytes()]


def labels_in(text: str) -> list[str]:
    return [match.group(0) for match in LABEL.finditer(text)]


def test_no_tracked_text_file_has_a_work_period_label() -> None:
    files = tracked_text_files()
    assert len(files) > 100, "git ls-files listed too few files to be this repository"
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if labels_in(line)
    ]
    assert found == [], "remove the work-period labels (say what changed, not when):\n" + "\n".join(found)


SESSION = "session"  # built up below so that this file does not carry the labels it looks for


@pytest.mark.parametrize(
    "text",
    [f"measured in {SESSION} 12", f"{SESSION}s 20-24 did that", f"the figure (s{17})", f"Session {3}'s run",
     f"`propagation-2026-11-27-s{15}-tls`", f"same flags as the `-s{17}-production` run", f"{SESSION}-4"],
)  # fmt: skip
def test_a_label_is_found(text: str) -> None:
    assert labels_in(text) != []


@pytest.mark.parametrize(
    "text",
    ["a test session of pytest", "the Spark session helpers", "SparkSession.builder", "s3://bucket/results/",
     "Expiring session 0x1f2e, timeout of 1500ms exceeded", "session_timeout_s", "silos s1..s5, all Active",
     "B (s5002) suspected by A", "gcc -O0 -s"],
)  # fmt: skip
def test_ordinary_words_are_not_labels(text: str) -> None:
    assert labels_in(text) == []
