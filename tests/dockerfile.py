"""Reading ``deploy/docker/Dockerfile`` as ``docker build`` would, for tests without a Docker engine.

``instructions`` parses it (continuations joined, comments dropped), ``pip_requirements`` finds the
requirement set of its ``pip install`` with ``ARG`` defaults filled in, and ``build_context`` copies
what its ``.dockerignore`` lets into the build: the files a wheel of the project is built from.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = DOCKERFILE.with_name("Dockerfile.dockerignore")


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as ``(KEYWORD, arguments)``, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip():
            joined.append(line.strip())
    keyword_and_arguments = [line.split(None, 1) for line in joined]
    return [(parts[0].upper(), parts[1] if len(parts) > 1 else "") for parts in keyword_and_arguments]


def build_args(steps: list[tuple[str, str]]) -> dict[str, str]:
    """Every ``ARG NAME=default``: what a build without ``--build-arg`` uses."""
    defaults: dict[str, str] = {}
    for keyword, arguments in steps:
        if keyword == "ARG" and "=" in arguments:
            name, default = arguments.split("=", 1)
            defaults[name.strip()] = default.strip()
    return defaults


def expand(text: str, variables: dict[str, str]) -> str:
    """``${NAME}`` replaced as Docker does; a name with no value fails the test."""

    def value(match: re.Match[str]) -> str:
        assert match.group(1) in variables, f"the Dockerfile uses ${{{match.group(1)}}} without a default"
        return variables[match.group(1)]

    return re.sub(r"\$\{(\w+)\}", value, text)


def pip_requirements(steps: list[tuple[str, str]], context: Path) -> list[str]:
    """The requirements of the image's ``pip install``, its source mount mapped to ``context``."""
    variables = build_args(steps)
    installs = [arguments for keyword, arguments in steps if keyword == "RUN" and "pip install" in arguments]
    assert len(installs) == 1, f"expected one RUN pip install, found {installs}"
    words = shlex.split(installs[0])
    mounts = [word.removeprefix("--mount=").split(",") for word in words if word.startswith("--mount=")]
    (source,) = [dict(option.split("=", 1) for option in mount if "=" in option)["target"] for mount in mounts]
    requirements = [expand(word, variables) for word in words[words.index("install") + 1 :] if not word.startswith("-")]
    return [str(context) + word.removeprefix(source) if word.startswith(source) else word for word in requirements]


def build_context(destination: Path) -> Path:
    """What ``docker build`` would send: the repository root filtered by ``Dockerfile.dockerignore``
    (everything excluded, then the ``!`` entries let back in, ``__pycache__`` kept out)."""
    destination.mkdir()
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and line[0] != "#"]
    assert lines[0] == "*", "the .dockerignore must exclude everything first, then name what the build needs"
    for entry in lines[1:]:
        if not entry.startswith("!"):
            assert entry == "**/__pycache__", f"unexpected .dockerignore entry {entry!r}"
            continue
        source = ROOT / entry[1:].rstrip("/")
        if source.is_dir():
            shutil.copytree(source, destination / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, destination / source.name)
    return destination
