"""Tests of the Spark standalone starter in testbed.services."""
