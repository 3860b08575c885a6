"""Bind one address, advertise another: silos listening on 0.0.0.0 in their own network namespaces.

Each silo runs in a lab host (``tests/netfaults``) with ``--host 0.0.0.0 --advertise-host
<its namespace address>``. Its row carries the namespace address, peers reach it there (a
joining silo pings every Active silo at its advertised address before it is Active, and a
silo cut off from its peers is probed there, suspected and voted Dead), and it binds the
wildcard. Needs root (network namespaces); skips with the reason otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from membership_tables import SiloStatus
from testbed.net_cluster import NetCluster, NetSilo
from testbed.netfaults import Host

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class WildcardCluster(NetCluster):
    """A ``NetCluster`` whose silos bind 0.0.0.0 and advertise their host's address."""

    def _spawn(self, host: Host) -> NetSilo:
        # NetCluster passes --host <address> first; the later --host wins (argparse keeps the last)
        self.extra_args = ["--host", "0.0.0.0", "--advertise-host", host.address]
        return super()._spawn(host)


def test_silos_bound_to_the_wildcard_advertise_and_are_probed_at_their_namespace_address(tmp_path: Path) -> None:
    with WildcardCluster(tmp_path) as cluster:
        silos = cluster.start(3)
        for silo in silos:
            assert silo.address is not None
            assert silo.address.host == silo.host.address != "0.0.0.0"
            assert f"listening on 0.0.0.0:{cluster.port}" in silo.log_text()
        rows = {entry.silo_address.host for entry in cluster.read().entries}
        assert rows == {silo.host.address for silo in silos}

        cluster.lab.isolate(silos[2].host)  # its peers' probes to its advertised address go unanswered
        cluster.wait_for(lambda view: view.all_status([silos[2].name], SiloStatus.DEAD), 60, "s3 voted Dead")
        assert cluster.view().all_status([silos[0].name, silos[1].name], SiloStatus.ACTIVE)
