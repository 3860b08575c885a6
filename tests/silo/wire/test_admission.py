"""The transport check a silo makes before it writes its row (pure rules)."""

from __future__ import annotations

import pytest

from membership_tables import MembershipEntry, SiloAddress, SiloStatus
from silo.wire.admission import TRANSPORT_PROPERTY, advertised_properties, transport_mismatch
from tests.silo.rpc_fakes import entry

TLS_ROW = entry(SiloAddress("10.0.0.1", 1, 1), properties={TRANSPORT_PROPERTY: "tls"})
PLAIN_ROW = entry(SiloAddress("10.0.0.2", 1, 1), properties={"zone": "a"})


def test_only_a_tls_silo_advertises_its_transport() -> None:
    assert advertised_properties({"zone": "a"}, tls=True) == {"zone": "a", TRANSPORT_PROPERTY: "tls"}
    assert advertised_properties({"zone": "a"}, tls=False) == {"zone": "a"}


@pytest.mark.parametrize(
    ("rows", "tls", "problem"),
    [
        ([], True, None),
        ([], False, None),
        ([TLS_ROW], True, None),
        ([PLAIN_ROW], False, None),
        ([TLS_ROW], False, "start this silo with --tls-cert, --tls-key and --tls-ca"),
        ([PLAIN_ROW], True, "run the whole cluster with TLS, or this silo without it"),
        ([PLAIN_ROW.replace(status=SiloStatus.DEAD)], True, None),
        ([TLS_ROW.replace(status=SiloStatus.SHUTTING_DOWN)], False, None),
    ],
)
def test_a_silo_never_joins_active_silos_of_the_other_transport(
    rows: list[MembershipEntry], tls: bool, problem: str | None
) -> None:
    found = transport_mismatch(rows, tls)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
        assert "silos never mix transports" in found
