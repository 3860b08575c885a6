"""The project's own static checks run with the suite, so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_tool(*argv: str) -> subprocess.CompletedProcess[str]:
    tool = BIN / argv[0]
    if not tool.exists() and shutil.which(argv[0]) is None:
        pytest.fail(
            f"{argv[0]} is not installed; install the test dependency group: pip install -e '.[all]' --group test"
        )
    executable = str(tool) if tool.exists() else argv[0]
    return subprocess.run([executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_lint_is_clean() -> None:
    result = run_tool("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = run_tool("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_strict_is_clean() -> None:
    result = run_tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
