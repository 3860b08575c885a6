"""Table throughput per backend, beside the same operations written with the raw driver.

For every backend (memory, SQLite, PostgreSQL, MariaDB, ZooKeeper, DynamoDB on moto, the
Consul test server): ``read_all`` latency at 10/100/1000 rows (and at 1000 rows after 100
random heartbeats moved, since a store may reuse the rows it parsed before), ``update_row`` latency, and
conditional-write commits/s with 1, 4 and 16 writers that contend for the version row
(each writer loops ``read_row`` + ``update_row`` of its own row with ``version.next()``).
Beside each, ``benchmarks.raw_drivers`` does the same round trips with psycopg, PyMySQL,
sqlite3, kazoo, boto3 or plain HTTP; the ratio library/raw is the library's own overhead.
Library and raw samples are interleaved so that load changes hit both alike. Each store
runs alone (started, measured, stopped) to keep the two shared cores for the one measured.

    python -m benchmarks.tables [--quick] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import entries, services
from benchmarks.common import (
    RunSettings,
    parse_over_preset,
    print_table,
    pyplot,
    ratio,
    run_benchmark,
    save_figure,
    summarize,
    workdir,
)
from benchmarks.raw_drivers import RawConsul, RawDynamoDb, RawSql, RawTable, RawZooKeeper
from membership_tables import MembershipEntry, MembershipTable, SiloAddress, open_table
from membership_tables.zookeeper import node_name
from testbed.services.dynamodb import CREDENTIALS, REGION

NAME = "tables"
BACKENDS = ("memory", "sqlite", "postgres", "mariadb", "zookeeper", "dynamodb", "consul")
CLUSTER = "bench"


@dataclass(frozen=True)
class Config:
    backends: tuple[str, ...] = BACKENDS
    """The stores measured (``--backends``; every one in ``BACKENDS`` by default)."""
    sizes: tuple[int, ...] = (10, 100, 1000)
    read_samples: dict[int, int] = field(default_factory=lambda: {10: 200, 100: 100, 1000: 30})
    update_samples: int = 200
    writers: tuple[int, ...] = (1, 4, 16)
    contention_seconds: float = 4.0
    update_size: int = 100
    """Rows in the table while update_row and contention are measured."""
    churn: int = 100
    """Heartbeats moved (``update_i_am_alive`` of random rows) before each churned read_all."""
    churn_samples: int = 20
    """Samples of read_all at the largest size after ``churn`` heartbeats moved."""

    @classmethod
    def quick(cls) -> Config:
        return cls(BACKENDS, (10, 100), {10: 20, 100: 10}, 20, (1, 4), 0.5, 100, 10, 5)


@dataclass(frozen=True)
class Target:
    name: str
    uri: str
    options: dict[str, Any]
    raw: Callable[[], RawTable] | None


@contextlib.contextmanager
def target(name: str, root: Path) -> Iterator[Target]:
    """Start the store ``name`` needs (if any) and describe how to reach it; stop it afterwards."""
    if name == "memory":
        yield Target(name, f"memory://{services.unique('bench')}", {}, None)
    elif name == "sqlite":
        uri = f"sqlite:///{root / 'tables.db'}"
        yield Target(name, uri, {}, lambda: RawSql(uri, CLUSTER))
    elif name == "postgres":
        with services.postgres() as postgres:
            uri = postgres.create_database(services.unique("bench"))
            yield Target(name, uri, {}, lambda: RawSql(uri, CLUSTER))
    elif name == "mariadb":
        with services.mariadb() as mariadb:
            uri = mariadb.create_database(services.unique("bench"))
            yield Target(name, uri, {}, lambda: RawSql(uri, CLUSTER))
    elif name == "zookeeper":
        with services.zookeeper(root) as zookeeper:
            yield Target(
                name,
                zookeeper.uri("bench"),
                {},
                lambda: RawZooKeeper(zookeeper.hosts, f"/bench/{CLUSTER}", node_name),
            )
    elif name == "dynamodb":
        with services.moto(root) as moto:
            yield Target(
                name,
                moto.uri("bench"),
                # moto serialises requests and copies the table per transaction: give it time
                {**moto.options, "read_timeout": 120.0, "retry_time": 120.0},
                lambda: RawDynamoDb(moto.endpoint_url, REGION, "bench", CLUSTER, dict(CREDENTIALS)),
            )
    elif name == "consul":
        with services.consul(root) as consul:
            endpoint = consul.endpoint
            yield Target(name, endpoint.uri("bench"), {}, lambda: RawConsul(endpoint.address, f"bench/{CLUSTER}/"))
    else:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


def make_entry(index: int) -> MembershipEntry:
    """A benchmark row of a realistic size: it carries the properties a silo advertises."""
    properties = {"endpoint": f"10.0.0.{index % 250}:30000", "zone": "a"}
    return entries.make_entry(index, network="10.0", host_prefix="bench-host", properties=properties)


def grow(table: MembershipTable, silos: list[SiloAddress], size: int) -> None:
    """Insert rows through the library until the table holds ``size`` of them."""
    while len(silos) < size:
        entry = make_entry(len(silos))
        version = table.read_row(entry.silo_address).version
        if table.insert_row(entry, version.next()):
            silos.append(entry.silo_address)


def churned_read(table: MembershipTable, silos: Sequence[SiloAddress], churn: int, seed: int) -> Callable[[], float]:
    """Move ``churn`` random heartbeats (untimed), then time ``read_all``.

    Repeated reads of an unchanged table show the per-call overhead; in a live cluster
    heartbeats move between two reads, and a store that reuses parsed rows pays for those.
    """
    chance = random.Random(seed)

    def one() -> float:
        now = datetime.now(UTC)
        for silo in chance.sample(list(silos), min(churn, len(silos))):
            table.update_i_am_alive(silo, now)
        return timed(table.read_all)

    return one


def timed(operation: Callable[[], object]) -> float:
    started = time.perf_counter()
    operation()
    return time.perf_counter() - started


def interleaved(
    library: Callable[[], float], raw: Callable[[], float] | None, samples: int
) -> tuple[list[float], list[float]]:
    """``samples`` timings of each, alternating library and raw (one warm-up of each first)."""
    library()
    if raw is not None:
        raw()
    library_times, raw_times = [], []
    for _ in range(samples):
        library_times.append(library())
        if raw is not None:
            raw_times.append(raw())
    return library_times, raw_times


def compare(library: list[float], raw: list[float]) -> dict[str, Any]:
    lib_stats, raw_stats = summarize(library), summarize(raw)
    return {
        "library": lib_stats,
        "raw": raw_stats,
        "ratio_median": ratio(lib_stats["median"], raw_stats["median"]),
        "ratio_p99": ratio(lib_stats["p99"], raw_stats["p99"]),
        "library_samples": library,
        "raw_samples": raw,
    }


def library_update(table: MembershipTable, silo: SiloAddress) -> Callable[[], float]:
    def one() -> float:
        data = table.read_row(silo)
        found = data.get(silo)
        assert found is not None
        entry = found[0].replace(i_am_alive_time=datetime.now(UTC))
        started = time.perf_counter()
        ok = table.update_row(entry, found[1], data.version.next())
        elapsed = time.perf_counter() - started
        assert ok, "an uncontended update_row lost a race"
        return elapsed

    return one


def raw_update(raw: RawTable, silo: SiloAddress) -> Callable[[], float]:
    def one() -> float:
        row = raw.read_row(silo)
        started = time.perf_counter()
        ok = raw.update(silo, row)
        elapsed = time.perf_counter() - started
        assert ok, "an uncontended raw update lost a race"
        return elapsed

    return one


def contend(
    writers: int, seconds: float, silos: Sequence[SiloAddress], attempt: Callable[[SiloAddress], bool]
) -> dict[str, float]:
    """``writers`` threads, each looping ``attempt(own silo)`` for ``seconds``; commits/s and losses."""
    counts = {"commits": 0, "lost": 0, "errors": 0}
    lock = threading.Lock()
    start = threading.Barrier(writers + 1)
    deadline = [0.0]

    def run(silo: SiloAddress) -> None:
        mine = {"commits": 0, "lost": 0, "errors": 0}
        start.wait()
        while time.perf_counter() < deadline[0]:
            try:
                mine["commits" if attempt(silo) else "lost"] += 1
            except Exception:
                mine["errors"] += 1
        with lock:
            for key, value in mine.items():
                counts[key] += value

    threads = [threading.Thread(target=run, args=(silo,), daemon=True) for silo in silos[:writers]]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    attempts = counts["commits"] + counts["lost"] + counts["errors"]
    return {
        "commits_per_s": counts["commits"] / elapsed,
        "attempts_per_s": attempts / elapsed,
        "lost_fraction": counts["lost"] / attempts if attempts else math.nan,
        "errors": counts["errors"],
        "seconds": elapsed,
    }


def library_attempt(table: MembershipTable) -> Callable[[SiloAddress], bool]:
    def attempt(silo: SiloAddress) -> bool:
        data = table.read_row(silo)
        found = data.get(silo)
        assert found is not None
        return table.update_row(found[0], found[1], data.version.next())

    return attempt


def raw_attempt(raw: RawTable) -> Callable[[SiloAddress], bool]:
    def attempt(silo: SiloAddress) -> bool:
        return raw.update(silo, raw.read_row(silo))

    return attempt


def measure(target: Target, config: Config) -> dict[str, Any]:
    table = open_table(target.uri, CLUSTER, **target.options)
    table.initialize()
    raw = target.raw() if target.raw is not None else None
    silos: list[SiloAddress] = []
    result: dict[str, Any] = {"read_all": {}, "contention": {}}
    try:
        for size in config.sizes:
            grow(table, silos, size)
            lib, base = interleaved(
                lambda: timed(table.read_all), (lambda: timed(raw.read_all)) if raw else None, config.read_samples[size]
            )
            result["read_all"][str(size)] = compare(lib, base)
            if size == config.sizes[-1]:
                lib, base = interleaved(
                    churned_read(table, silos, config.churn, seed=size),
                    (lambda: timed(raw.read_all)) if raw else None,
                    config.churn_samples,
                )
                result["read_all_churn"] = {"rows": size, "heartbeats_moved": config.churn, **compare(lib, base)}
            if size == config.update_size:
                lib, base = interleaved(
                    library_update(table, silos[0]),
                    raw_update(raw, silos[0]) if raw else None,
                    config.update_samples,
                )
                result["update_row"] = compare(lib, base)
                for writers in config.writers:
                    entry: dict[str, Any] = {
                        "library": contend(writers, config.contention_seconds, silos, library_attempt(table))
                    }
                    if raw is not None:
                        entry["raw"] = contend(writers, config.contention_seconds, silos, raw_attempt(raw))
                        entry["ratio_commits"] = ratio(entry["library"]["commits_per_s"], entry["raw"]["commits_per_s"])
                    result["contention"][str(writers)] = entry
    finally:
        if raw is not None:
            raw.close()
        close = getattr(table, "close", None)
        if close is not None:
            close()
    return result


def report(results: dict[str, dict[str, Any]], config: Config) -> None:
    ms = 1000.0
    rows = []
    for backend, result in results.items():
        for size, entry in result["read_all"].items():
            rows.append(
                [backend, f"read_all {size} rows", entry["library"]["median"] * ms, entry["library"]["p99"] * ms,
                 entry["raw"]["median"] * ms, entry["ratio_median"]]
            )  # fmt: skip
        if "read_all_churn" in result:
            entry = result["read_all_churn"]
            rows.append(
                [backend, f"read_all {entry['rows']} rows, {entry['heartbeats_moved']} heartbeats moved",
                 entry["library"]["median"] * ms, entry["library"]["p99"] * ms, entry["raw"]["median"] * ms,
                 entry["ratio_median"]]
            )  # fmt: skip
        entry = result["update_row"]
        rows.append(
            [backend, "update_row", entry["library"]["median"] * ms, entry["library"]["p99"] * ms,
             entry["raw"]["median"] * ms, entry["ratio_median"]]
        )  # fmt: skip
    print_table(
        "Latency (ms): library vs raw driver",
        ["backend", "operation", "lib median", "lib p99", "raw median", "lib/raw"],
        rows,
    )
    rows = []
    for backend, result in results.items():
        for writers, entry in result["contention"].items():
            raw = entry.get("raw", {})
            rows.append(
                [backend, writers, entry["library"]["commits_per_s"], entry["library"]["lost_fraction"],
                 raw.get("commits_per_s", math.nan), entry.get("ratio_commits", math.nan)]
            )  # fmt: skip
    print_table(
        "Conditional writes: commits/s with contending writers",
        ["backend", "writers", "lib commits/s", "lib lost", "raw commits/s", "lib/raw"],
        rows,
    )


def plot(results: dict[str, dict[str, Any]], config: Config, path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    backends = list(results)
    largest = str(config.sizes[-1])
    ms = 1000.0
    from benchmarks.common import grouped_bars

    grouped_bars(
        axes[0][0],
        backends,
        {
            f"library read_all {largest} rows": [
                results[b]["read_all"][largest]["library"]["median"] * ms for b in backends
            ],
            f"raw read_all {largest} rows": [results[b]["read_all"][largest]["raw"]["median"] * ms for b in backends],
        },
        "median latency (ms, log)",
        log=True,
    )
    axes[0][0].set_title(f"read_all at {largest} rows")
    for backend in backends:
        sizes = [int(size) for size in results[backend]["read_all"]]
        ratios = [entry["ratio_median"] for entry in results[backend]["read_all"].values()]
        if not all(math.isnan(value) for value in ratios):
            axes[0][1].plot(sizes, ratios, marker="o", label=backend)
    axes[0][1].set_xscale("log")
    axes[0][1].axhline(1.0, color="grey", linewidth=0.8)
    axes[0][1].set_xlabel("rows")
    axes[0][1].set_ylabel("library / raw (median)")
    axes[0][1].set_title("read_all overhead vs table size")
    axes[0][1].legend(fontsize=7)
    grouped_bars(
        axes[1][0],
        backends,
        {
            "library update_row": [results[b]["update_row"]["library"]["median"] * ms for b in backends],
            "raw conditional write": [results[b]["update_row"]["raw"]["median"] * ms for b in backends],
        },
        "median latency (ms, log)",
        log=True,
    )
    axes[1][0].set_title("update_row (one conditional write)")
    for index, backend in enumerate(backends):
        color = f"C{index}"
        writers = [int(w) for w in results[backend]["contention"]]
        entries = list(results[backend]["contention"].values())
        axes[1][1].plot(writers, [e["library"]["commits_per_s"] for e in entries], "-o", color=color, label=backend)
        if "raw" in entries[0]:
            axes[1][1].plot(writers, [e["raw"]["commits_per_s"] for e in entries], "--x", color=color)
    axes[1][1].set_xscale("log", base=2)
    axes[1][1].set_yscale("log")
    axes[1][1].set_xlabel("contending writers")
    axes[1][1].set_ylabel("commits/s (log); solid library, dashed raw")
    axes[1][1].set_title("conditional-write throughput")
    axes[1][1].legend(fontsize=7)
    save_figure(figure, path)


def backend_names(text: str) -> tuple[str, ...]:
    """``--backends``: comma-separated names from ``BACKENDS`` (else a clear exit, before the common flags are read)."""
    backends = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"unknown backends {unknown}; choose from {', '.join(BACKENDS)}")
    return backends


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus ``--backends``, applied over the preset."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--backends", type=backend_names, default=",".join(BACKENDS))
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    return settings, replace(config, backends=known.backends)


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)

    def measure_all() -> dict[str, Any]:
        results: dict[str, Any] = {}
        with workdir(NAME) as root:
            for name in config.backends:
                print(f"[tables] {name} ...", flush=True)
                with target(name, root) as chosen:
                    results[name] = measure(chosen, config)
        return results

    return run_benchmark(
        NAME, settings, config, measure_all, lambda r: report(r, config), lambda r, path: plot(r, config, path)
    )


if __name__ == "__main__":
    sys.exit(main())
