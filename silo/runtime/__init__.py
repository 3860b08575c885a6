"""The runtime: one silo assembled from the protocol roles, the wire and a table.

``Silo`` (``runtime.silo``) composes the membership roles around an injected prober and
gossip sender; ``assemble``/``run_process`` (``runtime.process``) add the gRPC server and
prober and run a silo as an operating-system process (what ``silo run`` does).

May import: ``membership_tables``, ``silo.membership``, ``silo.wire``, ``silo.work``,
``silo.observability`` (events; metrics only when asked for), ``silo.errors``, ``silo.exit_codes``.
Never ``silo.client``, ``silo.spark`` or ``silo.cli``.
"""

from silo.runtime.process import SiloProcessConfig, SiloStack, assemble, run_process
from silo.runtime.silo import Silo

__all__ = ["Silo", "SiloProcessConfig", "SiloStack", "assemble", "run_process"]
