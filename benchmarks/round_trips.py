"""Store round trips per table call and per vote, counted on the wire to each real server.

A verdict's latency on a lossy or distant store link is its number of round trips times the
link's round-trip time (and every lost packet of one costs a retransmission timeout), so this
counts them: every store (PostgreSQL, MariaDB, ZooKeeper, DynamoDB on moto, the Consul test
server) is reached through a ``testbed.services.counting_proxy.CountingProxy`` that counts the
client's flights (requests sent after the server last answered) and the TCP connections opened.
Each call is made ``repeats`` times after ``WARM_UP`` uncounted ones (connections open,
statements prepared) on a table of ``rows`` rows; the counts are exact, not timings, and do not vary between repeats
unless the call does. A *vote* is what ``silo.membership.vote_caster`` does on silence without
mutual TLS: ``read_all`` and one ``update_rows_with_etags`` of the target's row at the next version
(under mutual TLS a vote decided on the silo's view is the write alone); a vote on refusals is
``read_row`` and ``update_row_at_next_version`` of the target's row (``refusal_votes``).

    python -m benchmarks.round_trips [--quick] [--backends postgres,zookeeper]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import entries, services
from benchmarks.common import choices_list, parse_over_preset, print_table, pyplot, run_benchmark, save_figure, workdir
from benchmarks.round_trips_report import cell, opened
from membership_tables import MembershipEntry, MembershipTable, SiloAddress, open_table
from testbed.services.counting_proxy import CountingProxy, RequestFilter, Tally, ZooKeeperRequests, through

NAME = "round_trips"
BACKENDS = ("postgres", "mariadb", "zookeeper", "dynamodb", "consul")
CLUSTER = "trips"
IDLE = 1.2
"""Seconds without a call before ``read_all_after_idle``: past the SQL pool's ``ping_after_idle`` (1 s)."""
WARM_UP = 6
"""Uncounted calls of each operation first: connections open, and psycopg prepares a statement on
the 5th execution on a connection (one round trip more, once)."""


@dataclass(frozen=True)
class Config:
    backends: tuple[str, ...] = BACKENDS
    """The stores measured (``--backends``; all of ``BACKENDS`` by default)."""
    rows: int = 5
    """Rows in the table while calls are counted."""
    repeats: int = 3
    """Counted calls of each operation."""

    @classmethod
    def quick(cls) -> Config:
        return cls(repeats=2)


OPERATIONS: dict[str, str] = {
    "vote": "read_all + update_rows_with_etags of 1 row (a vote on silence, read first)",
    "update_rows_1": "update_rows_with_etags of 1 row (a vote or a death; a vote on the view under TLS)",
    "update_rows_3": "update_rows_with_etags of 3 rows (three deaths in one version)",
    "lost_race": "update_rows_with_etags at a version already passed",
    "read_all": "read_all",
    "read_all_after_idle": f"read_all after {IDLE:g} s without a call (SQL first pings a connection idle over 1 s)",
    "read_row": "read_row",
    "read_version": "read_version",
    "update_row_at_next_version": "update_row_at_next_version (a silo's own status; a vote on refusals)",
    "insert_row_at_next_version": "insert_row_at_next_version (a join)",
    "update_i_am_alive": "update_i_am_alive (a heartbeat)",
}
"""What is counted, by name: each one call (or, for ``vote``, the calls of one vote)."""


@dataclass(frozen=True)
class Target:
    """A running store behind a counting proxy, and how to open a table through it."""

    uri: str
    options: dict[str, Any]
    proxy: CountingProxy


@contextlib.contextmanager
def _proxied(port: int, requests: Callable[[], RequestFilter] = RequestFilter) -> Iterator[CountingProxy]:
    with CountingProxy("127.0.0.1", port, requests) as proxy:
        yield proxy


@contextlib.contextmanager
def target(name: str, root: Path) -> Iterator[Target]:
    """Start the store ``name`` and a counting proxy in front of it; stop both afterwards."""
    if name == "postgres":
        with services.postgres() as postgres, _proxied(postgres.port) as proxy:
            uri = postgres.create_database(services.unique("trips"))
            yield Target(through(uri, postgres.port, proxy, postgres.listen_address), {}, proxy)
    elif name == "mariadb":
        with services.mariadb() as mariadb, _proxied(mariadb.port) as proxy:
            yield Target(through(mariadb.create_database(services.unique("trips")), mariadb.port, proxy), {}, proxy)
    elif name == "zookeeper":
        with services.zookeeper(root) as zookeeper, _proxied(zookeeper.port, ZooKeeperRequests) as proxy:
            yield Target(through(zookeeper.uri("trips"), zookeeper.port, proxy), {}, proxy)
    elif name == "dynamodb":
        with services.moto(root) as moto, _proxied(moto.port) as proxy:
            yield Target(through(moto.uri("trips"), moto.port, proxy), {**moto.options, "read_timeout": 60.0}, proxy)
    elif name == "consul":
        with services.consul(root) as consul, _proxied(consul.endpoint.port) as proxy:
            yield Target(through(consul.endpoint.uri("trips"), consul.endpoint.port, proxy), {}, proxy)
    else:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


def make_entry(index: int) -> MembershipEntry:
    return entries.make_entry(index, network="10.1", host_prefix="trips-host")


class Counted:
    """The operations of ``OPERATIONS`` on one table, each counted by ``proxy``."""

    def __init__(self, table: MembershipTable, proxy: CountingProxy, silos: Sequence[SiloAddress]) -> None:
        self.table = table
        self.proxy = proxy
        self.silos = list(silos)
        self._joined = len(silos)

    def _voted(self, silo: SiloAddress, data: Any) -> tuple[MembershipEntry, str]:
        """``silo``'s row with one more vote against it (the write of a vote)."""
        found = data.get(silo)
        assert found is not None, f"{silo} has no row"
        entry, etag = found
        voter = self.silos[0] if silo != self.silos[0] else self.silos[1]
        vote = (voter, datetime.now(UTC))
        return entry.replace(suspect_times=(*entry.suspect_times[-2:], vote)), etag

    def count(self, operation: str) -> Tally:
        """One call of ``operation``, its round trips counted (the reads that prepare it are not)."""
        table, proxy, silos = self.table, self.proxy, self.silos
        if operation == "vote":
            with proxy.counting() as tally:
                data = table.read_all()
                assert table.update_rows_with_etags([self._voted(silos[1], data)], data.version.next()) is not None
            return tally
        if operation in ("update_rows_1", "update_rows_3", "lost_race"):
            data = table.read_all()
            updates = [self._voted(silo, data) for silo in silos[1 : 4 if operation == "update_rows_3" else 2]]
            version = data.version.next()
            if operation == "lost_race":
                assert table.update_rows_with_etags(updates, version) is not None
                updates = [self._voted(silos[2], data)]
            with proxy.counting() as tally:
                written = table.update_rows_with_etags(updates, version)
            assert (written is None) == (operation == "lost_race"), f"{operation}: unexpected outcome {written}"
            return tally
        if operation == "update_row_at_next_version":
            found = table.read_row(silos[0]).get(silos[0])
            assert found is not None
            entry = found[0].replace(i_am_alive_time=datetime.now(UTC))
            with proxy.counting() as tally:
                assert table.update_row_at_next_version(entry, found[1]) is not None
            return tally
        if operation == "insert_row_at_next_version":
            entry = make_entry(self._joined)
            self._joined += 1
            with proxy.counting() as tally:
                assert table.insert_row_at_next_version(entry) is not None
            return tally
        if operation == "read_all_after_idle":
            time.sleep(IDLE)
            operation = "read_all"
        calls: dict[str, Callable[[], object]] = {
            "read_all": table.read_all,
            "read_row": lambda: table.read_row(silos[0]),
            "read_version": table.read_version,
            "update_i_am_alive": lambda: table.update_i_am_alive(
                silos[0], datetime.now(UTC) + timedelta(milliseconds=self._joined)
            ),
        }
        with proxy.counting() as tally:
            calls[operation]()
        self._joined += 1
        return tally


def measure(chosen: Target, config: Config) -> dict[str, Any]:
    """Each operation's round trips and connections, ``config.repeats`` times after ``WARM_UP`` calls."""
    table = open_table(chosen.uri, CLUSTER, **chosen.options)
    try:
        table.initialize()
        silos = []
        for index in range(config.rows):
            entry = make_entry(index)
            assert table.insert_row_at_next_version(entry) is not None
            silos.append(entry.silo_address)
        counted = Counted(table, chosen.proxy, silos)
        result: dict[str, Any] = {}
        for operation in OPERATIONS:
            for _ in range(WARM_UP):
                counted.count(operation)
            tallies = [counted.count(operation) for _ in range(config.repeats)]
            result[operation] = {
                "round_trips": [tally.round_trips for tally in tallies],
                "requests": [tally.requests for tally in tallies],
                "connections": [tally.connections for tally in tallies],
            }
        return result
    finally:
        close = getattr(table, "close", None)
        if close is not None:
            close()


def report(results: dict[str, Any]) -> None:
    backends = list(results)
    rows = [[operation, *(cell(results[b][operation]) for b in backends)] for operation in OPERATIONS]
    print_table("round trips per call (client flights; requests where they differ)", ["operation", *backends], rows)
    print(f"\nconnections opened: {opened(results)}")


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(10, 4.5))
    backends = list(results)
    width = 0.8 / max(1, len(backends))
    for position, backend in enumerate(backends):
        heights = [max(results[backend][operation]["requests"]) for operation in OPERATIONS]
        axis.bar([i + position * width for i in range(len(OPERATIONS))], heights, width, label=backend)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(OPERATIONS))], list(OPERATIONS), rotation=30, ha="right")
    axis.set_ylabel("requests")
    axis.set_title("Store requests per table call (each a round trip, but ZooKeeper's pipelined ones)")
    axis.legend()
    save_figure(figure, path)


def parse(argv: Sequence[str] | None) -> tuple[Any, Config]:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--backends", default=",".join(BACKENDS))
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    return settings, replace(config, backends=choices_list(known.backends, BACKENDS, "--backends"))


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)

    def measure_all() -> dict[str, Any]:
        results: dict[str, Any] = {}
        with workdir(NAME) as root:
            for name in config.backends:
                print(f"[round_trips] {name} ...", flush=True)
                with target(name, root) as chosen:
                    results[name] = measure(chosen, config)
        return results

    return run_benchmark(NAME, settings, config, measure_all, report, plot)


if __name__ == "__main__":
    sys.exit(main())
