"""Conformance checks for ``MembershipTable`` backends, shipped so anyone can prove theirs.

* ``run_conformance(open_cluster)`` runs every check without any test framework.
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

__all__ = ["CHECKS", "Check", "ConformanceError", "OpenCluster", "make_entry", "run_conformance"]
