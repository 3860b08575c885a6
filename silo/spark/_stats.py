"""The Spark accumulator parameter that adds up ``RoutingStats`` (imports pyspark: load it lazily)."""

from __future__ import annotations

from pyspark.accumulators import AccumulatorParam

from silo.work.columnar_routing import RoutingStats


class RoutingStatsParam(AccumulatorParam[RoutingStats]):
    """``RoutingStats`` of many tasks, added field by field."""

    def zero(self, value: RoutingStats) -> RoutingStats:
        return RoutingStats()

    def addInPlace(self, first: RoutingStats, second: RoutingStats) -> RoutingStats:  # noqa: N802  # pyspark's name
        return first.add(second)
