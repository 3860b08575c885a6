"""Keyed work: handlers a silo serves, the client that calls them, routing with failover.

``registry`` (``HandlerRegistry``, ``--handler NAME=module:function``), ``handlers`` (the
built-in ones), ``client`` (``WorkClient``/``SyncWorkClient`` over gRPC), ``hashring`` (the
consistent-hash ring over live silos) and ``routing`` (``Router``: batches, failover to the
next owner when a silo dies).

May import: ``membership_tables``, ``silo.client`` (views), ``silo.wire``, ``silo.errors``.
Never ``silo.membership``, ``silo.runtime`` or ``silo.cli``.
"""

from silo.work.registry import HandlerRegistry, HandlerSpecError, load_handler, split_handler_spec

__all__ = ["HandlerRegistry", "HandlerSpecError", "load_handler", "split_handler_spec"]
