"""The rows the store benchmarks write: one Active silo per index, each at an address of its own."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from membership_tables import MembershipEntry, SiloAddress, SiloStatus

GENERATION_BASE = 1_767_225_600_000
"""Silo ``index`` has generation ``GENERATION_BASE + index`` (2026-01-01 in milliseconds, plus the index)."""


def make_entry(
    index: int, *, network: str, host_prefix: str, properties: Mapping[str, str] | None = None
) -> MembershipEntry:
    """Silo ``index``'s row, Active and alive now: host ``<network>.<index // 250>.<index % 250 + 1>``
    (250 silos per /24), port 11111, named ``silo-<index>`` on host ``<host_prefix>-<index>``."""
    now = datetime.now(UTC)
    return MembershipEntry(
        SiloAddress(f"{network}.{index // 250}.{index % 250 + 1}", 11111, GENERATION_BASE + index),
        SiloStatus.ACTIVE,
        host_name=f"{host_prefix}-{index}",
        silo_name=f"silo-{index}",
        proxy_port=30000,
        start_time=now,
        i_am_alive_time=now,
        properties=dict(properties or {}),
    )
