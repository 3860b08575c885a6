"""Tests of the network-namespace lab (testbed.netfaults)."""
