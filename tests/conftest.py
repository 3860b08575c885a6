"""Session-wide fixtures and the hypothesis profiles. Real servers live in ``testbed/services/``, one module each."""

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

pytest_plugins: list[str] = [
    "testbed.pytest_signals",  # SIGTERM and SIGHUP tear the fixtures down (and stop the servers) as Ctrl-C does
    "testbed.services.zookeeper",
    "testbed.services.postgres",
    "testbed.services.mariadb",
    "testbed.services.consul",
    "testbed.services.dynamodb",
    "testbed.services.spark",
]

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
