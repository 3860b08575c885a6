"""A silo's answer to "are these keys mine to serve now?", frozen for one request.

``silo.runtime.ownership.OwnershipGuard`` keeps the serving ring from the silo's views (and why
keys are held back); the server takes an ``OwnershipCheck`` from it per ``Work.Process`` call
and runs ``admit`` on the batch's keys in the worker thread, before the handler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from membership_tables import SiloAddress
from silo.errors import SiloError
from silo.work.hashring import HashRing

__all__ = ["NotOwnedError", "OwnershipCheck"]


class NotOwnedError(SiloError):
    """Some keys of a request are not this silo's to serve now (the message says why and what to do)."""


@dataclass(frozen=True)
class OwnershipCheck:
    """One moment's serving ring: ``refusal(keys)`` says whether all of ``keys`` are ours then."""

    address: SiloAddress
    ring: HashRing
    index: int
    version: int
    token: int
    own_hold: float
    """Seconds until our own join's takeover wait ends (0: over)."""
    held: Mapping[SiloAddress, float]
    """Ghosts: Dead silos still holding their keys, with the seconds left."""
    draining: frozenset[SiloAddress] = frozenset()
    """Silos finishing their calls in flight before they write themselves Dead: they hold their keys until then."""

    def refusal(self, keys: Sequence[str] | Sequence[bytes]) -> str | None:
        """Why we must not serve some of ``keys`` (None: we own them all)."""
        if self.index < 0:
            return f"silo {self.address} owns no keys at view version {self.version} (it is not Active there)"
        if self.own_hold > 0:
            return (
                f"silo {self.address} joined at view version {self.version} and takes over its keys in "
                f"{self.own_hold:.2f}s, once their previous owners have certainly stopped; retry then"
            )
        if not len(keys):
            return None
        owners = self.ring.owner_indices(keys)
        foreign = owners != self.index
        if not np.any(foreign):
            return None
        count = int(np.count_nonzero(foreign))
        held = {self.ring.addresses[int(index)] for index in np.unique(owners[foreign])} & set(self.held)
        if held:
            waits = ", ".join(f"{silo} for {self.held[silo]:.2f}s" for silo in sorted(held))
            return (
                f"{count} of {len(keys)} keys belong to silos declared Dead that may still be serving until their "
                f"membership lease runs out ({waits}); silo {self.address} takes them over then; retry"
            )
        draining = {self.ring.addresses[int(index)] for index in np.unique(owners[foreign])} & self.draining
        if draining:
            return (
                f"{count} of {len(keys)} keys belong to draining silos finishing their calls in flight "
                f"({', '.join(map(str, sorted(draining)))}); silo {self.address} takes them over once they are "
                "Dead; retry"
            )
        return (
            f"{count} of {len(keys)} keys are not owned by silo {self.address} at view version {self.version}; "
            "refresh the view and route them to their owners"
        )

    def admit(self, keys: Sequence[str] | Sequence[bytes]) -> None:
        """Raise ``NotOwnedError`` unless all of ``keys`` are ours."""
        refusal = self.refusal(keys)
        if refusal is not None:
            raise NotOwnedError(refusal)
