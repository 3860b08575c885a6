"""What every benchmark shares: the command line, machine facts, statistics, JSON results, plots, tables.

A benchmark's ``main()`` parses ``common_arguments`` (``--quick``, ``--output-dir``; through
``parse_over_preset`` when it has flags of its own), measures, and hands a payload to
``write_results``, which adds the machine (CPU, cores, memory, Python, package versions, load
average before and after) and writes ``benchmarks/results/NAME.json``
(``benchmarks/results/quick/NAME.json`` for ``--quick``, which git ignores).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PACKAGES = (
    "silo-membership",
    "sqlalchemy",
    "grpcio",
    "psycopg",
    "pymysql",
    "kazoo",
    "py-consul",
    "boto3",
    "moto",
    "pyspark",
    "matplotlib",
)


@dataclass(frozen=True)
class RunSettings:
    quick: bool
    output_dir: Path

    def result_path(self, name: str, suffix: str) -> Path:
        return self.output_dir / f"{name}{suffix}"


def common_arguments(description: str, argv: Sequence[str] | None = None) -> RunSettings:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="CI-sized run: fewer sizes, samples and trials")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where the JSON and PNG go (default benchmarks/results, or benchmarks/results/quick with --quick)",
    )
    args = parser.parse_args(argv)
    output = args.output_dir or (RESULTS / "quick" if args.quick else RESULTS)
    output.mkdir(parents=True, exist_ok=True)
    return RunSettings(quick=args.quick, output_dir=output)


ConfigT_co = TypeVar("ConfigT_co", covariant=True)


class Presets(Protocol[ConfigT_co]):
    """A benchmark's ``Config`` class (or anything alike): ``()`` is the full run, ``.quick()`` the CI-sized one."""

    def __call__(self) -> ConfigT_co: ...

    def quick(self) -> ConfigT_co: ...


def parse_over_preset(
    description: str, argv: Sequence[str] | None, extra: argparse.ArgumentParser, presets: Presets[ConfigT_co]
) -> tuple[RunSettings, argparse.Namespace, ConfigT_co]:
    """The common flags, ``extra``'s own flags and the preset ``--quick`` picks, for the caller to apply them over.

    ``extra`` (built with ``add_help=False``) takes its flags out of ``argv`` first and the rest go to
    ``common_arguments``, so ``--help`` lists the common flags only; the module docstring tells the others."""
    known, rest = extra.parse_known_args(argv)
    settings = common_arguments(description, rest)
    return settings, known, presets.quick() if settings.quick else presets()


def choices_list(text: str, choices: Sequence[str], flag: str) -> tuple[str, ...]:
    """A comma-separated command-line list whose items must all be in ``choices`` (else a clear exit)."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = sorted(set(items) - set(choices))
    if unknown or not items:
        raise SystemExit(f"{flag}: unknown {unknown or 'empty list'}; choose from {', '.join(choices)}")
    return items


def positive(text: str, flag: str, kind: type[int] | type[float] = int, least: float = 1) -> Any:
    """``text`` as a number of at least ``least``, or a clear exit naming ``flag``."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise SystemExit(f"{flag} must be a number of at least {least:g}, got {text!r}")
    return value


def sizes_list(text: str, flag: str = "--sizes") -> tuple[int, ...]:
    """Comma-separated cluster sizes (each at least 2), or a clear exit naming ``flag``."""
    sizes = tuple(positive(size, flag, least=2) for size in text.split(",") if size.strip())
    if not sizes:
        raise SystemExit(f"{flag} must list cluster sizes of at least 2, comma-separated (e.g. 5,10,20), got {text!r}")
    return sizes


# --- statistics ------------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile with linear interpolation (numpy's default method)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, p95, p99, mean, min, max and count of ``samples`` (NaN when there are none)."""
    if not samples:
        return {"n": 0, "median": math.nan, "p95": math.nan, "p99": math.nan, "mean": math.nan}
    return {
        "n": len(samples),
        "median": statistics.median(samples),
        "p95": percentile(samples, 0.95),
        "p99": percentile(samples, 0.99),
        "mean": statistics.fmean(samples),
        "min": min(samples),
        "max": max(samples),
    }


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when either is missing or the denominator is zero."""
    if not denominator or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return numerator / denominator


# --- machine and results ---------------------------------------------------------------


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    """The facts a reader needs to compare runs: CPU, cores, memory, Python, package versions, load."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_mb = math.nan
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = round(int(line.split()[1]) / 1024)
    versions: dict[str, str] = {}
    for package in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_mb": memory_mb,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "packages": versions,
        "git_commit": _git_commit(),
        "load_average_1_5_15": load_average(),
    }


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class Recorder:
    """Collects one benchmark run: config, machine before/after, and whatever results it adds."""

    def __init__(self, name: str, settings: RunSettings, config: Mapping[str, Any]) -> None:
        self.name = name
        self.settings = settings
        self.started = datetime.now(UTC)
        self.payload: dict[str, Any] = {
            "benchmark": name,
            "command": command_line(name, settings.quick),
            "quick": settings.quick,
            "config": dict(config),
            "machine": machine_info(),
        }

    def write(self, results: Mapping[str, Any]) -> Path:
        """Write ``NAME.json`` with ``results`` added; returns its path."""
        self.payload["results"] = results
        self.payload["started_utc"] = self.started.isoformat(timespec="seconds")
        self.payload["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.payload["load_average_after"] = load_average()
        path = self.settings.result_path(self.name, ".json")
        path.write_text(json.dumps(self.payload, indent=1, sort_keys=False, default=_json_default, allow_nan=True))
        return path

    @property
    def plot_path(self) -> Path:
        return self.settings.result_path(self.name, ".png")


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def run_benchmark(
    name: str,
    settings: RunSettings,
    config: Any,
    measure: Callable[[], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
    plot: Callable[[dict[str, Any], Path], None],
    extra_config: Mapping[str, Any] | None = None,
) -> int:
    """Measure, print the table, draw the plot and write the JSON (config = the dataclass ``config``).

    SIGTERM unwinds the measurement like Ctrl-C (``KeyboardInterrupt``), so the servers and silo
    processes it started are stopped by their ``finally`` blocks instead of outliving it (they did
    when a run was stopped with ``kill`` or a timeout)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    recorder = Recorder(name, settings, {**dataclasses.asdict(config), **(extra_config or {})})
    results = measure()
    written = recorder.write(results)  # before the report and plot: an interrupt there keeps the figures
    report(results)
    plot(results, recorder.plot_path)
    print(f"\nwrote {written} and {recorder.plot_path}")
    return 0


def benchmark_main(
    name: str,
    doc: str | None,
    argv: Sequence[str] | None,
    config_type: Any,
    measure: Callable[[Any], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
    plot: Callable[[dict[str, Any], Path], None],
    extra_config: Mapping[str, Any] | None = None,
) -> int:
    """A benchmark's ``main``: parse ``--quick``, pick ``config_type.quick()`` or ``config_type()``, run."""
    settings = common_arguments(doc or name, argv)
    config = config_type.quick() if settings.quick else config_type()
    return run_benchmark(name, settings, config, lambda: measure(config), report, plot, extra_config)


def command_line(name: str, quick: bool) -> str:
    return f"python -m benchmarks.{name}" + (" --quick" if quick else "")


# --- output ------------------------------------------------------------------------------


def fmt(value: float, digits: int = 3) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` as aligned columns under ``title`` (floats shortened by ``fmt``)."""
    cells = [[fmt(cell) if isinstance(cell, float) else str(cell) for cell in row] for row in rows]
    widths = [max([len(str(header)), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(str(header).ljust(width) for header, width in zip(headers, widths, strict=True)))
    print("  ".join("-" * width for width in widths))
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    sys.stdout.flush()


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path) -> None:
    """Lay out, write and release a plot (every benchmark's PNG uses the same settings)."""
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot().close(figure)


def grouped_bars(
    axis: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str, log: bool = False
) -> None:
    """Bars of each series side by side per group (NaN bars are left out)."""
    count = max(len(series), 1)
    width = 0.8 / count
    for index, (label, values) in enumerate(series.items()):
        positions = [group + (index - (count - 1) / 2) * width for group in range(len(groups))]
        axis.bar(positions, [0.0 if math.isnan(v) else v for v in values], width, label=label)
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    if log:
        axis.set_yscale("log")
    else:
        axis.set_ylim(0, axis.get_ylim()[1] * 1.45)  # headroom: the legend sits above the bars
    axis.legend(fontsize=7, ncol=2, loc="upper left")
    axis.grid(axis="y", alpha=0.3)


# --- temp dirs and timing -----------------------------------------------------------------


@contextlib.contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A temp directory removed afterwards, whatever happens (benchmarks leave nothing behind),
    unless ``SILO_BENCH_KEEP=1``: then it is kept, with the silos' logs, and its path printed."""
    path = Path(tempfile.mkdtemp(prefix=f"silo-bench-{prefix}-"))
    try:
        yield path
    finally:
        if os.environ.get("SILO_BENCH_KEEP") == "1":
            print(f"[{prefix}] kept {path} (SILO_BENCH_KEEP=1): delete it when done", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def wall() -> float:
    """Wall-clock seconds since the epoch: comparable with the times silos write into the table."""
    return time.time()
