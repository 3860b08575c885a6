"""PySpark integration: send each record of a DataFrame to the silo that owns its key.

::

    from silo.spark import route_to_silos

    out = route_to_silos(df, "user_id", "example.checksum", table="sqlite:///m.db", cluster="prod")
    # out: user_id, result (binary), silo (string), rerouted (bool), via_sidecar (bool)

The driver reads the live view once (``read_view``: the Active silos of the membership table)
and broadcasts it with the job settings. Each task receives its rows as Arrow record batches
(``mapInArrow``), hashes their keys onto the same consistent-hash ring, sends them to their
owners as Arrow IPC batches over gRPC (``Work.Process`` with ``arrow_batch``), several calls
in flight (``silo.work.columnar_routing``), and yields one output row per input record, as
Arrow again. When a silo dies mid-job the task re-reads the view
from the table (a newer version only) and moves that silo's keys to their next owners; see
``silo.work.routing`` for the failover rules. Delivery is at least once: handlers must be
idempotent. The output is lazy like any DataFrame: every action on it routes the records
again, so ``persist()`` it or write it out once.

**Sidecars.** An executor recognises the silo on its own host in the view: the one named by
``SILO_SIDECAR_ADDRESS=host:port`` in its environment (the silo's advertised address, e.g. from
a Kubernetes pod template or the Spark worker's environment), else the one that advertises its
host (``silo.spark.sidecar``: the ``spark.host`` property or the advertised address, so YARN,
standalone and DaemonSet executors need no per-host setting). Records that silo owns go to it
without leaving the host, and their rows say ``via_sidecar``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from membership_tables import open_table
from silo.client.topology import ClusterView
from silo.spark.sidecar import executor_sidecar
from silo.wire.tls import TlsSettings, checked_tls
from silo.work.client import SyncWorkClient
from silo.work.columnar_routing import (
    DEFAULT_COLUMNAR_BATCH_SIZE,
    DEFAULT_IN_FLIGHT,
    ColumnarShard,
    RoutingStats,
    route_columnar,
)
from silo.work.columns import routing_keys
from silo.work.hashring import DEFAULT_VIRTUAL_NODES
from silo.work.routing import DEFAULT_MAX_ATTEMPTS, NoLiveSiloError, Router, check_positive_int
from silo.work.sidecar import SidecarLocator

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.accumulators import Accumulator
    from pyspark.broadcast import Broadcast
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

OUTPUT_COLUMNS = ("silo", "rerouted", "via_sidecar")
"""Columns ``route_to_silos`` adds after the key and result columns."""

DEFAULT_TIMEOUT = 30.0
"""Seconds one ``Work.Process`` call may take before the batch fails over to another silo."""


def read_view(table: str, cluster: str) -> ClusterView:
    """The cluster's current view (its Active silos) read from the membership table at ``table``."""
    with open_table(table, cluster) as opened:
        return ClusterView.from_table_data(cluster, opened.read_all())


@dataclass(frozen=True)
class ViewSource:
    """Where the driver reads the view and executors re-read it after a failure (picklable).

    The table (``read_view``) when ``table`` is set, else the silos' gateways through a
    ``silo.client.MembershipClient``.
    """

    cluster: str
    table: str | None = None
    gateways: tuple[str, ...] = ()
    tls: TlsSettings | None = None
    """Mutual TLS for the gateways and the Work calls (the files must exist on every executor)."""

    def __post_init__(self) -> None:
        if (self.table is None) == (not self.gateways):
            raise ValueError(
                "give the membership table (table='URI') or the silos' gateways (gateways=['host:port']), "
                "exactly one of them"
            )

    def read(self) -> ClusterView:
        if self.table is not None:
            return read_view(self.table, self.cluster)
        from silo.client.membership_client import MembershipClient

        with MembershipClient(self.cluster, self.gateways, tls=self.tls) as client:
            return client.view()


@dataclass(frozen=True)
class RoutingJob:
    """Everything a task needs, broadcast once by the driver."""

    view: ClusterView
    source: ViewSource
    handler: str
    key_column: str
    batch_size: int = DEFAULT_COLUMNAR_BATCH_SIZE
    timeout: float = DEFAULT_TIMEOUT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    in_flight: int = DEFAULT_IN_FLIGHT

    def shard(self, batch: pa.RecordBatch) -> ColumnarShard:
        """An input batch (the key column, then the value columns) as rows to route."""
        import pyarrow as pa

        keys = routing_keys(batch.column(0), self.key_column)
        wire = pa.RecordBatch.from_arrays([keys, *batch.columns[1:]], names=batch.schema.names)
        return ColumnarShard(wire, batch.select([0]))

    def route_batches(
        self,
        batches: Iterable[pa.RecordBatch],
        sidecar: str | SidecarLocator | None,
        stats: RoutingStats | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """One task: route the rows of ``batches``; yield output batches (key, result, silo, rerouted, via_sidecar).

        ``sidecar``: the local silo's endpoint or a ``SidecarLocator`` (``silo.spark.sidecar``)."""
        import pyarrow as pa

        with SyncWorkClient(self.view.cluster_id, tls=self.source.tls) as client:
            router: Router[Any] = Router(
                self.view,
                self.handler,
                None,
                self.source.read,
                sidecar=sidecar,
                virtual_nodes=self.virtual_nodes,
                max_attempts=self.max_attempts,
            )
            shards = (self.shard(batch) for batch in batches)
            for delivery in route_columnar(
                router,
                client,
                self.handler,
                shards,
                batch_size=self.batch_size,
                in_flight=self.in_flight,
                timeout=self.timeout,
                stats=stats,
            ):
                size = len(delivery.shard)
                yield pa.RecordBatch.from_arrays(
                    [
                        delivery.shard.carried.column(0),
                        delivery.results,
                        pa.repeat(pa.scalar(str(delivery.silo), pa.string()), size),
                        pa.array(delivery.rerouted, pa.bool_()),
                        pa.repeat(pa.scalar(delivery.via_sidecar, pa.bool_()), size),
                    ],
                    names=[self.key_column, "result", *OUTPUT_COLUMNS],
                )


def route_to_silos(
    df: DataFrame,
    key_column: str,
    handler: str,
    *,
    cluster: str,
    table: str | None = None,
    gateways: Sequence[str] | str = (),
    view: ClusterView | None = None,
    value_columns: Sequence[str] | None = None,
    result_column: str = "result",
    batch_size: int = DEFAULT_COLUMNAR_BATCH_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    in_flight: int = DEFAULT_IN_FLIGHT,
    stats: Accumulator[RoutingStats] | None = None,
    tls: TlsSettings | None = None,
) -> DataFrame:
    """Run silo handler ``handler`` over every record of ``df``, each on the silo that owns its key.

    Rows move as Arrow record batches (``mapInArrow``) from Spark to the silos and back.

    - ``key_column``: routing key; strings are hashed as they are, other types as ``str(value)``;
      a null key fails the task.
    - ``value_columns``: the columns sent with each record (default: every other column). A
      columnar handler gets them as they are; an item handler gets them as a JSON array
      payload (``encode_payload``), or the raw bytes of a single binary column.
    - ``cluster`` and either ``table`` (a membership table URI) or ``gateways`` (silos'
      ``host:port`` gateway endpoints): where the view is read, on the driver now and on
      executors after a failure. ``view`` overrides the driver's first read (e.g. the latest
      view of a ``MembershipClient`` the driver already watches).
    - ``batch_size`` rows per call, ``in_flight`` calls one task keeps going at once,
      ``timeout`` seconds per call, ``max_attempts`` failed calls per batch before the task
      fails with ``NoLiveSiloError``.
    - ``stats``: an accumulator from ``stats_accumulator(spark)`` that adds up where the time
      went (``RoutingStats``), readable after an action.
    - ``tls``: call the gateways and silos over mutual TLS (``TlsSettings(cert, key, ca)``, a
      client certificate of ``cluster``); the files must be at the same paths on every executor.

    Returns a DataFrame with one row per input record: ``key_column`` (as given),
    ``result_column`` (binary, the handler's result), ``silo`` (``host:port@generation`` that
    processed it), ``rerouted`` (not the key's owner in the starting view: its owner died or a
    silo joined) and ``via_sidecar``. Raises ``NoLiveSiloError`` at once if no silo is Active.
    """
    values = check_arguments(
        df,
        key_column,
        value_columns,
        result_column,
        batch_size=batch_size,
        max_attempts=max_attempts,
        virtual_nodes=virtual_nodes,
        in_flight=in_flight,
        timeout=timeout,
    )
    source = view_source(cluster, table, gateways, tls)
    start = view if view is not None else source.read()
    if not len(start):
        raise NoLiveSiloError(
            f"no silo of cluster {cluster!r} is Active in the membership table (version {start.version}); "
            "start silos (silo run) before routing work to them"
        )
    job = RoutingJob(start, source, handler, key_column, batch_size, timeout, max_attempts, virtual_nodes, in_flight)
    broadcast = df.sparkSession.sparkContext.broadcast(job)
    schema = _output_schema(df, key_column, result_column)
    return df.select(key_column, *values).mapInArrow(partial(_route_partition, broadcast, stats), schema)


def _route_partition(
    job: Broadcast[RoutingJob], stats: Accumulator[RoutingStats] | None, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    routing: RoutingJob = job.value
    figures = RoutingStats()
    try:
        yield from routing.route_batches(batches, executor_sidecar(), figures)
    finally:
        if stats is not None:
            stats.add(figures)


def stats_accumulator(session: SparkSession) -> Accumulator[RoutingStats]:
    """An accumulator for ``route_to_silos(..., stats=...)``: its ``value`` adds up every task's ``RoutingStats``.

    Tasks that Spark re-runs count again, so read it as a breakdown, not as record counts.
    """
    from silo.spark._stats import RoutingStatsParam

    accumulator: Accumulator[RoutingStats] = session.sparkContext.accumulator(RoutingStats(), RoutingStatsParam())
    return accumulator


def check_arguments(
    df: DataFrame,
    key_column: str,
    value_columns: Sequence[str] | None,
    result_column: str,
    *,
    timeout: float,
    **counts: int,
) -> list[str]:
    """The value columns to send; ``ValueError`` naming a missing column, a clash or a bad number."""
    values = [column for column in df.columns if column != key_column] if value_columns is None else [*value_columns]
    _check_columns(df, key_column, values, result_column)
    for name, number in counts.items():
        check_positive_int(name, number)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return values


def view_source(
    cluster: str, table: str | None, gateways: Sequence[str] | str, tls: TlsSettings | None = None
) -> ViewSource:
    """Where to read the view: ``table``, or ``gateways`` as a list or a comma-separated string."""
    tls = checked_tls(tls)
    parts = gateways.split(",") if isinstance(gateways, str) else gateways
    return ViewSource(cluster, table, tuple(part.strip() for part in parts if part.strip()), tls)


def _check_columns(df: DataFrame, key_column: str, values: Sequence[str], result_column: str) -> None:
    known = set(df.columns)
    missing = [column for column in (key_column, *values) if column not in known]
    if missing:
        raise ValueError(f"no column {', '.join(map(repr, missing))} in the DataFrame; its columns: {df.columns}")
    taken = {key_column, result_column} & set(OUTPUT_COLUMNS) or ({key_column} & {result_column})
    if taken:
        raise ValueError(
            f"column name {', '.join(map(repr, sorted(taken)))} would clash in the output "
            f"(key, {result_column!r}, {', '.join(OUTPUT_COLUMNS)}); rename it or pass another result_column"
        )


def _output_schema(df: DataFrame, key_column: str, result_column: str) -> StructType:
    from pyspark.sql.types import BinaryType, BooleanType, StringType, StructField, StructType

    key = df.schema[key_column]
    return StructType(
        [
            StructField(key_column, key.dataType, nullable=False),
            StructField(result_column, BinaryType(), nullable=False),
            StructField("silo", StringType(), nullable=False),
            StructField("rerouted", BooleanType(), nullable=False),
            StructField("via_sidecar", BooleanType(), nullable=False),
        ]
    )


_QUIET_LOG4J = """\
# Loggers at WARN (Spark announces a "default log level" when the root is anything else),
# but the console shows errors only.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
"""


@contextlib.contextmanager
def driver_environment(local_ip: str = "127.0.0.1") -> Iterator[None]:
    """Point a Spark driver started in this process at this interpreter and at ``local_ip``.

    pyspark reads ``PYSPARK_PYTHON`` (what executors run, so they can import this package)
    and ``SPARK_LOCAL_IP`` (the address the driver JVM binds) only from the environment; both
    are restored on exit.
    """
    settings = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": local_ip}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def local_session(app_name: str, cores: int = 2, conf: Mapping[str, str] | None = None) -> Iterator[SparkSession]:
    """A quiet local-mode SparkSession (``local[cores]``) on 127.0.0.1, running this interpreter.

    For demos and tests on one machine: no UI, no progress bar, only errors logged, executors
    run ``sys.executable`` (so they import this package). On exit the session stops and so does
    the JVM pyspark launched for it, so nothing is left running.
    """
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("a SparkSession is already running in this process; stop it before starting another")
    with tempfile.TemporaryDirectory(prefix="silo-spark-") as scratch, driver_environment():
        log_config = os.path.join(scratch, "log4j2.properties")
        with open(log_config, "w") as file:
            file.write(_QUIET_LOG4J)
        builder = SparkSession.builder.config(
            map={
                "spark.master": f"local[{cores}]",
                "spark.app.name": app_name,
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log_config}",
                "spark.local.dir": scratch,
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": str(max(2, cores)),
                **(conf or {}),
            }
        )
        session = None
        try:
            session = builder.getOrCreate()
            yield session
        finally:
            if session is not None:
                session.stop()
            _stop_jvm()  # also when interrupted while the session was starting


def _stop_jvm(timeout: float = 30.0) -> None:
    """End the driver JVM that pyspark launched in this process (a later session launches a new one)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return  # not launched by us (e.g. spark-submit started this Python)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    # The gateway exits when its stdin closes; kill it if it does not.
    with contextlib.suppress(OSError):
        process.stdin.close()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None
