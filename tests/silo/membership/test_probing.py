from __future__ import annotations

import pytest

from silo.membership.local_health import MAX_SCORE
from silo.membership.probing import bounded_indirect_timeout


@pytest.mark.parametrize(
    ("requested", "probe_timeout", "bounded"),
    [
        (1.0, 5.0, 1.0),  # an honest caller: as asked
        (5.0 * (MAX_SCORE + 1), 5.0, 5.0 * (MAX_SCORE + 1)),  # the most degraded honest caller: as asked
        (5.0 * (MAX_SCORE + 1) + 1, 5.0, 5.0 * (MAX_SCORE + 1)),
        (1e300, 0.5, 0.5 * (MAX_SCORE + 1)),
        (float("inf"), 0.5, 0.5 * (MAX_SCORE + 1)),
    ],
)
def test_an_indirect_probe_timeout_is_capped(requested: float, probe_timeout: float, bounded: float) -> None:
    assert bounded_indirect_timeout(requested, probe_timeout) == bounded
