"""A real ``silo run`` process whose handler outlives its membership lease returns no results.

The handler stops its own process mid-call (SIGSTOP) for longer than ``lease_timeout``, as a long
GC pause would: by the time it returns, the others may have declared the silo Dead and served
its keys elsewhere. The silo answers UNAVAILABLE instead of the results, so the router retries
the batch on the keys' owner.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from membership_tables import SiloAddress
from silo.membership.options import SiloOptions
from silo.work.client import SyncWorkClient, WorkUnavailableError
from testbed.cluster_harness import sqlite_cluster
from testbed.services.process import wait_until

CLUSTER = "outlived"
PAUSE = 3 * SiloOptions.local().lease_timeout


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state ``T`` in /proc)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def serves(client: SyncWorkClient, silo: SiloAddress) -> bool:
    try:
        return client.process(silo, "echo", [("k", b"ab")], timeout=30) == [b"ba"]
    except WorkUnavailableError:
        return False  # still fenced


def test_a_handler_that_outlives_the_lease_returns_unavailable_not_its_results(tmp_path: Path) -> None:
    with sqlite_cluster(tmp_path, CLUSTER) as cluster:
        (silo,) = cluster.start_active(
            1,
            "--handler",
            "pause=tests.silo.work_handlers:pause_own_silo",
            "--handler",
            "echo=tests.silo.work_handlers:reverse",
        )
        address = silo.address
        assert address is not None
        with SyncWorkClient(CLUSTER) as client, ThreadPoolExecutor(1) as pool:
            assert serves(client, address)
            call = pool.submit(client.process, address, "pause", [("k", b"v")], 60)
            wait_until(lambda: stopped(silo.pid), 30, "the handler stopped its silo", silo.log)
            time.sleep(PAUSE)
            silo.thaw()
            with pytest.raises(WorkUnavailableError, match="lost its membership lease while the handler ran"):
                call.result(timeout=60)
            # the silo renews its lease from the table and serves again
            wait_until(lambda: serves(client, address), 30, "the silo serving again", silo.log)
