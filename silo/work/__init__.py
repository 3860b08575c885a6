"""Keyed work: handlers a silo serves, the client that calls them, routing with failover.

``registry`` (``HandlerRegistry``, ``--handler NAME=module:function``), ``handlers`` (the
built-in ones, item and ``@columnar`` signatures), ``columns`` (Arrow batches on the wire and
their items), ``execution`` (a handler run on one request, either form), ``service`` (the
serving half: the ``Work`` gRPC service a silo's server runs through its seam), ``client``
(``WorkClient``/``SyncWorkClient`` over gRPC, columnar calls in flight), ``hashring`` (the
consistent-hash ring over live silos), ``routing`` (``Router``: batches, failover to the next
owner when a silo dies; what it moves: ``shards``) and ``columnar_routing`` (the router with Arrow batches, pipelined).

May import: ``membership_tables``, ``silo.client`` (views), ``silo.wire``, ``silo.errors``;
numpy, and pyarrow only lazily (the ``spark`` extra), so a silo without it serves item batches.
Never ``silo.membership``, ``silo.runtime`` or ``silo.cli``.
"""

from silo.work.registry import HandlerRegistry, HandlerSpecError, load_handler, split_handler_spec
from silo.work.service import WorkService

__all__ = ["HandlerRegistry", "HandlerSpecError", "WorkService", "load_handler", "split_handler_spec"]
