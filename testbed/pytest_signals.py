"""A pytest plugin: SIGTERM and SIGHUP end the run as Ctrl-C does, so every test server is stopped.

On SIGTERM or SIGHUP (``timeout``, a CI runner cancelling a job, a closed terminal) Python dies
at once, without fixture teardown, and the servers the fixtures started, each in a process group
of its own, run on forever. Here those signals raise ``KeyboardInterrupt``: pytest ends the run
and tears the fixtures down, as on Ctrl-C. Where that teardown cannot reach (a fixture
interrupted after starting a server and before yielding; a finalizer interrupted, which skips
the rest), the servers started and not stopped (``testbed.services.process``) are stopped when
pytest unconfigures, or at exit. Once the session finishes, a signal raises nothing (it would cut
the teardown short) but SIGKILLs the servers still running, so the teardown ends at once.

Loaded by ``tests/conftest.py``; ``pytest -p testbed.pytest_signals`` elsewhere. A signal whose
handler is not the default one (``nohup`` ignores SIGHUP) is left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType

import pytest

from testbed.services import process

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class _State:
    installed: list[int] = field(default_factory=list)
    """The signals handled here, given back their default handling when pytest unconfigures."""
    finishing: bool = False
    """The session is being torn down: a signal must not raise any more."""
    pid: int = 0
    """The process that installed the handlers (0: none installed)."""


_state = _State()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _state.pid:  # a forked child: it dies of the signal, as it would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _state.finishing:
        process.kill_all()
        return
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def _stop_leftovers() -> None:
    """Stop the servers no fixture stopped, saying which (a fixture that leaks one is a bug)."""
    if os.getpid() != _state.pid:  # a forked child inherited the registry: not its servers
        return
    _state.finishing = True
    for server in process.stop_all():
        with contextlib.suppress(OSError):  # after SIGHUP, the terminal may be gone
            sys.stderr.write(
                f"testbed.pytest_signals: stopped a server left running: {server.process.args!r} ({server.log})\n"
            )


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    _state.finishing = False
    _state.pid = os.getpid()
    for signum in SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _on_signal)
            _state.installed.append(signum)
    atexit.register(_stop_leftovers)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    _state.finishing = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _state.pid:
        return
    _stop_leftovers()
    atexit.unregister(_stop_leftovers)
    for signum in _state.installed:
        signal.signal(signum, signal.SIG_DFL)
    _state.installed.clear()
    _state.pid = 0
