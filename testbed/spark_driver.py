"""The driver side of a ``SparkLab`` job: a process of its own on the lab's driver host.

``SparkLab.start_driver("testbed.spark_driver", spec)`` runs ``python -m testbed.spark_driver SPEC OUT``
inside the driver's network namespace, since the test's process cannot reach the lab. SPEC is
JSON: the lab's part (``conf``, ``driver_host``, ``table``, ``cluster``, ``signals``) and the
job's (``records``, ``partitions``, ``batch_size``, ``timeout``, ``pause``, ``pace``, ``handler``,
``summary``, ``discover``).

The job routes ``records`` keys ``k<i>`` with ``silo.spark.route_to_silos`` and the built-in
``example.echo`` handler (or ``handler``, which must echo too), the task feeding them ``pace``
seconds apart if given (a steady stream of batches). Each input row is tagged, in the task that routes it, with its
executor's ``SILO_SIDECAR_ADDRESS``; echo sends the tag back, so every output row says which
executor (which host) routed it and which silo processed it. OUT gets every output row
``[key, tag, silo, rerouted, via_sidecar]``, the job's seconds and, with ``summary``,
``routing_summary`` of the collected output.

**Discovery** (``discover: true``): the executors get ``SILO_SIDECAR_ADDRESS`` empty
(``spark.executorEnv``, over the worker's), so each finds its sidecar itself
(``silo.spark.sidecar``: the silo advertised at one of its host's addresses), and each row is
tagged with its executor's own address on the lab network instead.

**Pausing mid-job** (``pause: [partition, position]``): the task feeding that partition, at that
position, writes the marker ``paused`` (its executor's sidecar) into ``signals`` and waits for the
marker ``go``. The test injects its fault in between, so the fault lands while tasks still route,
whatever the machine's speed. A re-run of the task (its executor was lost) finds ``go`` and does
not wait. ``signals`` is on the filesystem every namespace shares, which no lab fault cuts.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from silo.spark import SIDECAR_ENV, route_to_silos, routing_summary
from silo.spark.jobs import driver_environment
from silo.work.handlers import ECHO_HANDLER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PAUSE_LIMIT = 300.0
"""Seconds a paused task waits for ``go`` before it goes on anyway (the test died)."""


@contextlib.contextmanager
def driver_session(spec: dict[str, Any]) -> Iterator[SparkSession]:
    """The SparkSession of ``spec["conf"]``, its JVM bound to the driver host's address; stopped on exit."""
    from pyspark.sql import SparkSession

    with driver_environment(spec["driver_host"]):
        session = SparkSession.builder.config(map=spec["conf"]).getOrCreate()
        try:
            yield session
        finally:
            session.stop()


def mark(spec: dict[str, Any], name: str, text: str = "") -> None:
    """Leave the marker ``name`` for the test (written whole, then renamed into place)."""
    signals = Path(spec["signals"])
    scratch = signals / f".{name}.{os.getpid()}"
    scratch.write_text(text)
    scratch.rename(signals / name)


def tagged_records(spark: SparkSession, spec: dict[str, Any]) -> DataFrame:
    """``records`` rows ``(k<i>, executor's sidecar)`` in ``partitions`` partitions, pausing as ``spec`` says."""
    pause = tuple(spec["pause"]) if spec.get("pause") else None
    pace = float(spec.get("pace", 0.0))
    signals = Path(spec["signals"])

    discover, driver_host = bool(spec.get("discover")), spec["driver_host"]

    def feed(index: int, numbers: Iterable[int]) -> Iterator[tuple[str, str]]:
        local = lab_address(driver_host) if discover else os.environ.get(SIDECAR_ENV, "")
        for position, number in enumerate(numbers):
            if pause == (index, position) and not (signals / "go").exists():
                mark(spec, "paused", local)
                deadline = time.monotonic() + PAUSE_LIMIT
                while not (signals / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            if pace:
                time.sleep(pace)
            yield f"k{number}", local

    rows = spark.sparkContext.parallelize(range(spec["records"]), spec["partitions"]).mapPartitionsWithIndex(feed)
    return spark.createDataFrame(rows, "key string, executor_sidecar string")


def lab_address(peer: str) -> str:
    """This host's address on the lab network: the source address of a datagram socket aimed at
    ``peer`` (nothing is sent), found without the sidecar discovery under test."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((peer, 9))
        address: str = probe.getsockname()[0]
    return address


def run(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("discover"):
        spec = {**spec, "conf": {**spec["conf"], f"spark.executorEnv.{SIDECAR_ENV}": ""}}
    with driver_session(spec) as spark:
        mark(spec, "started")
        started = time.perf_counter()
        routed = route_to_silos(
            tagged_records(spark, spec),
            "key",
            spec.get("handler", ECHO_HANDLER),
            table=spec["table"],
            cluster=spec["cluster"],
            batch_size=spec.get("batch_size", 100),
            timeout=spec.get("timeout", 5.0),
        )
        rows = routed.collect()
        seconds = time.perf_counter() - started
        # The summary adds up the very rows collected: routing ``routed`` again (or reading a cache
        # that lost a block) could run a partition on another executor, with other sidecar counts.
        summary = routing_summary(spark.createDataFrame(rows, routed.schema)) if spec.get("summary") else None
    return {
        "seconds": seconds,
        "rows": [
            [row["key"], json.loads(row["result"])[0], row["silo"], row["rerouted"], row["via_sidecar"]] for row in rows
        ],
        "summary": None
        if summary is None
        else {
            "records": summary.records,
            "via_sidecar": summary.via_sidecar,
            "stayed_on_host_fraction": summary.stayed_on_host_fraction,
            "rerouted": summary.rerouted,
            "per_silo": dict(summary.per_silo),
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m testbed.spark_driver SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(run(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
