"""``WrappedTable``: the base of a handle that wraps another one (``history.RecordingTable``,
``read_only.ReadOnlyMembershipTable``): same cluster and limits, reads and ``close`` passed on."""

from __future__ import annotations

from collections.abc import Sequence

from membership_tables.contract import MembershipTable
from membership_tables.model import MembershipTableData, SiloAddress, TableVersion


class WrappedTable(MembershipTable):
    """Passes the reads and ``close`` to ``inner``; a subclass decides what its writes do."""

    def __init__(self, inner: MembershipTable) -> None:
        super().__init__(inner.cluster_id)
        self.inner = inner
        self.max_rows_per_update = inner.max_rows_per_update
        self.reads_changes = inner.reads_changes

    def read_all(self) -> MembershipTableData:
        return self.inner.read_all()

    def read_row(self, silo_address: SiloAddress) -> MembershipTableData:
        return self.inner.read_row(silo_address)

    def read_rows(self, silos: Sequence[SiloAddress]) -> MembershipTableData:
        return self.inner.read_rows(silos)

    def read_version(self) -> TableVersion:
        return self.inner.read_version()

    def read_changes(self, since: int) -> MembershipTableData:
        return self.inner.read_changes(since)

    def close(self) -> None:
        self.inner.close()
