"""Network-fault harness: hosts in network namespaces on a virtual LAN, cut or thinned with iptables.

See ``testbed/netfaults/lab.py`` for the topology and the fault semantics.
"""

from testbed.netfaults.lab import (
    Host,
    LabError,
    LabUnavailableError,
    NetworkLab,
    iptables_backend,
    lab_unavailable_reason,
    remove_stale_labs,
)

__all__ = [
    "Host",
    "LabError",
    "LabUnavailableError",
    "NetworkLab",
    "iptables_backend",
    "lab_unavailable_reason",
    "remove_stale_labs",
]
