"""The public view of a cluster that clients and Spark use, and how it changes.

This is deliberately separate from the runtime's internal table snapshot: the snapshot keeps
every row, etag and vote the protocol needs, while a ``ClusterView`` keeps only what a user
routes work by: the Active silos in join order, their properties and a leader.

Versions flow one way. ``ViewTracker`` takes candidate views in any order (several gateways,
a periodic table read, a reconnect) and turns them into ``ViewUpdate``s for strictly newer
versions only, so a consumer never sees an older view after a newer one.

**The leader** is the oldest Active silo: the first by join time (generation, then address).
That choice is naturally stable. A silo's generation is its start time, so a silo that joins
while the leader is Active started later and sorts after it: joins never displace the leader,
only its leaving the Active set does. The one exception is a silo with an *earlier* generation
that becomes Active late (a very slow join, or clocks skewed between hosts); ``ViewTracker``
pins the current leader in that case, so within one stream of updates the leader changes only
when it leaves. A fresh observer (no history) names the oldest Active silo, which agrees with a
pinned leader except in that rare case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from membership_tables import MembershipEntry, MembershipTableData, SiloAddress, SiloStatus
from silo.events import EventKind, MembershipEvent

__all__ = ["ClusterView", "SiloInfo", "ViewDiff", "ViewTracker", "ViewUpdate", "diff"]


@dataclass(frozen=True)
class SiloInfo:
    """What a client knows about one Active silo."""

    address: SiloAddress
    name: str
    status: SiloStatus
    proxy_port: int
    """Gateway (client) port on ``address.host``; 0 means the silo is not a gateway."""
    properties: Mapping[str, str] = field(hash=False)
    """Metadata the silo advertises (endpoints, roles, ...); read-only."""
    start_time: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def __reduce__(self) -> tuple[type[SiloInfo], tuple[object, ...]]:
        # A read-only mapping proxy cannot be pickled; Spark broadcasts views, so pickle a dict.
        fields = (self.address, self.name, self.status, self.proxy_port, dict(self.properties), self.start_time)
        return SiloInfo, fields

    @classmethod
    def from_entry(cls, entry: MembershipEntry) -> SiloInfo:
        return cls(
            address=entry.silo_address,
            name=entry.silo_name,
            status=entry.status,
            proxy_port=entry.proxy_port,
            properties=entry.properties,
            start_time=entry.start_time,
        )

    @property
    def join_order(self) -> tuple[int, SiloAddress]:
        """Sort key: older generation first, then the address as a deterministic tie-break."""
        return self.address.generation, self.address

    @property
    def gateway(self) -> str | None:
        """``host:proxy_port`` for gRPC clients, or ``None`` if the silo is not a gateway."""
        if not self.proxy_port:
            return None
        host = f"[{self.address.host}]" if ":" in self.address.host else self.address.host
        return f"{host}:{self.proxy_port}"


@dataclass(frozen=True)
class ClusterView:
    """One version of the cluster as clients see it: the Active silos, oldest first.

    ``leader`` is the oldest Active silo (``None`` when no silo is Active); see the module
    docstring for why it is stable and how ``ViewTracker`` keeps it so.
    """

    cluster_id: str
    version: int
    silos: tuple[SiloInfo, ...]
    leader: SiloAddress | None = None
    events: tuple[MembershipEvent, ...] = field(default=(), compare=False, repr=False)
    leader_epoch: int = field(default=0, compare=False)
    """The view version from which this leader has led, as the observer saw it (its first view
    of it): an epoch to fence a stale leader with. Every observer gives a leader an epoch below
    the version that replaced it, and the next leader one at or above it, so a system that
    refuses orders under a smaller epoch than it has seen never obeys a replaced leader."""
    """What the source saw change since the view it delivered before this one (``silo.events``):
    every silo, not only the Active ones. Empty in a source's first view and after a gateway
    failover (the new gateway's stream starts without history)."""

    def __post_init__(self) -> None:
        silos = tuple(sorted(self.silos, key=lambda silo: silo.join_order))
        object.__setattr__(self, "silos", silos)
        if len({silo.address for silo in silos}) != len(silos):
            raise ValueError(f"cluster view {self.version} lists a silo twice; each address must appear once")
        if self.leader is None and silos:
            object.__setattr__(self, "leader", silos[0].address)
        elif self.leader is not None and self.get(self.leader) is None:
            raise ValueError(f"leader {self.leader} is not an Active silo of view {self.version}")
        if self.leader is not None and not self.leader_epoch:
            object.__setattr__(self, "leader_epoch", self.version)

    @classmethod
    def from_table_data(
        cls, cluster_id: str, data: MembershipTableData, events: tuple[MembershipEvent, ...] = ()
    ) -> ClusterView:
        """The view of one table read: its version and its Active rows (and the events that led to it)."""
        active = tuple(SiloInfo.from_entry(entry) for entry in data.entries if entry.status is SiloStatus.ACTIVE)
        return cls(cluster_id=cluster_id, version=data.version.version, silos=active, events=events)

    def get(self, address: SiloAddress) -> SiloInfo | None:
        """The Active silo at ``address``, or ``None`` if it is not Active in this view."""
        for silo in self.silos:
            if silo.address == address:
                return silo
        return None

    @property
    def addresses(self) -> tuple[SiloAddress, ...]:
        """The Active silos' addresses, oldest first."""
        return tuple(silo.address for silo in self.silos)

    def __contains__(self, address: object) -> bool:
        return isinstance(address, SiloAddress) and self.get(address) is not None

    def __len__(self) -> int:
        return len(self.silos)


@dataclass(frozen=True)
class ViewDiff:
    """How the Active set changed from one view to the next.

    ``died`` holds silos that left the Active set for any reason (declared Dead, shutting down,
    or their row removed), with their last known info. ``properties_changed`` holds the new
    info of silos Active in both views whose properties differ.
    """

    joined: tuple[SiloInfo, ...] = ()
    died: tuple[SiloInfo, ...] = ()
    properties_changed: tuple[SiloInfo, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when the version moved but no silo joined, died or changed its properties."""
        return not (self.joined or self.died or self.properties_changed)


def diff(old: ClusterView | None, new: ClusterView) -> ViewDiff:
    """What changed from ``old`` to ``new``; with no ``old`` every Active silo has joined."""
    if old is None:
        return ViewDiff(joined=new.silos)
    joined = tuple(silo for silo in new.silos if silo.address not in old)
    died = tuple(silo for silo in old.silos if silo.address not in new)
    changed = tuple(
        silo
        for silo in new.silos
        if (before := old.get(silo.address)) is not None and dict(before.properties) != dict(silo.properties)
    )
    return ViewDiff(joined=joined, died=died, properties_changed=changed)


@dataclass(frozen=True)
class ViewUpdate:
    """A newer view and what changed since the previous one delivered."""

    view: ClusterView
    diff: ViewDiff

    @property
    def events(self) -> tuple[MembershipEvent, ...]:
        """Every change the source saw since its previous view (``ClusterView.events``): joins,
        suspicions with their voter, deaths with their voters, leaves, property changes."""
        return self.view.events

    @property
    def changing(self) -> tuple[SiloAddress, ...]:
        """Active silos of this view that were just suspected (a vote against them appeared): the
        view is about to change (Sling's TOPOLOGY_CHANGING). A listener that pauses work for their
        keys here resumes it on the update that declares them Dead, or that clears the votes."""
        suspected = (event.silo for event in self.view.events if event.kind is EventKind.SUSPECTED)
        return tuple(dict.fromkeys(silo for silo in suspected if silo in self.view))


class ViewTracker:
    """Orders candidate views into a stream of updates for strictly newer versions.

    Pure state, no I/O: the client feeds it whatever it reads (from any gateway or the
    table, in any order) and forwards the updates it returns. Every newer version yields
    an update, even one whose diff is empty (e.g. a suspicion vote bumped the version).
    """

    def __init__(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id
        self._current: ClusterView | None = None

    @property
    def current(self) -> ClusterView | None:
        """The newest view delivered so far, with its pinned leader."""
        return self._current

    def offer(self, candidate: ClusterView) -> ViewUpdate | None:
        """The update for ``candidate`` if it is newer than the current view, else ``None``."""
        if candidate.cluster_id != self._cluster_id:
            raise ValueError(
                f"view of cluster {candidate.cluster_id!r} offered to the tracker of {self._cluster_id!r}; "
                "use one tracker per cluster"
            )
        old = self._current
        if old is not None and candidate.version <= old.version:
            return None
        view = candidate
        if old is not None and old.leader is not None and old.leader in candidate:
            view = dataclasses.replace(candidate, leader=old.leader, leader_epoch=old.leader_epoch)
        self._current = view
        return ViewUpdate(view=view, diff=diff(old, view))
