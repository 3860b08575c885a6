"""Argument parsing helpers shared by the ``silo`` commands (``run``, ``status``, ``demo``).

A leaf module: the commands and the demo both import it, so neither imports the other.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from silo.errors import OptionsError
from silo.membership.options import parse_duration
from silo.work.registry import HandlerSpecError, split_handler_spec

MAX_PORT = 65535


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port must be in 0..{MAX_PORT}, got {port}")
    return port


def repeatable(
    parser: argparse.ArgumentParser, flag: str, dest: str, parse: Callable[[str], object], metavar: str, help_text: str
) -> None:
    """A flag that may be given several times; its values collect in the list ``dest``."""
    parser.add_argument(
        flag, dest=dest, action="append", default=[], type=parse, metavar=metavar, help=f"{help_text} (repeatable)"
    )


def key_value(key: str, example: str) -> Callable[[str], tuple[str, str]]:
    """A parser of ``KEY=VALUE`` arguments (surrounding spaces dropped)."""

    def parse(text: str) -> tuple[str, str]:
        name, equals, value = text.partition("=")
        if not equals or not name.strip():
            raise argparse.ArgumentTypeError(f"expected {key}=VALUE, e.g. {example}, got {text!r}")
        return name.strip(), value.strip()

    return parse


def handler_spec(text: str) -> str:
    """Check the shape of ``NAME=module:function`` now; the module is imported by ``silo run``."""
    try:
        split_handler_spec(text)
    except HandlerSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def duration(text: str) -> float:
    """A positive duration such as ``500ms`` or ``2s`` (``silo.membership.options.parse_duration``), in seconds."""
    try:
        seconds = parse_duration(text)
    except OptionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return seconds
