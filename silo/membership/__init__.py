"""The membership protocol: the roles of one silo and the pure rules they apply.

Roles (one module each): ``table_manager`` (the only writer of the table, put together from
``table_view``, ``row_writer``, ``vote_caster``, ``gossip_catch_up``, ``table_refresh`` and
``lease_keeper``), ``cluster_health`` (whom to probe: ``targets``; the majority rule:
``majority``), ``silo_health`` (probing one silo), ``gossiper``, ``agent`` (join, IAmAlive,
leave), ``cleanup``, ``local_health`` (Lifeguard). Rules as pure functions: ``votes``, ``ring``,
``snapshot``. Configuration and time: ``options``, ``clock``. ``probing`` declares the seams
(``Prober``, ``GossipSender``) that ``silo.wire`` implements.

May import: ``membership_tables`` (the contract and model, never a backend module),
``silo.errors``, ``silo.exit_codes``. Never gRPC, ``silo.wire``, ``silo.client``, ``silo.work``,
``silo.runtime`` or ``silo.cli``: the rules stay testable with a fake clock and fake probes.
"""

from silo.membership.history_check import assert_history_ok, check_history
from silo.membership.options import PRESETS, SiloOptions, parse_duration
from silo.membership.snapshot import MembershipSnapshot
from silo.membership.votes import VoteOutcome

__all__ = [
    "PRESETS",
    "MembershipSnapshot",
    "SiloOptions",
    "VoteOutcome",
    "assert_history_ok",
    "check_history",
    "parse_duration",
]
