"""The container image (``deploy/docker/Dockerfile``) holds what serves a Spark job.

There is no Docker engine in the test bench, so this checks what the image would hold: the
Dockerfile's ``pip install`` requirement set, installed exactly into a fresh virtual environment
from the build context its ``.dockerignore`` lets through, runs a silo that serves a columnar
batch (the only path ``route_to_silos`` uses), and holds no pyspark.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import silo
from membership_tables import SiloAddress
from silo.work.client import SyncWorkClient
from testbed.cluster_harness import LISTENING_RE, START_TIMEOUT
from testbed.services.process import ServerProcess, wait_until
from tests.dockerfile import DOCKERFILE, build_args, build_context, expand, instructions, pip_requirements
from tests.silo import work_handlers

CLUSTER = "image"
INSTALL_TIMEOUT = 900


def test_the_image_is_slim_runs_silo_as_a_non_root_user_and_exposes_the_silo_port() -> None:
    steps = instructions(DOCKERFILE.read_text())
    variables = build_args(steps)
    (base,) = [expand(arguments, variables) for keyword, arguments in steps if keyword == "FROM"]
    assert re.fullmatch(r"python:3\.\d+-slim", base), base
    (user,) = [arguments for keyword, arguments in steps if keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user}: numeric, so that Kubernetes' runAsNonRoot can check it"
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    (entrypoint,) = [json.loads(arguments) for keyword, arguments in steps if keyword == "ENTRYPOINT"]
    assert entrypoint == ["silo"]
    exposed = {int(port) for keyword, arguments in steps if keyword == "EXPOSE" for port in arguments.split()}
    assert 11111 in exposed  # the silo port: Membership, Work, gRPC health, reflection
    assert pip_requirements(steps, Path("/ctx")) == ["/ctx[serve-spark,postgres]"]


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding exactly the image's requirement set."""
    work = tmp_path_factory.mktemp("image")
    context = build_context(work / "context")
    requirements = pip_requirements(instructions(DOCKERFILE.read_text()), context)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        check=False,
        timeout=INSTALL_TIMEOUT,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv


def venv_python(venv: Path, code: str, path: Path) -> str:
    """Run ``code`` with the venv's interpreter, importing only from the venv and ``path`` (also its
    working directory: ``python -c`` imports from there first)."""
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(path)},
        cwd=path,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT + 120)
def test_the_image_requirement_set_serves_a_columnar_batch_without_pyspark(image_venv: Path, tmp_path: Path) -> None:
    # a handler module importable in the image's environment alone (it imports pyarrow and silo)
    handlers = tmp_path / "handlers"
    handlers.mkdir()
    shutil.copy2(work_handlers.__file__, handlers / "image_handlers.py")
    found = json.loads(
        venv_python(
            image_venv,
            "import importlib.metadata as m, importlib.util as u, json, silo; print(json.dumps({"
            "'silo': silo.__file__, 'version': m.version('silo-membership'),"
            "'missing': [n for n in ('pyarrow', 'psycopg', 'grpc_reflection', 'pyspark') if u.find_spec(n) is None]}))",
            handlers,
        )
    )
    assert Path(found["silo"]).is_relative_to(image_venv), "the silo must come from the image's environment"
    assert found["version"] == silo.__version__  # the single-source version reached the metadata
    assert found["missing"] == ["pyspark"]  # lean: pyarrow and the store's driver, no Spark

    log = tmp_path / "silo.log"
    argv = [str(image_venv / "bin" / "silo"), "run", "--table", f"sqlite:///{tmp_path / 'm.db'}", "--cluster", CLUSTER]
    argv += ["--preset", "local", "--handler", "lengths=image_handlers:key_lengths"]
    server = ServerProcess(argv, log, env={"PYTHONPATH": str(handlers), "PYTHONUNBUFFERED": "1"})
    try:
        wait_until(lambda: "is active" in log.read_text(), START_TIMEOUT, "the image's silo Active", log)
        match = LISTENING_RE.search(log.read_text())
        assert match is not None
        batch = pa.RecordBatch.from_arrays([pa.array(["k1", "k22"]), pa.array([1, 2])], names=["key", "value"])
        with SyncWorkClient(CLUSTER, sender="image-test") as client:
            call = client.submit_columnar(SiloAddress.parse(match.group(1)), "lengths", batch, 30.0)
            assert call.result().to_pylist() == [b"\0\0\0\2", b"\0\0\0\3"]
        assert "will refuse columnar" not in log.read_text()
    finally:
        server.stop()
