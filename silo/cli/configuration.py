"""Every option of ``silo run``, ``status``, ``dashboard``, ``kill`` and ``cleanup`` from a flag, a
``SILO_*`` environment variable or a TOML file, with one precedence: flag > environment > file >
default (the preset's, for the silo's options).

Nothing here lists options by hand: the settings are derived from the command's argparse
parser, so a flag added to a command is configurable the moment it exists. For a flag
``--gateway-port`` the environment variable is ``SILO_GATEWAY_PORT`` and the file key
``gateway_port`` (``gateway-port`` is accepted too); ``SILO_<COMMAND>_<KEY>`` (``SILO_DASHBOARD_PORT``)
sets an option of one command only and wins over ``SILO_<KEY>``, which every command that has
the option reads (``run`` and ``dashboard`` both have ``--port``). The file (``--config PATH`` or
``SILO_CONFIG``) holds keys for every command at its top level and keys for one command in a
table named after it (``[run]``), which win over the top level. A repeatable flag
(``--property``) takes its values from the first source that gives any: flags replace the
environment's list, which replaces the file's (comma-separated in the environment; a TOML array,
or a TOML table for ``KEY=VALUE`` flags, in the file). A switch (``--insecure``) is ``true`` or
``false`` in the file and ``1/true/yes/on`` or ``0/false/no/off`` in the environment.

Resolution turns the environment's and the file's values into the flags they stand for and lets
argparse parse them with the command line, so every value is checked by the same code whatever
its source; a bad one is reported with the variable or file key it came from.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from silo.errors import OptionsError

CONFIGURED_COMMANDS = ("run", "status", "dashboard", "kill", "cleanup")
"""The commands whose options may come from the environment and a file."""

ENV_PREFIX = "SILO_"
CONFIG_DEST = "config"
"""The ``--config PATH`` flag (``SILO_CONFIG``): where the file is, so not a setting of it."""
_NOT_SETTINGS = frozenset({"help", "version", CONFIG_DEST})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True)
class Setting:
    """One option of a command, and its names in each source."""

    action: argparse.Action

    @property
    def dest(self) -> str:
        return self.action.dest

    @property
    def flag(self) -> str:
        return max(self.action.option_strings, key=len)

    @property
    def key(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper()

    def env_of(self, command: str) -> str:
        """The variable for ``command`` alone (``SILO_DASHBOARD_PORT``), which wins over ``env``."""
        return f"{ENV_PREFIX}{command.upper()}_{self.key.upper()}"

    @property
    def repeatable(self) -> bool:
        return isinstance(self.action, argparse._AppendAction)

    @property
    def switch(self) -> bool:
        return self.action.nargs == 0 and self.action.const is True


def settings_of(parser: argparse.ArgumentParser) -> list[Setting]:
    """The options of one command's parser that a source other than the command line may give."""
    return [
        Setting(action)
        for action in parser._actions
        if action.option_strings and action.dest not in _NOT_SETTINGS and (action.nargs != 0 or action.const is True)
    ]


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers of the ``silo`` parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@dataclass(frozen=True)
class Resolved:
    """Parsed arguments and where each configurable value came from."""

    args: argparse.Namespace
    settings: tuple[Setting, ...]
    sources: Mapping[str, str]
    """dest -> ``flag --x``, ``env SILO_X``, ``file PATH``, or ``default``."""


def resolve(
    build_parser: Callable[[], argparse.ArgumentParser],
    argv: Sequence[str],
    environ: Mapping[str, str] = os.environ,
) -> Resolved:
    """Parse ``argv`` with the environment's and the file's values filled in where no flag gave one.

    Argparse errors exit 2 as usual; a bad value from the environment or the file raises
    ``OptionsError`` naming its source.
    """
    argv = list(argv)
    given = _given_on_command_line(build_parser(), argv)
    parser = build_parser()
    command = given.get("command")
    if command not in CONFIGURED_COMMANDS:
        return Resolved(parser.parse_args(argv), (), {})
    parsers = command_parsers(parser)
    settings = settings_of(parsers[command])
    path = given.get(CONFIG_DEST) or environ.get(ENV_PREFIX + CONFIG_DEST.upper()) or None
    from_file = _file_values(path, command, parsers) if path else {}
    tokens: list[str] = []
    sources: dict[str, str] = {}
    for setting in settings:
        if setting.dest in given:
            sources[setting.dest] = f"flag {setting.flag}"
        elif variable := next((name for name in (setting.env_of(command), setting.env) if name in environ), None):
            source = f"environment variable {variable}"
            tokens += _tokens(setting, _env_value(setting, environ[variable], source), source)
            sources[setting.dest] = f"env {variable}"
        elif setting.key in from_file:
            source = f"key {setting.key} of {path}"
            tokens += _tokens(setting, from_file[setting.key], source)
            sources[setting.dest] = f"file {path}"
        elif setting.action.required:
            raise OptionsError(
                f"silo {command} needs {setting.flag}: give it, or set {setting.env}, "
                f"or {setting.key} in a --config file"
            )
        else:
            sources[setting.dest] = "default"
    at = argv.index(command) + 1
    args = parser.parse_args([*argv[:at], *tokens, *argv[at:]])
    return Resolved(args, tuple(settings), sources)


def _given_on_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """The dests the command line itself sets: a parse with every default suppressed and nothing required."""
    for sub in command_parsers(parser).values():
        for action in sub._actions:
            action.default = argparse.SUPPRESS
            action.required = action.required and not action.option_strings
    return vars(parser.parse_args(argv))


def _env_value(setting: Setting, text: str, source: str) -> object:
    if setting.switch:
        if text.strip().lower() in _TRUE:
            return True
        if text.strip().lower() in _FALSE:
            return False
        raise OptionsError(
            f"{source} is {text!r}; {setting.flag} is a switch: set it to 1/true/yes/on or 0/false/no/off"
        )
    if setting.repeatable:
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def _tokens(setting: Setting, value: object, source: str) -> list[str]:
    """The flags that ``value`` (from ``source``) stands for, each value checked as argparse would."""
    if setting.switch:
        if not isinstance(value, bool):
            raise OptionsError(f"{source} must be true or false ({setting.flag} is a switch), got {value!r}")
        return [setting.flag] if value else []
    if setting.repeatable:
        if isinstance(value, Mapping):
            values = [f"{key}={_scalar(item, source)}" for key, item in value.items()]
        elif isinstance(value, list):
            values = [_scalar(item, source) for item in value]
        else:
            values = [_scalar(value, source)]
    else:
        values = [_scalar(value, source)]
    for text in values:
        _check(setting, text, source)
    return [f"{setting.flag}={text}" for text in values]


def _scalar(value: object, source: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise OptionsError(f"{source} must be a string or a number, got {value!r}")
    return str(value)


def _check(setting: Setting, text: str, source: str) -> None:
    action = setting.action
    value: object = text
    if callable(action.type):
        try:
            value = action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError, OptionsError) as exc:
            raise OptionsError(f"{source} ({setting.flag}): {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise OptionsError(f"{source} ({setting.flag}) is {text!r}; choose one of {choices}")


def _file_values(path: str, command: str, parsers: Mapping[str, argparse.ArgumentParser]) -> dict[str, object]:
    """The file's values for ``command``: its top level, then its ``[command]`` table; unknown keys refused."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise OptionsError(f"cannot read the configuration file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise OptionsError(f"the configuration file {path} is not valid TOML: {exc}") from None
    known = {name: {s.key for s in settings_of(parsers[name])} for name in CONFIGURED_COMMANDS}
    anywhere = set().union(*known.values())
    values: dict[str, object] = {}
    for key, value in document.items():
        if key in CONFIGURED_COMMANDS:
            if not isinstance(value, dict):
                raise OptionsError(f"[{key}] in {path} must be a table of {key}'s options")
            continue
        _check_key(_normal(key), anywhere, path, "")
        values[_normal(key)] = value
    for name in CONFIGURED_COMMANDS:  # every table is checked, so a typo shows whichever command runs
        for key, value in document.get(name, {}).items():
            _check_key(_normal(key), known[name], path, f"[{name}] ")
            if name == command:
                values[_normal(key)] = value
    return {key: value for key, value in values.items() if key in known[command]}


def _normal(key: str) -> str:
    return key.replace("-", "_")


def _check_key(key: str, known: set[str], path: str, where: str) -> None:
    if key not in known:
        raise OptionsError(f"unknown key {where}{key} in {path}; known keys: {', '.join(sorted(known))}")


def render(resolved: Resolved, extra: Sequence[tuple[str, str, str]] = ()) -> str:
    """The effective settings as TOML with each one's source as a comment (secrets not redacted here).

    ``extra`` adds ``(key, shown value, source)`` lines for values that are not flags (the table password).
    """
    lines = []
    for setting in resolved.settings:
        value = getattr(resolved.args, setting.dest, None)
        source = resolved.sources.get(setting.dest, "default")
        if value is None or value == []:
            lines.append(f"# {setting.key} is not set ({source})")
        else:
            lines.append(f"{setting.key} = {_toml(value)}  # {source}")
    lines.extend(f"{key} = {value}  # {source}" for key, value, source in extra)
    return "\n".join(lines)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):  # a parsed KEY=VALUE flag
        return json.dumps("=".join(map(str, value)))
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(str(value) if not isinstance(value, str) else value)


def reference(build_parser: Callable[[], argparse.ArgumentParser]) -> str:
    """The configuration reference of docs/operations.md: a Markdown table per command."""
    parsers = command_parsers(build_parser())
    sections = []
    for command in CONFIGURED_COMMANDS:
        rows = [f"### `silo {command}`", "", "| flag | environment | file key | meaning |", "| --- | --- | --- | --- |"]
        for setting in settings_of(parsers[command]):
            meaning = (setting.action.help or "").replace("|", "\\|").replace("%%", "%")
            note = " (repeatable)" if setting.repeatable and "repeatable" not in meaning else ""
            rows.append(f"| `{setting.flag}` | `{setting.env}` | `{setting.key}` | {meaning}{note} |")
        sections.append("\n".join(rows))
    return "\n\n".join(sections) + "\n"
