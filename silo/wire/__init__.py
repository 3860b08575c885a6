"""The gRPC wire: the generated protocol (``proto``), its codec, the server and the prober.

``proto/silo/v1/membership.proto`` is the contract (enum values append-only; shipped in the
wheel); ``scripts/generate_protos.py`` regenerates ``silo.wire.proto`` beside it. ``rpc`` the
plumbing every service shares (decoding, refusing, aborting); ``codec`` converts between
messages and ``membership_tables`` rows; ``server`` serves Membership and health, and Work
through its ``ServedPart`` seam; ``prober`` implements ``silo.membership.probing``'s seams over
gRPC (its probes and gossip go over one ``PingStream`` / ``GossipStream`` per peer,
``call_streams``). ``channels`` holds the channel options and message size limits; ``tls`` the
mutual-TLS settings, server credentials and caller channels (``TlsSettings``, ``ChannelPool``);
``peer_identity`` who a certificate names and which RPCs each role may call; ``admission`` the
checks a silo makes before it writes its row (no mixed transports, a certificate the cluster
accepts).

May import: ``membership_tables``, ``silo.membership`` (the seams and snapshots it serves),
``silo.events`` (the events a watch stream carries), ``silo.errors``. Never ``silo.work`` (the
Work service, ``silo.work.service``, plugs into the server's ``ServedPart`` seam and imports the
wire), ``silo.runtime``, ``silo.client`` or ``silo.cli``.
"""

from silo.wire.tls import TlsConfigError, TlsSettings

__all__ = ["TlsConfigError", "TlsSettings"]
