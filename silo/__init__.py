"""Silos: an Orleans-style cluster membership service.

One subpackage per part; an arrow is "may import" (``tests/test_layout.py`` keeps the rule)::

    cli ──> runtime ──> membership ──> membership_tables (contract only, never a backend)
     │         ├──────> wire ───────> membership (the seams it implements)
     │         └──────> work (its Work service plugs into the wire's server)
     └──> spark ──> work ──> client ──> wire
                      └─────────────> wire

- ``silo.membership``: the protocol roles (table manager, monitors, gossiper, agent, cleanup,
  local health) and their pure rules (votes, rings, snapshots, options, clock). No gRPC, no
  backend, no client.
- ``silo.wire``: the gRPC contract (generated ``proto``), its codec, the server and the prober.
- ``silo.client``: ``MembershipClient``: read and watch the live silos through gateways or a table.
- ``silo.work``: keyed work: handlers, the work client, consistent-hash routing with failover.
- ``silo.spark``: ``route_to_silos`` for PySpark DataFrames.
- ``silo.observability``: Prometheus metrics (the protocol's observer seam, exported) and
  membership events for operators; the runtime wires it in.
- ``silo.dashboard``: the read-only web page of a cluster (``silo dashboard``), from table reads.
- ``silo.runtime``: ``Silo`` (the roles assembled) and ``assemble``/``run_process`` (with the wire).
- ``silo.cli``: the ``silo`` command (run, status, dashboard, demo, certs); nothing imports it.

At the top: ``silo.errors`` (the exception tree), ``silo.exit_codes``, ``silo.events``
(membership events) and ``silo.hashing`` (ring positions), shared by every part.
"""

__version__ = "0.1.0"
"""The release, in one place: ``pyproject.toml`` reads it (setuptools dynamic version) into the
package metadata that ``importlib.metadata`` and ``silo --version`` report. Keep it a plain string
literal: setuptools reads it without importing ``silo``."""

__all__ = ["__version__"]
