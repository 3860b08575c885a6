"""``route_stream`` on a real Structured Streaming query (a JSON file source, a checkpoint in tmp)
with real ``silo run`` processes: silos killed between and during micro-batches.

Each input file is one micro-batch (``maxFilesPerTrigger=1``). The sink keeps every routed
micro-batch by ``batch_id``; at the end, their union must be exactly the input: every key
once, with the checksum of its own record.

The kill during a micro-batch comes from the job itself: the silos serve a checksum handler
that SIGKILLs the victim when it meets a chosen key half-way through the micro-batch's file (a key
another silo owns), after the router has sent the victim earlier rows of the same micro-batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from membership_tables import SiloStatus
from silo.spark import encode_payload, local_session, read_view, route_stream
from silo.work.handlers import CHECKSUM_HANDLER, checksum
from silo.work.hashring import HashRing
from testbed.cluster_harness import Cluster
from tests.silo.work_handlers import KILL_ORDER_ENV

pytestmark = pytest.mark.slow

CLUSTER = "spark-streaming"
HANDLER = "checksum_or_kill"
PER_FILE = 1000
KILL_AT = PER_FILE // 2
"""The victim dies when the first record from this position on that another silo owns is processed."""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "100", "spark.sql.streaming.schemaInference": "false"}
    with local_session("silo-spark-streaming-tests", cores=2, conf=conf) as session:
        yield session


def write_file(directory: Path, index: int) -> list[int]:
    """File ``index`` of the stream: ``PER_FILE`` records ``(k<n>, n)``, written whole at once."""
    numbers = list(range(index * PER_FILE, (index + 1) * PER_FILE))
    staging = directory.parent / f".{index}.json"
    staging.write_text("".join(json.dumps({"key": f"k{n}", "value": n}) + "\n" for n in numbers))
    staging.rename(directory / f"part-{index:03}.json")  # the file source sees it whole
    return numbers


def test_a_stream_routes_each_micro_batch_with_the_newest_view_and_loses_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    silos = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    inbox = tmp_path / "in"
    inbox.mkdir()
    batches: dict[int, list[Any]] = {}
    views: dict[int, Any] = {}
    kill_order = tmp_path / "kill-order"
    monkeypatch.setenv(KILL_ORDER_ENV, str(kill_order))  # the silos inherit it

    def sink(routed: Any, batch_id: int) -> None:
        batches[batch_id] = routed.collect()  # by batch_id: a re-run batch replaces itself
        views[batch_id] = read_view(silos.table_uri, CLUSTER)

    try:
        processes = silos.start_active(5, "--handler", f"{HANDLER}=tests.silo.work_handlers:checksum_or_kill")
        first_view = read_view(silos.table_uri, CLUSTER)
        stream = spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", 1).json(str(inbox))
        query = (
            route_stream(stream, "key", HANDLER, sink, table=silos.table_uri, cluster=CLUSTER,
                         batch_size=50, in_flight=2)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )  # fmt: skip
        try:
            sent = write_file(inbox, 0)
            query.processAllAvailable()

            # Between micro-batches, declared Dead before the next one: the next view leaves it out.
            processes[0].kill()
            silos.wait_statuses([processes[0]], SiloStatus.DEAD, 60)
            sent += write_file(inbox, 1)
            query.processAllAvailable()

            # Between micro-batches, straight into the next one: the executors fail it over.
            processes[1].kill()
            sent += write_file(inbox, 2)
            query.processAllAvailable()

            # During a micro-batch.
            victim = processes[2].address
            live = [address for address in read_view(silos.table_uri, CLUSTER).addresses if address != victim]
            ring = HashRing([*live, victim])
            trigger = next(f"k{3 * PER_FILE + n}" for n in range(KILL_AT, PER_FILE)
                           if ring.owner(f"k{3 * PER_FILE + n}") != victim)  # fmt: skip
            kill_order.write_text(f"{trigger} {processes[2].pid}")
            sent += write_file(inbox, 3)
            query.processAllAvailable()
            assert not processes[2].running, "the handler killed the third silo during batch 3"

            sent += write_file(inbox, 4)
            query.processAllAvailable()
        finally:
            query.stop()
    finally:
        silos.close()

    rows = [row for batch_id in sorted(batches) for row in batches[batch_id]]
    keys = [row["key"] for row in rows]
    assert len(keys) == len(set(keys)) == len(sent), "every record exactly once in the output"
    assert {row["key"]: bytes(row["result"]) for row in rows} == {
        f"k{n}": checksum(f"k{n}", encode_payload([n])) for n in sent
    }
    assert sorted(batches) == [0, 1, 2, 3, 4]

    dead_before_batch_1 = str(processes[0].address)
    assert first_view.addresses != views[1].addresses
    batch_1 = batches[1]
    assert {row["silo"] for row in batch_1} == {str(address) for address in views[1].addresses}
    assert dead_before_batch_1 not in {row["silo"] for row in batch_1}
    assert not any(row["rerouted"] for row in batch_1), "batch 1 started from the view without the dead silo"

    for batch_id in (2, 3, 4):
        assert str(processes[1].address) not in {row["silo"] for row in batches[batch_id]}

    killed_during = str(processes[2].address)
    batch_3 = batches[3]
    assert killed_during in {row["silo"] for row in batch_3}, "the victim served rows of batch 3 before it died"
    moved = [row for row in batch_3 if row["rerouted"]]
    assert moved, "the victim's remaining keys of batch 3 went to their next owners"
    live_ring = HashRing([address for address in views[2].addresses if str(address) != str(processes[1].address)])
    for row in moved:
        owners = live_ring.owners(row["key"], 2)
        assert str(owners[0]) in (killed_during, str(processes[1].address)), row
    assert killed_during not in {row["silo"] for row in batches[4]}


def ignore(routed: Any, batch_id: int) -> None:
    """A sink for tests that never start their query."""


def test_route_stream_refuses_a_batch_dataframe_and_bad_arguments(spark: Any) -> None:
    frame = spark.createDataFrame([("a", 1)], "key string, value long")
    with pytest.raises(ValueError, match=r"route_stream takes a streaming DataFrame"):
        route_stream(frame, "key", CHECKSUM_HANDLER, ignore, table="sqlite://", cluster=CLUSTER)
    stream = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS key", "value")
    with pytest.raises(ValueError, match=r"no column 'nope'"):
        route_stream(stream, "nope", CHECKSUM_HANDLER, ignore, table="sqlite://", cluster=CLUSTER)
    with pytest.raises(ValueError, match=r"sink must be a function"):
        route_stream(stream, "key", CHECKSUM_HANDLER, None, table="sqlite://", cluster=CLUSTER)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"give the membership table"):
        route_stream(stream, "key", CHECKSUM_HANDLER, ignore, cluster=CLUSTER)
