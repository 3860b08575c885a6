"""Spark tests: silos routed to from real Spark jobs."""

UNDER_SPARK_LOAD = ("--set", "probe_timeout=2s", "--set", "probe_interval=0.5s", "--set", "death_vote_expiration=12s")
"""Detection timings for silos sharing two cores with Spark's JVM and Python workers: the local
preset suspects a silo after 1.5 s of silence, which a busy machine can cause; a live silo
declared Dead would leave the job and move its keys, which is not what these tests look at (a
test that checked every record reached its owner failed that way in a full run)."""
