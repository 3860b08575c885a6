"""The old import path of the silo options; they live in ``silo.membership.options``."""

from silo.membership.options import PRESETS, OptionsError, SiloOptions, parse_duration

__all__ = ["PRESETS", "OptionsError", "SiloOptions", "parse_duration"]
