"""Conformance checks for ``MembershipTable`` backends, shipped so anyone can prove theirs.

* ``run_conformance(open_cluster)`` runs every check without any test framework;
  ``check_malformed_rows_are_skipped_and_reported(open_cluster, store)`` the one that
  needs a hook writing an unparsable row through the store's own driver.
* ``membership_tables.testing.pytest_suite.MembershipTableConformance`` turns each check
  into a pytest test (import it only where pytest is installed).
"""

from membership_tables.testing.checks import (
    CHECKS,
    Check,
    ConformanceError,
    OpenCluster,
    make_entry,
    run_conformance,
)
from membership_tables.testing.malformed import StoreMalformedRow, check_malformed_rows_are_skipped_and_reported

__all__ = [
    "CHECKS",
    "Check",
    "ConformanceError",
    "OpenCluster",
    "StoreMalformedRow",
    "check_malformed_rows_are_skipped_and_reported",
    "make_entry",
    "run_conformance",
]
