"""``silo dashboard``: a read-only web page of one cluster for admins.

``state`` turns table reads into the page's document (silos, the probe rings, suspicions,
a timeline of membership events, table latency), pure and clock-injected; ``monitor`` reads
the table on a period in a background thread and keeps that state; ``server`` serves the page
(``static/``, shipped as package data: no build step, no internet) and pushes each new state
to the browser with server-sent events. Only GET is served: nothing can be written.

May import: ``membership_tables``, ``silo.membership`` (the ring and vote rules, options),
``silo.events``, ``silo.hashing``, ``silo.errors``. Never gRPC, ``silo.wire``, ``silo.runtime``,
``silo.client`` or ``silo.cli``.
"""

from silo.dashboard.monitor import ClusterMonitor
from silo.dashboard.server import DashboardServer

__all__ = ["ClusterMonitor", "DashboardServer"]
