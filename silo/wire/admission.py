"""Before a silo writes its row: make sure the cluster will accept it, so a refused silo changes nothing.

Two checks, both before the join writes anything to the table:

- **Transport**: a TLS silo advertises ``transport=tls`` in its row (property
  ``TRANSPORT_PROPERTY``); a row without it is plaintext (plaintext rows stay as they were before
  TLS existed). A silo whose transport differs from an Active silo's refuses to join: the two
  could never talk.
- **Certificate** (TLS only): Ping every Active silo. If none answers and one refused us for
  security reasons (our certificate's cluster or role, its CA, its validity), joining would fail
  the same way: refuse now. If they are merely unreachable, join as usual (the join's own
  connectivity check and the protocol deal with silos that are gone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import grpc

from membership_tables import MembershipEntry, SiloStatus
from silo.errors import OptionsError
from silo.wire.prober import GrpcProber, is_security_refusal

TRANSPORT_PROPERTY = "transport"
TLS = "tls"
PLAINTEXT = "plaintext"


class AdmissionRefusedError(OptionsError):
    """The cluster would not accept this silo (transport or certificate); nothing was written."""


def transport_of(tls: bool) -> str:
    return TLS if tls else PLAINTEXT


def advertised_properties(properties: Mapping[str, str], *, tls: bool) -> dict[str, str]:
    """The properties a silo's row carries: the given ones, plus ``transport=tls`` under TLS."""
    return {**properties, TRANSPORT_PROPERTY: TLS} if tls else dict(properties)


def transport_mismatch(entries: Iterable[MembershipEntry], tls: bool) -> str | None:
    """Why joining would mix transports with an Active silo, or None."""
    mine = transport_of(tls)
    for entry in entries:
        theirs = entry.properties.get(TRANSPORT_PROPERTY, PLAINTEXT)
        if entry.status is SiloStatus.ACTIVE and theirs != mine:
            fix = (
                "start this silo with --tls-cert, --tls-key and --tls-ca"
                if theirs == TLS
                else "run the whole cluster with TLS, or this silo without it"
            )
            return (
                f"the cluster runs over {theirs} (silo {entry.silo_address} advertises {TRANSPORT_PROPERTY}={theirs}) "
                f"but this silo uses {mine}; silos never mix transports: {fix}"
            )
    return None


async def check_admission(prober: GrpcProber, entries: Iterable[MembershipEntry], *, tls: bool, timeout: float) -> None:
    """Raise ``AdmissionRefusedError`` if the cluster in ``entries`` would refuse this silo."""
    entries = list(entries)
    mismatch = transport_mismatch(entries, tls)
    if mismatch is not None:
        raise AdmissionRefusedError(mismatch)
    peers = [entry.silo_address for entry in entries if entry.status is SiloStatus.ACTIVE]
    if not tls or not peers:
        return
    outcomes = await asyncio.gather(*(prober.ping_call(peer, timeout) for peer in peers), return_exceptions=True)
    refusals: list[str] = []
    for peer, outcome in zip(peers, outcomes, strict=True):
        if not isinstance(outcome, BaseException):
            return  # one silo of the cluster accepts us: the join can proceed
        if isinstance(outcome, grpc.aio.AioRpcError) and is_security_refusal(outcome):
            refusals.append(f"{peer}: {outcome.code().name} {outcome.details()}")
    if refusals:
        raise AdmissionRefusedError(
            "the cluster refuses this silo's TLS identity (" + "; ".join(refusals[:3]) + "); check that --tls-cert "
            "was issued for this --cluster with --role silo, by the CA the cluster trusts (--tls-ca), and is valid now"
        )
