"""Propagation: from a membership write to every silo's view, gossip on vs off, and what it costs the store.

N real silos (local preset) on PostgreSQL with ``pg_stat_statements``. Each trial first
counts the silos' statements over a quiet window of W seconds (periodic refreshes only),
then SIGKILLs a random silo and counts again over the W seconds after the kill. The
change's cost is the difference: table reads caused by one death (votes, the Dead write's
own re-read, gossip-triggered re-reads). Propagation is the time from the Dead write (the
killer's vote time, the ``at`` of that event) to the last survivor's view without
the victim, each survivor's time being when its view took the death in (the ``observed_at`` of
the DECLARED_DEAD event the silo logs, read from its JSON log after the fact: the benchmark adds
no load while the change spreads. Runs before 25 November polled the views every 0.1 s, which
bounded their resolution; runs of 25-27 November watched each survivor's ``WatchMembership``
stream, 19 more messages and ~10 ms of the benchmark's CPU per death at N = 20, on the same
two cores, and stamped the time when the stream, not the view, got to the change). Gossip
off = ``--set use_liveness_gossip=false``: views then follow only the periodic re-read every
``table_refresh_timeout``. Gossip on runs with a slow periodic refresh
(``Config.gossip_on_refresh``) so that the reads a change causes stand out from the periodic
ones. Reads per change = table reads caused / versions written (a death is several changes:
each vote and the Dead row); the versions are the version row's value after the window minus
before (not the version UPDATEs: whether a write that lost ran one depends on the backend).
Gossip on under mutual TLS (``gossip_on_tls``, a development CA) is the production setting:
only there may a vote be decided on the silo's view (gossip comes from members only), so a
death's monitors need not read the table.

Statement shapes counted (from the SQL backend): every read (``read_all``, ``read_row``,
``read_version``) is one SELECT of the version row (joined with the rows but for
``read_version``); a full read joins every row of the cluster (``read_all``); a canonical write
UPDATEs the version row once (on PostgreSQL in the ``bumped`` CTE of its one statement; a write
that lost fails and is not counted); a heartbeat UPDATEs ``i_am_alive_time`` alone.
The benchmark reads nothing from the table during a trial (it reads the silos' logs), so the
counts are the silos' own.

The silos run the local preset (``SiloOptions.local``: a probe every 0.25 s, each silo probing
10 others), which keeps trials short but at N = 20 keeps the two cores about 65% busy with
probes alone; ``--set probe_timeout=5s --set probe_interval=2s --set death_vote_expiration=120s``
runs the production probe timings instead (then give ``--window 10``: a crash takes a few
seconds to be declared Dead).

    python -m benchmarks.propagation [--quick] [--modes gossip_on,gossip_on_tls,gossip_off]
        [--sizes 5,10,20] [--trials N] [--window SECONDS] [--set NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import services
from benchmarks.common import (
    RunSettings,
    choices_list,
    grouped_bars,
    parse_over_preset,
    positive,
    print_table,
    pyplot,
    run_benchmark,
    save_figure,
    sizes_list,
    summarize,
    wall,
    workdir,
)
from benchmarks.option_flags import OptionPairs, add_set_flag, local_options_with, set_flags
from benchmarks.silo_cluster import BenchCluster, KillTrial, silo_certificates
from silo.membership.options import SiloOptions

NAME = "propagation"


MODES = ("gossip_on", "gossip_on_tls", "gossip_off")
"""Gossip on (plaintext), gossip on under mutual TLS, gossip off (plaintext)."""


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...] = (5, 10, 20)
    trials: int = 6
    window: float = 6.0
    seed: int = 7
    gossip_on_refresh: str = "60s"
    """``table_refresh_timeout`` of the gossip-on runs: delta gossip needs no periodic read to
    spread a change, and at the local preset's 2 s the periodic reads of 20 silos (60 per window,
    give or take one per silo at the window's edges) would bury the few reads a change causes."""
    silo_options: OptionPairs = ()
    """More ``NAME=VALUE`` options for every silo of both modes (``--set``), e.g. ``gossip_fanout=32``."""
    modes: tuple[str, ...] = MODES

    @classmethod
    def quick(cls) -> Config:
        return cls(sizes=(5,), trials=1, window=4.0)


Counts = dict[str, int]
_FULL_READ = re.compile(
    r"LEFT OUTER JOIN silo_membership ON silo_membership\.cluster_id = silo_membership_version\.cluster_id "
    r"WHERE silo_membership_version\.cluster_id = \$1(::VARCHAR)?( ORDER BY [^()]*)?$"
)
"""``read_all``: the version row joined with the rows by cluster only (``read_row`` adds the key to the
join), in key order."""
_VERSION_CTE = "bumped AS (UPDATE silo_membership_version"
"""A PostgreSQL canonical write: one statement whose CTE ``bumped`` UPDATEs the version row."""
_CHANGES_READ = "written_version"
"""``read_changes``: the version row joined with the rows written since a version (by their ``written_version``)."""


def statement_counts(server: services.BenchPostgresServer, database: str, role: str | None = None) -> Counts:
    """Calls so far of the statement shapes we count, in ``database`` (see the module docstring);
    only those ``role`` ran if given."""
    query = "SELECT query, calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)"
    parameters: tuple[str, ...] = (database,)
    if role is not None:
        query += " AND userid = (SELECT oid FROM pg_roles WHERE rolname = %s)"
        parameters = (database, role)
    with server.connect(database) as connection:
        rows = connection.execute(query.encode(), parameters).fetchall()
        latest = connection.execute(b"SELECT max(version) FROM silo_membership_version").fetchone()
    names = ("full_reads", "changes_reads", "all_reads", "version_writes", "heartbeats", "statements")
    counts = dict.fromkeys(names, 0)
    counts["versions"] = int(str(latest[0])) if latest is not None and latest[0] is not None else 0
    for statement, calls in rows:
        number = int(str(calls))
        for name in ("statements", *counted_as(str(statement))):
            counts[name] += number
    return counts


def counted_as(statement: str) -> tuple[str, ...]:
    """The counts of ``statement_counts`` besides ``statements`` that one call of ``statement`` (as
    ``pg_stat_statements`` shows it) adds to."""
    text = " ".join(statement.split())
    if text.startswith("SELECT silo_membership_version.version, silo_membership_version.etag"):
        return (
            "all_reads",
            *(("full_reads",) if _FULL_READ.search(text) else ()),
            *(("changes_reads",) if _CHANGES_READ in text else ()),
        )
    if text.startswith("UPDATE silo_membership_version") or _VERSION_CTE in text:
        return ("version_writes",)
    if text.startswith("UPDATE silo_membership SET i_am_alive_time"):
        return ("heartbeats",)
    return ()


def difference(after: Counts, before: Counts) -> Counts:
    return {key: after[key] - before[key] for key in after}


async def one_config(
    server: services.BenchPostgresServer, size: int, mode: str, config: Config, root: Path, rng: random.Random
) -> dict[str, Any]:
    database = services.unique("propagation")
    uri = server.create_database(database)
    with server.connect(database) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    root.mkdir(parents=True, exist_ok=True)
    gossip, cluster_id = mode != "gossip_off", f"prop{size}" + ("tls" if mode == "gossip_on_tls" else "")
    extra = (
        ("--set", f"table_refresh_timeout={config.gossip_on_refresh}")
        if gossip
        else ("--set", "use_liveness_gossip=false")
    ) + tuple(set_flags(config.silo_options))
    [tls] = silo_certificates(root, [cluster_id]) if mode == "gossip_on_tls" else [None]
    bench = BenchCluster(root, uri, cluster_id, extra, poll_table=False, views_from_logs=True, tls=tls)
    trials: list[KillTrial] = []
    caused: list[Counts] = []

    def counts() -> Counts:
        return statement_counts(server, database)

    try:
        await bench.start(size)
        for index in range(config.trials):
            quiet = await window_counts(counts, config.window)
            started, killed_at = counts(), wall()
            trial = await bench.kill_one(rng)
            await asyncio.sleep(max(0.0, killed_at + config.window - wall()))
            change = difference(counts(), started)
            caused.append({key: change[key] - quiet[key] for key in change})
            trials.append(trial)
            await bench.replace_missing(size)
            print(
                f"  N={size} {mode} trial {index + 1}: propagation "
                f"{trial.propagation}, reads caused {caused[-1]['all_reads']} "
                f"({caused[-1]['full_reads']} full) for {caused[-1]['versions']} versions "
                f"({caused[-1]['version_writes']} version UPDATE statements)",
                flush=True,
            )
    finally:
        await bench.close()
    return summarize_config(trials, caused)


async def window_counts(counts: Callable[[], Counts], seconds: float) -> Counts:
    before = await asyncio.to_thread(counts)
    await asyncio.sleep(seconds)
    return difference(await asyncio.to_thread(counts), before)


def reads_per_change(caused: list[Counts]) -> list[float]:
    """Per trial: table reads (every ``read_all`` and ``read_row``) caused per version written.

    A death is several membership changes (each vote, then the Dead row, each one version):
    this is what one change costs the store in reads, cluster-wide.
    """
    return [c["all_reads"] / c["versions"] for c in caused if c["versions"] > 0]


def summarize_config(trials: list[KillTrial], caused: list[Counts]) -> dict[str, Any]:
    propagation = [t.propagation for t in trials if t.propagation is not None]
    per_silo = [view - t.table_dead for t in trials if t.table_dead is not None for view in t.views.values()]
    return {
        "propagation_last_silo": summarize(propagation),
        "propagation_each_silo": summarize(per_silo),
        "crash_to_last_view": summarize([t.last_view for t in trials if t.last_view is not None]),
        "reads_per_change": summarize(reads_per_change(caused)),
        "caused_per_death": {
            key: {
                "mean": statistics.fmean(c[key] for c in caused),
                "stdev": statistics.stdev(c[key] for c in caused) if len(caused) > 1 else 0.0,
                "samples": [c[key] for c in caused],
            }
            for key in caused[0]
        }
        if caused
        else {},
        "trials": [t.to_json() for t in trials],
    }


async def run(config: Config) -> dict[str, Any]:
    rng = random.Random(config.seed)
    results: dict[str, Any] = {}
    with workdir(NAME) as root, services.postgres(stats=True) as server:
        for mode in config.modes:
            results[mode] = {}
            for size in config.sizes:
                print(f"[propagation] N={size} {mode}", flush=True)
                results[mode][str(size)] = await one_config(server, size, mode, config, root / f"{mode}-{size}", rng)
    return results


def report(results: dict[str, Any]) -> None:
    rows: list[list[object]] = []
    for label, by_size in results.items():
        for size, entry in by_size.items():
            stats = entry["propagation_last_silo"]
            reads = entry["caused_per_death"]
            rows.append(
                [label, size, stats["median"], stats["p95"], stats["p99"], entry["propagation_each_silo"]["median"],
                 reads["full_reads"]["mean"], reads["all_reads"]["mean"], reads["versions"]["mean"],
                 reads["version_writes"]["mean"], entry.get("reads_per_change", {}).get("median")]
            )  # fmt: skip
    print_table(
        "Dead write to every silo's view (s), and store statements caused by one death (mean over trials)",
        ["mode", "N", "last median", "last p95", "last p99", "each median", "full reads", "all reads", "versions",
         "version UPDATEs", "reads per change (median)"],
        rows,
    )  # fmt: skip


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = list(next(iter(results.values())))
    groups = [f"N={s}" for s in sizes]
    grouped_bars(
        axes[0],
        groups,
        {
            f"{label}: {stat}": [results[label][s]["propagation_last_silo"][stat] for s in sizes]
            for label in results
            for stat in ("median", "p99")
        },
        "seconds from the Dead write to the last view",
    )
    axes[0].set_title("propagation of a death to every silo")
    grouped_bars(
        axes[1],
        groups,
        {f"{label}": [results[label][s]["caused_per_death"]["full_reads"]["mean"] for s in sizes] for label in results},
        "full-table reads caused by one death (mean)",
    )
    axes[1].set_title("full-table reads per death (pg_stat_statements)")
    save_figure(figure, path)


def parse(argv: Sequence[str] | None) -> tuple[RunSettings, Config]:
    """The common flags plus ``--modes`` (a comma-separated subset of ``MODES``), ``--sizes`` (comma-separated),
    ``--trials``, ``--window`` and ``--set NAME=VALUE`` (repeatable: ``Config.silo_options``)."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--modes", default=None)
    extra.add_argument("--window", default=None)
    extra.add_argument("--sizes", default=None)
    extra.add_argument("--trials", default=None)
    add_set_flag(extra, "silo_options")
    settings, known, config = parse_over_preset(__doc__ or NAME, argv, extra, Config)
    if known.modes is not None:
        config = dataclasses.replace(config, modes=choices_list(known.modes, MODES, "--modes"))
    if known.window is not None:
        config = dataclasses.replace(config, window=positive(known.window, "--window", float))
    if known.sizes is not None:
        config = dataclasses.replace(config, sizes=sizes_list(known.sizes))
    if known.trials is not None:
        config = dataclasses.replace(config, trials=positive(known.trials, "--trials"))
    if known.silo_options:
        config = dataclasses.replace(config, silo_options=(*config.silo_options, *known.silo_options))
    silo_options(config)  # a bad --set stops here, not in 20 silo processes
    return settings, config


def silo_options(config: Config) -> SiloOptions:
    """The local preset with ``config.silo_options`` applied: what every silo runs (a clear exit if one is bad)."""
    return local_options_with(config.silo_options)


def main(argv: Sequence[str] | None = None) -> int:
    settings, config = parse(argv)
    arguments = list(argv if argv is not None else sys.argv[1:])  # the recorded command omits the extra flags
    extra = {"options": asdict(silo_options(config)), "arguments": arguments}
    return run_benchmark(NAME, settings, config, lambda: asyncio.run(run(config)), report, plot, extra)


if __name__ == "__main__":
    sys.exit(main())
