"""``silo demo``: the whole system on one machine, with nothing but this repository.

1. Start 4 silos (``silo run --preset local``) on a SQLite table in a temporary directory
   (or ``--table``), and a local Spark session (``local[2]``).
2. Route ``--records`` keyed records (default 200,000) with ``silo.spark.route_to_silos``
   through the built-in ``example.checksum`` handler, each to the silo that owns its key: rows
   travel as Arrow record batches, several calls in flight per task (the columnar path), and
   ``silo.spark.routing_summary`` adds up the output in one columnar pass.
3. Half-way through the job, SIGKILL one silo. The survivors declare it Dead; the executors
   move its keys to their next owners and carry on.
4. Print the cluster before and after, the death (when, by whom), records per silo, how many
   were rerouted, and a check against the same computation done without silos.

With ``--tls`` every silo and the Spark job talk mutual TLS: a development CA and one
certificate per silo (and a client certificate for Spark) are made in the temporary directory
first (``silo.cli.dev_ca``), exactly what ``silo certs init``/``issue`` write.

Progress goes to stderr; the report (or with ``--json`` one JSON object) to stdout. Every silo
and the Spark JVM are stopped on the way out, also on Ctrl-C or SIGTERM. Exit code 0 when the
check passes, 1 when it does not, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from membership_tables import MembershipTable, MembershipTableData, SiloAddress, SiloStatus, open_table
from membership_tables.redaction import redact
from silo.cli.demo_report import Death, DemoSummary, JobTotals
from silo.cli.dev_ca import init_ca, issue
from silo.cli.local_cluster import LocalCluster, LocalClusterError
from silo.errors import SiloError
from silo.wire.peer_identity import Role
from silo.wire.tls import TlsSettings
from silo.work.handlers import CHECKSUM_HANDLER, checksum, checksum_total

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["add_arguments", "run"]

START_TIMEOUT = 60.0
DEATH_TIMEOUT = 60.0
"""Seconds to wait after the job for the cluster to declare the killed silo Dead."""
POLL = 0.05
KILL_FRACTION = 0.5
"""Kill a silo once this share of the job's partitions is done."""
VICTIM = 2
"""Which silo (0-based, in start order) to kill: not the oldest, to show the leader staying put."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``silo demo`` flags."""
    parser.add_argument("--records", type=_positive, default=200_000, help="records to route (default 200000)")
    parser.add_argument("--silos", type=_at_least_two, default=4, help="silos to start (default 4)")
    parser.add_argument(
        "--table", metavar="URI", default=None, help="membership table URI (default: SQLite in a temp dir)"
    )
    parser.add_argument("--cluster", metavar="ID", default="demo", help="cluster id (default demo)")
    parser.add_argument("--partitions", type=_positive, default=16, help="Spark partitions (default 16)")
    parser.add_argument(
        "--batch-size", type=_positive, default=2000, help="records per gRPC call, an Arrow batch (default 2000)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument(
        "--tls", action="store_true", help="run silos and Spark over mutual TLS (certificates made in the temp dir)"
    )
    parser.set_defaults(log_level="WARNING")  # progress is printed, not logged


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _at_least_two(text: str) -> int:
    value = _positive(text)
    if value < 2:
        raise argparse.ArgumentTypeError("the demo kills one silo, so it needs at least 2")
    return value


class Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def __call__(self, message: str) -> None:
        print(f"[{self.elapsed:5.1f}s] {message}", file=sys.stderr, flush=True)


class _TerminatedError(Exception):
    """SIGTERM arrived: unwind through every ``finally`` like Ctrl-C does."""


class DemoError(SiloError):
    """The demo cannot run as asked (e.g. the cluster is already busy): one line for the user."""


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed ``silo demo`` arguments; returns the exit code."""
    progress = Progress()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise _TerminatedError

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix="silo-demo-") as scratch:
            summary = _demo(args, Path(scratch), progress)
    except (KeyboardInterrupt, _TerminatedError):
        progress("interrupted: every silo and the Spark JVM were stopped")
        return 130
    except (DemoError, LocalClusterError) as exc:
        print(f"silo demo: error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(summary.render_json() if args.json else summary.render())
    return 0 if summary.correct else 1


def _demo(args: argparse.Namespace, scratch: Path, progress: Progress) -> DemoSummary:

    _require_java()
    table_uri = args.table or f"sqlite:///{scratch / 'membership.db'}"
    names = [f"{args.cluster}-{index}" for index in range(args.silos)]
    with open_table(table_uri, args.cluster) as table, LocalCluster(table, table_uri, args.cluster, scratch) as silos:
        table.initialize()
        _refuse_busy_cluster(table, args.cluster)
        tls, silo_flags = _certificates(args, scratch, names, progress) if args.tls else (None, {})
        transport = "mutual TLS" if tls else "plaintext"
        progress(
            f"starting {args.silos} silos on {redact(table_uri)} (cluster {args.cluster!r}, local preset, {transport})"
        )
        silos.start(names, silo_flags)
        progress("starting Spark (local[2])")
        from silo.spark import local_session

        with local_session("silo-demo", cores=2) as spark:
            addresses = silos.wait_active(START_TIMEOUT)
            before, before_at = table.read_all(), datetime.now(UTC)
            progress(f"{args.silos} silos Active: " + ", ".join(f"{name} {addresses[name]}" for name in names))
            progress("building the job: route_to_silos over spark.range")
            job = _Job(spark, table_uri, args, tls)
            death = _run_and_kill(job, silos, table, names[VICTIM], addresses[names[VICTIM]], progress)
        progress("computing the same checksums without silos")
        expected = checksum_total(checksum(key, payload) for key, payload in _records(args.records, _keys(args)))
        after, after_at = table.read_all(), datetime.now(UTC)
    return DemoSummary(
        cluster=args.cluster,
        table=redact(table_uri),
        names={address: name for name, address in addresses.items()},
        records_in=args.records,
        keys=_keys(args),
        partitions=args.partitions,
        expected_checksum=expected,
        totals=job.totals,
        death=death,
        before=before,
        before_at=before_at,
        after=after,
        after_at=after_at,
        elapsed_s=progress.elapsed,
    )


def _certificates(
    args: argparse.Namespace, scratch: Path, names: Sequence[str], progress: Progress
) -> tuple[TlsSettings, dict[str, list[str]]]:
    """A development CA in ``scratch``, a silo certificate per name and a client one for Spark."""
    directory = scratch / "certs"
    ca = init_ca(directory)
    flags: dict[str, list[str]] = {}
    for name in names:
        issued = issue(directory, cluster=args.cluster, name=name, roles=(Role.SILO,))
        flags[name] = ["--tls-cert", str(issued.cert), "--tls-key", str(issued.key), "--tls-ca", str(ca)]
    client = issue(directory, cluster=args.cluster, name="spark", roles=(Role.CLIENT,))
    progress(f"made a development CA and {len(names)} silo certificates and a client one in {directory}")
    return TlsSettings(client.cert, client.key, ca), flags


def _require_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and shutil.which("java") is None:
        raise DemoError(
            "Spark needs Java 17 and none was found (no java on PATH, no JAVA_HOME): install one, e.g. "
            "`make system-packages` as root or `apt-get install openjdk-17-jre-headless`"
        )


def _refuse_busy_cluster(table: MembershipTable, cluster: str) -> None:
    active = [entry for entry in table.read_all().entries if entry.status is SiloStatus.ACTIVE]
    if active:
        raise DemoError(
            f"cluster {cluster!r} already has {len(active)} Active silos in this table; "
            "pass another --cluster or a fresh --table"
        )


def _keys(args: argparse.Namespace) -> int:
    records: int = args.records
    return max(1, records // 4)


def _records(count: int, keys: int) -> Iterator[tuple[str, bytes]]:
    """The job's records as the silos see them: ``key-<i mod keys>`` and the JSON payload ``[i]``."""
    from silo.spark import encode_payload

    for number in range(count):
        yield f"key-{number % keys}", encode_payload([number])


class _Job:
    """The Spark job, run in a background thread so the main thread can watch and kill."""

    def __init__(self, spark: SparkSession, table_uri: str, args: argparse.Namespace, tls: TlsSettings | None) -> None:
        from silo.spark import route_to_silos

        self._spark = spark
        frame: DataFrame = spark.range(args.records, numPartitions=args.partitions).selectExpr(
            f"concat('key-', cast(id % {_keys(args)} as string)) as key", "id as value"
        )
        self._routed = route_to_silos(
            frame,
            "key",
            CHECKSUM_HANDLER,
            table=table_uri,
            cluster=args.cluster,
            batch_size=args.batch_size,
            tls=tls,
        )
        self.partitions = args.partitions
        self.totals = JobTotals()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._collect, name="silo-demo-job", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def done_partitions(self) -> int | None:
        """Partitions finished so far (None when no stage of the job is running)."""
        tracker = self._spark.sparkContext.statusTracker()
        stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
        done = [stage.numCompletedTasks for stage in stages if stage is not None]
        return max(done) if done else None

    def cancel(self) -> None:
        self._spark.sparkContext.cancelAllJobs()

    def _collect(self) -> None:
        from silo.spark import routing_summary

        try:
            summary = routing_summary(self._routed, checksum=True)
        except BaseException as exc:  # handed to the main thread, which raises it
            self.error = exc
        else:
            assert summary.checksum is not None
            self.totals = JobTotals(
                summary.records, summary.checksum, summary.per_silo, summary.rerouted, summary.via_sidecar
            )


def _run_and_kill(
    job: _Job, silos: LocalCluster, table: MembershipTable, victim: str, address: SiloAddress, progress: Progress
) -> Death:
    """Run the job, kill ``victim`` half-way, report progress; wait (bounded) for its death declaration."""
    progress(f"routing {job.partitions} partitions through the silos")
    job.start()
    killed: tuple[datetime, str] | None = None
    shown = -1
    declared = _Watch(lambda snapshot: _is_dead(snapshot, address))
    try:
        while job.running:
            done = job.done_partitions()
            if done is not None and done != shown:
                shown = done
                progress(f"job: {done}/{job.partitions} partitions done")
            if killed is None and done is not None and done >= job.partitions * KILL_FRACTION:
                silos.kill(victim)
                killed = datetime.now(UTC), f"{done}/{job.partitions} partitions were done"
                progress(f"killed {victim} ({address}) with SIGKILL")
            if killed is not None:
                declared.poll(table, lambda: progress(f"{victim} declared Dead in the table"))
            time.sleep(POLL)
    except BaseException:
        job.cancel()
        raise
    if job.error is not None:
        lines = str(job.error).splitlines() or [type(job.error).__name__]
        reason = next((line.strip() for line in lines if "Error: " in line), lines[0])
        raise DemoError(f"the Spark job failed: {reason}") from job.error
    progress(f"job: {job.partitions}/{job.partitions} partitions done, {job.totals.records:,} results")
    if killed is None:  # the job outran the watcher: still show a death
        silos.kill(victim)
        killed = datetime.now(UTC), "the job had finished"
        progress(f"killed {victim} ({address}) with SIGKILL")
    if not declared.seen:
        progress(f"waiting for the survivors to declare {victim} Dead")
        deadline = time.monotonic() + DEATH_TIMEOUT
        while not declared.poll(table, lambda: progress(f"{victim} declared Dead in the table")):
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
    found = table.read_all().get(address)
    return Death.observe(address, killed[0], killed[1], found[0] if found else None)


def _is_dead(snapshot: MembershipTableData, address: SiloAddress) -> bool:
    found = snapshot.get(address)
    return found is not None and found[0].status is SiloStatus.DEAD


@dataclass
class _Watch:
    """Polls the table until a condition holds; says so once."""

    condition: Callable[[MembershipTableData], bool]
    seen: bool = False

    def poll(self, table: MembershipTable, announce: Callable[[], None]) -> bool:
        if not self.seen and self.condition(table.read_all()):
            self.seen = True
            announce()
        return self.seen
