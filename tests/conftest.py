"""Session-wide fixtures and the hypothesis profiles. Real servers live in ``testbed/services/``, one module each."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

pytest_plugins: list[str] = [
    "testbed.pytest_signals",  # SIGTERM and SIGHUP tear the fixtures down (and stop the servers) as Ctrl-C does
    "testbed.services.zookeeper",
    "testbed.services.postgres",
    "testbed.services.mariadb",
    "testbed.services.consul",
    "testbed.services.dynamodb",
    "testbed.services.spark",
]

ONE_AT_A_TIME = {
    "network-lab": ("tests/faults/", "tests/netfaults/", "tests/test_benchmarks_smoke.py"),
    "spark": ("tests/silo/spark/", "tests/services/test_spark_cluster.py"),
}
"""Tests that ``make test`` (pytest-xdist workers) runs on one worker, one after another, by group
and path prefix. The first build network namespaces or run benchmarks and time real silos against
a detection floor of a second or two, so two of them must not share the cores; the second each
start a Spark standalone cluster (JVMs: a master and two workers)."""


class OneAtATimeScheduling(LoadScopeScheduling):
    """xdist's load balancing, test by test, except that each group of ``ONE_AT_A_TIME`` goes to one
    worker as a unit. (xdist's own ``--dist loadgroup`` renames node ids, which pytest 9.2 no longer
    lets a plugin do: every test was balanced on its own.)"""

    def _split_scope(self, nodeid: str) -> str:
        return next((group for group, paths in ONE_AT_A_TIME.items() if nodeid.startswith(paths)), nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> OneAtATimeScheduling | None:
    return OneAtATimeScheduling(config, log) if config.getvalue("dist") == "load" else None


# Property-based tests (hypothesis) run on a fixed budget: "ci" (the default) keeps all of them
# under a minute across every backend and does not shrink (a failure prints its reproduction
# blob; rerun it with HYPOTHESIS_PROFILE=dev to shrink it); "dev" shrinks, "thorough" searches
# longer. Failing examples are stored in tests/.hypothesis-examples/ (committed): every run
# replays them first, so a failure found anywhere is reproduced everywhere until it is fixed.
# Runs read that directory only (hypothesis would delete the examples that pass now, and every
# test run would change the repository); new failures go to .hypothesis/examples (git-ignored).
# HYPOTHESIS_STORE_EXAMPLES=1 writes to the committed directory, to keep a new failure for all.
COMMITTED_EXAMPLES = DirectoryBasedExampleDatabase(Path(__file__).parent / ".hypothesis-examples")
EXAMPLES: ExampleDatabase = (
    COMMITTED_EXAMPLES
    if os.environ.get("HYPOTHESIS_STORE_EXAMPLES") == "1"
    else MultiplexedDatabase(
        ReadOnlyDatabase(COMMITTED_EXAMPLES),
        DirectoryBasedExampleDatabase(Path(__file__).parents[1] / ".hypothesis" / "examples"),
    )
)
_COMMON = {
    "deadline": None,
    "derandomize": False,
    "database": EXAMPLES,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile(
    "ci",
    max_examples=12,
    stateful_step_count=30,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    **_COMMON,
)
settings.register_profile("dev", max_examples=50, stateful_step_count=40, **_COMMON)
settings.register_profile("thorough", max_examples=500, stateful_step_count=60, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
