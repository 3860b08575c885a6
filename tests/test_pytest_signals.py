"""SIGTERM and SIGHUP tear a pytest run down as Ctrl-C does (``testbed.pytest_signals``).

Each case runs a real pytest on a throwaway test directory whose session fixture starts a
``ServerProcess`` (``sleep 300``), signals that pytest at one moment of the run, and checks that
pytest ends within seconds and the server is gone. The control runs without the plugin: the
server outlives pytest, as it did before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    import pytest

    from testbed.services.process import ServerProcess

    OUT = Path(os.environ["SIGNALS_TEST_OUT"])
    MOMENT = os.environ["SIGNALS_TEST_MOMENT"]


    def mark(name, text=""):
        (OUT / f"{name}.tmp").write_text(text)
        (OUT / f"{name}.tmp").rename(OUT / name)


    @pytest.fixture(scope="session")
    def server():
        # "teardown": a server that ignores SIGTERM, so that stopping it takes its whole timeout
        argv = ["sh", "-c", "trap '' TERM; exec sleep 300"] if MOMENT == "teardown" else ["sleep", "300"]
        server = ServerProcess(argv, OUT / "server.log")
        mark("pid", str(server.process.pid))
        if MOMENT == "setup":  # started, not yet yielded: like waiting for a server to be ready
            mark("ready")
            time.sleep(300)
        yield server
        if MOMENT == "teardown":
            mark("stopping")
        server.stop(timeout=300)


    @pytest.fixture
    def slow_setup():
        if MOMENT == "next":  # between two tests, while the next one is set up
            mark("ready")
            time.sleep(300)
    """
)

TESTS = textwrap.dedent(
    """
    import time

    from conftest import MOMENT, mark


    def test_first(server):
        if MOMENT in ("test", "teardown"):
            mark("ready")
            time.sleep(300)


    def test_second(server, slow_setup):
        pass
    """
)

WAIT = 60.0
"""How long pytest may take to reach the moment (its start-up, on a loaded machine)."""

EXIT = 15.0
"""How long pytest may take to end after the signal (about a second; more on a loaded machine).
The servers of the "teardown" case ignore SIGTERM for 300 s, so a miss still shows."""

Start = Callable[[str, bool], tuple["subprocess.Popen[bytes]", Path, Path]]
"""``start(moment, plugin)``: pytest, its marks' directory and its output file."""


def wait_for(path: Path, pytest_run: subprocess.Popen[bytes], output: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if pytest_run.poll() is not None:
            pytest.fail(f"pytest ended before {path.name} (exit {pytest_run.returncode}):\n{output.read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"pytest did not reach {path.name} in {WAIT}s:\n{output.read_text()}")
        time.sleep(0.02)
    time.sleep(0.2)  # well inside the sleep that follows the mark


def process_state(pid: int) -> str | None:
    """The process's state letter (``Z`` for a zombie), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while process_state(pid) not in (None, "Z"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def run_pytest(tmp_path: Path) -> Iterator[Start]:
    """Start pytest on the throwaway tests; kill whatever is left of it afterwards."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(moment: str, plugin: bool) -> tuple[subprocess.Popen[bytes], Path, Path]:
        suite = tmp_path / moment / "suite"
        out = tmp_path / moment / "out"
        suite.mkdir(parents=True)
        out.mkdir()
        (suite / "conftest.py").write_text(CONFTEST)
        (suite / "test_waits.py").write_text(TESTS)
        env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
        pythonpath = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        env.update(PYTHONPATH=os.pathsep.join(pythonpath), SIGNALS_TEST_OUT=str(out), SIGNALS_TEST_MOMENT=moment)
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        argv += ["-p", "testbed.pytest_signals"] if plugin else []
        output = out / "pytest.out"
        with output.open("wb") as log:
            run = subprocess.Popen(
                [*argv, str(suite)], cwd=suite, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        started.append((run, out))
        return run, out, output

    yield start
    for run, out in started:
        if run.poll() is None:
            run.kill()
            run.wait()
        with contextlib.suppress(FileNotFoundError, ValueError):
            pid = int((out / "pid").read_text())
            if "sleep" in Path(f"/proc/{pid}/cmdline").read_text():
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("test", signal.SIGTERM),
        ("test", signal.SIGHUP),
        ("next", signal.SIGTERM),
        ("setup", signal.SIGTERM),
        ("teardown", signal.SIGTERM),
    ],
    ids=["test-SIGTERM", "test-SIGHUP", "next-SIGTERM", "setup-SIGTERM", "teardown-SIGTERM"],
)
def test_a_signal_stops_the_servers_and_pytest(run_pytest: Start, moment: str, signum: signal.Signals) -> None:
    """``setup``: the session fixture has started its server and not yielded; ``teardown``: a
    second signal while the teardown waits for a server that ignores SIGTERM."""
    pytest_run, out, output = run_pytest(moment, True)
    wait_for(out / "ready", pytest_run, output)
    pid = int((out / "pid").read_text())
    pytest_run.send_signal(signum)
    if moment == "teardown":
        wait_for(out / "stopping", pytest_run, output)
        pytest_run.send_signal(signum)
    try:
        pytest_run.wait(EXIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pytest still runs {EXIT}s after {signum.name}:\n{output.read_text()}")
    assert pytest_run.returncode == pytest.ExitCode.INTERRUPTED, output.read_text()
    assert f"{signum.name} received" in output.read_text()
    assert gone(pid, 2.0), f"the server (pid {pid}) outlived pytest"


@pytest.mark.slow
def test_without_the_plugin_sigterm_leaves_the_server_running(run_pytest: Start) -> None:
    pytest_run, out, output = run_pytest("test", False)
    wait_for(out / "ready", pytest_run, output)
    pid = int((out / "pid").read_text())
    pytest_run.send_signal(signal.SIGTERM)
    assert pytest_run.wait(EXIT) == -signal.SIGTERM
    assert not gone(pid, 1.0), "the server was stopped without the plugin: the test above proves nothing"
