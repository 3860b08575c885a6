"""Benchmarks of the membership service: ``python -m benchmarks.NAME [--quick]`` (see docs/benchmarks.md)."""
