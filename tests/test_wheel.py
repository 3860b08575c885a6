"""The wheel users install: the ``.proto``, the license and the single-source version, and no dev tools.

Built with ``pip wheel`` from a clean copy of what the image's build context holds
(``tests.dockerfile.build_context``), never from the working tree, whose ``build/`` directory may
hold files from an earlier build.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser

import pytest
from packaging.requirements import Requirement

import silo
from tests.dockerfile import ROOT, build_context

pytestmark = pytest.mark.slow

PROTO = "silo/wire/proto/silo/v1/membership.proto"
DEV_TOOLS = {"pytest", "ruff", "mypy", "selenium", "hypothesis", "moto", "grpcio-tools"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    work = tmp_path_factory.mktemp("wheel")
    context = build_context(work / "context")
    # without build isolation: the test environment's setuptools (the test dependency group pins one new enough)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
    built = subprocess.run(
        [*command, "--wheel-dir", str(work / "dist"), str(context)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = (work / "dist").glob("*.whl")
    return zipfile.ZipFile(path)


def metadata(wheel: zipfile.ZipFile) -> Message:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode())


def requirements(document: Message) -> dict[str | None, set[str]]:
    """Requirement names by extra (``None``: the core dependencies)."""
    by_extra: dict[str | None, set[str]] = {extra: set() for extra in document.get_all("Provides-Extra", [])}
    by_extra[None] = set()
    for text in document.get_all("Requires-Dist", []):
        requirement = Requirement(text)
        extras: list[str | None] = [
            extra
            for extra in by_extra
            if extra and requirement.marker and requirement.marker.evaluate({"extra": extra})
        ]
        for extra in extras or [None]:
            by_extra[extra].add(requirement.name)
    return by_extra


def test_the_wheel_ships_the_proto_the_license_and_the_typing_markers(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert wheel.read(PROTO) == (ROOT / PROTO).read_bytes()
    (license_file,) = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(license_file) == (ROOT / "LICENSE").read_bytes()
    assert {"silo/py.typed", "membership_tables/py.typed"} <= names
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "scripts/"))]


def test_the_metadata_has_the_single_source_version_and_publishes_no_dev_tools(wheel: zipfile.ZipFile) -> None:
    document = metadata(wheel)
    assert document["Version"] == silo.__version__
    assert document["License-Expression"] == "MIT"
    assert any(
        classifier.startswith("Programming Language :: Python :: 3")
        for classifier in document.get_all("Classifier", [])
    )
    by_extra = requirements(document)
    assert "test" not in by_extra  # a dependency group for developers, not an extra for users
    assert not DEV_TOOLS & set().union(*by_extra.values())
    assert "grpcio-reflection" in by_extra[None]
    assert by_extra["serve-spark"] == {"pyarrow"}  # the lean extra a Spark-serving silo needs: no pyspark
    assert by_extra["sql"] == set()  # SQLAlchemy is core; the name still installs
    duplicates = {
        extra: names & by_extra[None] for extra, names in by_extra.items() if extra and names & by_extra[None]
    }
    assert not duplicates, f"extras repeat core dependencies: {duplicates}"
