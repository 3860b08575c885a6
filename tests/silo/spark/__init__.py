"""Spark tests: silos routed to from real Spark jobs."""

from testbed.spark_lab import UNDER_SPARK_LOAD

__all__ = ["UNDER_SPARK_LOAD"]
