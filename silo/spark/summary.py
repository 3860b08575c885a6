"""What a routed DataFrame says about its job: records per silo, rerouted, locality, a checksum.

``routing_summary(routed)`` reads the output of ``route_to_silos`` (or one micro-batch of
``route_stream``) in one columnar pass (``mapInArrow``, one small row per silo and partition)
and adds it up on the driver. Like any action it routes the records again unless ``routed``
is persisted or written out.

**Locality.** ``stayed_on_host_fraction`` is the share of records that went to the executor's
own sidecar silo (``via_sidecar``): with one sidecar per Spark worker, those records never left
their host. An executor sends a record to its sidecar when the sidecar owns the key, so with N
silos about 1/N of the records stay local.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from silo.work.handlers import combine_totals

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["RoutingSummary", "routing_summary"]

_PARTIAL_SCHEMA = "silo string, records long, checksum binary, rerouted long, via_sidecar long"


@dataclass(frozen=True)
class RoutingSummary:
    """Totals of a routed DataFrame."""

    records: int = 0
    per_silo: Mapping[str, int] = field(default_factory=dict)
    """``host:port@generation`` -> records it processed."""
    rerouted: int = 0
    """Records processed by another silo than their owner in the starting view."""
    via_sidecar: int = 0
    """Records processed by the executor's own sidecar silo (they stayed on their host)."""
    checksum: int | None = None
    """With ``checksum=True``: the ``checksum_total`` of the results (8-byte digests)."""

    @property
    def stayed_on_host_fraction(self) -> float:
        """``via_sidecar / records`` (0.0 for no records)."""
        return self.via_sidecar / self.records if self.records else 0.0


def routing_summary(routed: DataFrame, *, result_column: str = "result", checksum: bool = False) -> RoutingSummary:
    """Add up ``routed`` (the output of ``route_to_silos``) in one pass; see the module docstring.

    ``checksum=True`` also sums the results as ``silo.work.handlers.checksum_total`` does, for
    jobs whose handler returns 8-byte digests (``example.checksum``); other results raise.
    """
    missing = [column for column in (result_column, "silo", "rerouted", "via_sidecar") if column not in routed.columns]
    if missing:
        raise ValueError(
            f"no column {', '.join(map(repr, missing))}: routing_summary reads the output of route_to_silos "
            f"(columns: {routed.columns})"
        )
    rows = (
        routed.select(result_column, "silo", "rerouted", "via_sidecar")
        .mapInArrow(partial(_partials, checksum), _PARTIAL_SCHEMA)
        .collect()
    )
    per_silo: Counter[str] = Counter()
    for row in rows:
        per_silo[row["silo"]] += row["records"]
    return RoutingSummary(
        records=sum(per_silo.values()),
        per_silo=dict(sorted(per_silo.items())),
        rerouted=sum(row["rerouted"] for row in rows),
        via_sidecar=sum(row["via_sidecar"] for row in rows),
        checksum=combine_totals(int.from_bytes(row["checksum"], "big") for row in rows) if checksum else None,
    )


def _partials(checksum: bool, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One partition: a row per silo (records, checksum total as 8 bytes, rerouted, via_sidecar)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    totals: dict[str, list[int]] = {}
    for batch in batches:
        silos = batch.column(1)
        for silo in pc.unique(silos).to_pylist():
            rows = batch.filter(pc.equal(silos, silo))
            total = totals.setdefault(silo, [0, 0, 0, 0])
            total[0] += rows.num_rows
            total[1] = combine_totals([total[1], _digest_total(rows.column(0))]) if checksum else 0
            total[2] += rows.column(2).true_count
            total[3] += rows.column(3).true_count
    yield pa.RecordBatch.from_pydict(
        {
            "silo": list(totals),
            "records": [total[0] for total in totals.values()],
            "checksum": [total[1].to_bytes(8, "big") for total in totals.values()],
            "rerouted": [total[2] for total in totals.values()],
            "via_sidecar": [total[3] for total in totals.values()],
        },
        schema=pa.schema(
            [("silo", pa.string()), ("records", pa.int64()), ("checksum", pa.binary()), ("rerouted", pa.int64()),
             ("via_sidecar", pa.int64())]
        ),
    )  # fmt: skip


def _digest_total(results: Any) -> int:
    """``checksum_total`` of a binary array of 8-byte digests, vectorised (uint64 sums wrap mod 2**64)."""
    import numpy as np
    import pyarrow as pa

    if not len(results):
        return 0
    try:
        digests = results.cast(pa.binary(8))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"checksum=True needs 8-byte results (example.checksum digests): {exc}") from exc
    values = np.frombuffer(digests.buffers()[1], dtype=">u8")[digests.offset : digests.offset + len(digests)]
    return int(values.astype(np.uint64).sum(dtype=np.uint64))
