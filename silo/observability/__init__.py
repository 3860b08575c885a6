"""Observability of a silo: Prometheus metrics and membership events for operators.

``catalogue`` lists every metric (name, type, labels, meaning): the one list that the code,
``docs/operations.md`` and the tests agree on. ``prometheus`` implements the protocol's
``MembershipObserver`` seam with ``prometheus_client`` on a registry of its own per silo (several
silos may share a process), wraps the table and the gossip sender to time and count their
calls, and serves ``/metrics`` on an opt-in port. ``event_log`` writes membership events
(``silo.events``) as log lines.

May import: ``membership_tables``, ``silo.membership`` (the seams and outcome enums),
``silo.events``, ``silo.errors`` and ``prometheus_client`` (the ``metrics`` extra, imported only
by ``prometheus``). Never gRPC, ``silo.wire``, ``silo.runtime``, ``silo.client`` or ``silo.cli``;
the runtime wires it in.
"""

from silo.observability.catalogue import METRICS, MetricKind, MetricSpec

__all__ = ["METRICS", "MetricKind", "MetricSpec"]
