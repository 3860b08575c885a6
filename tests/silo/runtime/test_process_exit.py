"""A ``silo run`` process that has stopped exits at once, whatever table call is still blocked in a thread.

The bound is generous (a loaded two-core machine) but far below how long the blocked call
lasts: a process that waited for it would miss it by twenty seconds.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from silo.exit_codes import ExitCode
from testbed.cluster_harness import sqlite_cluster

pytestmark = pytest.mark.slow

BLOCKED_FOR = 30.0
"""How long the silo's blocked write waits for the lock: the SQL table's default busy timeout."""
EXIT_BOUND = 10.0


def test_a_silo_signalled_while_a_table_call_is_blocked_exits_without_waiting_for_it(tmp_path: Path) -> None:
    """Another process holds the SQLite write lock, so the join's first write (the version row)
    waits in a worker thread for up to ``BLOCKED_FOR``. SIGTERM stops the silo at once (it never
    joined, so there is no row to leave), and the process must exit with code 0 then, not once
    the write gives up."""
    with sqlite_cluster(tmp_path, "blocked") as cluster:
        cluster.table.initialize()  # the schema and WAL mode: reads go on while the lock is held
        holder = sqlite3.connect(tmp_path / "membership.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            (silo,) = cluster.start(1)
            time.sleep(2)  # the join reads the table, then waits for the lock
            assert silo.running, silo.log_tail()
            silo.send(signal.SIGTERM)
            signalled = time.monotonic()
            code = silo.wait_exit(EXIT_BOUND)
            took = time.monotonic() - signalled
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    assert code == ExitCode.OK, silo.log_tail()
    assert took < EXIT_BOUND < BLOCKED_FOR
    assert "without waiting for 1 thread(s) still running" in silo.log_text(), silo.log_tail()
