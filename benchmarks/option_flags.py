"""``--set NAME=VALUE``: silo options over the local preset, for the benchmarks that start silos.

The pairs stay pairs from the command line to the silos' own ``--set`` flags and the JSON, and a
bad one stops the benchmark before any silo starts.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from silo.cli.arguments import key_value, repeatable
from silo.membership.options import SiloOptions

OptionPairs = tuple[tuple[str, str], ...]


def add_set_flag(parser: argparse.ArgumentParser, dest: str) -> None:
    """``--set OPTION=VALUE`` (repeatable) into ``dest``, as ``(name, value)`` pairs."""
    repeatable(parser, "--set", dest, key_value("OPTION", "probe_timeout=5s"), "OPTION=VALUE", "silo option")


def local_options_with(pairs: Iterable[tuple[str, str]]) -> SiloOptions:
    """The local preset with ``pairs`` applied: what the silos run (a clear exit naming ``--set`` if one is bad)."""
    try:
        return SiloOptions.local().with_overrides(dict(pairs))
    except ValueError as exc:
        raise SystemExit(f"--set: {exc}") from None


def set_flags(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The ``--set NAME=VALUE`` arguments that give a silo (or a silo host) ``pairs``."""
    return [argument for name, value in pairs for argument in ("--set", f"{name}={value}")]
