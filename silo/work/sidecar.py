"""Which silo of a view is this worker's sidecar: the one on its own host.

A worker (a Spark executor) that knows its sidecar's advertised ``host:port`` names it
(``SidecarLocator.at(endpoint)``). One that does not finds it by host (``SidecarLocator.on_host``),
knowing its host by names (host names, addresses) and by the IP addresses of its interfaces.
"Names this host" means: equals one of those names (a short name matches the first label of a
longer one, ``node-1`` matches ``node-1.example.com``, but two different domains never match), or
is an IP address assigned to an interface of this host (network namespace). In that order:

1. the silo whose **advertised host** names this host: it listens in this network namespace
   (a per-executor pod sidecar advertising the pod IP, a silo on a worker host advertising the
   host's address);
2. if no silo or several do, the silo whose ``spark.host`` **property** names this host
   (``silo run --property spark.host=HOST``; the deploy files set the host name, or the
   Kubernetes node name for a DaemonSet silo that an executor pod, in a network namespace of
   its own, cannot recognise by address). Several silos on one loopback interface (a test
   cluster on one machine) are told apart this way.

A restarted sidecar (the same endpoint, a newer generation) replaces the old one. When several
endpoints match at the last step none is chosen: the worker has no sidecar rather than a wrong
one, and routing does not depend on it (the ring decides where each key goes; the sidecar only
marks the records that stayed on the host, ``via_sidecar``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from membership_tables import SiloAddress
from silo.client.topology import ClusterView, SiloInfo

__all__ = ["HOST_PROPERTY", "SidecarLocator", "is_local_address"]

HOST_PROPERTY = "spark.host"
"""The silo property naming the host whose workers it serves (``--property spark.host=HOST``)."""

log = logging.getLogger(__name__)


def is_local_address(host: str) -> bool:
    """True if ``host`` is an IP address assigned to an interface of this host (network namespace).

    Binding a socket to an address succeeds only for a local one, so no interface list is needed.
    A name (not an IP literal) is never local here: names are compared, not resolved.
    """
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def _normal(name: str) -> str:
    name = name.strip().strip("[]").rstrip(".").lower()
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(name))  # one spelling per address (IPv6 forms)
    return name


def _same_host(one: str, other: str) -> bool:
    """Equal names, or a short name and the first label of a qualified one (not two different domains)."""
    if one == other:
        return True
    if _is_ip(one) or _is_ip(other) or ("." in one) == ("." in other):
        return False
    return one.split(".", 1)[0] == other.split(".", 1)[0]


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class SidecarLocator:
    """How a worker recognises its sidecar in a view: by endpoint, or by host (module docstring).

    ``local_address`` is injectable (tests); the default binds a socket (``is_local_address``).
    """

    endpoint: str | None = None
    """The sidecar's advertised ``host:port`` or ``host:port@generation`` (wins over the host)."""
    host_names: frozenset[str] = frozenset()
    """This host's names and addresses, normalised (lower case, one spelling per IP address)."""
    local_address: Callable[[str], bool] = is_local_address

    @classmethod
    def at(cls, endpoint: str) -> SidecarLocator:
        """The silo advertised at ``endpoint`` (``host:port`` or ``host:port@generation``)."""
        if not endpoint.strip():
            raise ValueError("a sidecar endpoint must be the silo's advertised host:port, got an empty string")
        return cls(endpoint=endpoint.strip())

    @classmethod
    def on_host(cls, names: Iterable[str], local_address: Callable[[str], bool] = is_local_address) -> SidecarLocator:
        """The silo on the host known by ``names`` (host names, addresses), or on an address of this host."""
        return cls(host_names=frozenset(_normal(name) for name in names if name.strip()), local_address=local_address)

    def describe(self) -> str:
        if self.endpoint is not None:
            return f"the silo advertised at {self.endpoint}"
        names = ", ".join(sorted(self.host_names)) or "no name"
        return f"the silo whose advertised host or {HOST_PROPERTY} is this host ({names}, or a local address)"

    def find(self, view: ClusterView) -> SiloAddress | None:
        """This worker's sidecar among the view's Active silos, or ``None`` (none, or ambiguous)."""
        if self.endpoint is not None:
            matches = [address for address in view.addresses if self.endpoint in (str(address), address.endpoint)]
            return max(matches, key=lambda address: address.generation, default=None)
        at_address = self._one_endpoint(
            [silo.address for silo in view.silos if self._names_this_host(silo.address.host)], quiet=True
        )
        if at_address is not None:
            return at_address
        return self._one_endpoint([silo.address for silo in view.silos if self._serves_this_host(silo)])

    def _serves_this_host(self, silo: SiloInfo) -> bool:
        host = silo.properties.get(HOST_PROPERTY)
        return host is not None and self._names_this_host(host)

    def _names_this_host(self, host: str) -> bool:
        name = _normal(host)
        if any(_same_host(name, mine) for mine in self.host_names):
            return True
        return _is_ip(name) and self.local_address(name)

    def _one_endpoint(self, matches: list[SiloAddress], quiet: bool = False) -> SiloAddress | None:
        endpoints = {address.endpoint for address in matches}
        if len(endpoints) > 1:
            if quiet:
                return None
            log.info(
                "%d silos match %s (%s); using none as the sidecar: set SILO_SIDECAR_ADDRESS to pick one",
                len(endpoints),
                self.describe(),
                ", ".join(sorted(endpoints)),
            )
            return None
        return max(matches, key=lambda address: address.generation, default=None)
