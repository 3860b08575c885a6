from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import membership_tables
import silo
from membership_tables import SiloAddress
from membership_tables.errors import MembershipTableError
from silo.errors import (
    DeclaredDeadError,
    JoinError,
    OptionsError,
    SiloError,
    TableAccessDeniedError,
    TableUnavailableAtStartError,
)
from silo.exit_codes import ExitCode


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (OptionsError, ExitCode.BAD_CONFIGURATION),
        (TableAccessDeniedError, ExitCode.BAD_CONFIGURATION),
        (JoinError, ExitCode.JOIN_FAILED),
        (TableUnavailableAtStartError, ExitCode.TABLE_UNAVAILABLE_AT_START),
        (DeclaredDeadError, ExitCode.DECLARED_DEAD),
    ],
)
def test_every_error_derives_from_the_root_and_maps_to_an_exit_code(error: type[SiloError], code: ExitCode) -> None:
    assert issubclass(error, SiloError)
    assert error.exit_code is code


def test_exit_codes_are_the_documented_numbers() -> None:
    assert [int(code) for code in ExitCode] == [0, 2, 3, 4, 5]


def test_join_error_carries_the_unreachable_silos() -> None:
    silo = SiloAddress("127.0.0.1", 11111, 1)
    assert JoinError("cannot reach", [silo]).unreachable == (silo,)


def _public_exceptions() -> list[type[BaseException]]:
    """Every public exception class defined in ``silo`` and ``membership_tables``."""

    found: list[type[BaseException]] = []
    for package in (silo, membership_tables):
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".proto" in module_info.name or module_info.name.endswith("__main__"):
                continue
            module = importlib.import_module(module_info.name)
            found += [
                value
                for name, value in vars(module).items()
                if inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ]
    return found


def test_every_exception_has_one_of_the_two_roots_and_is_drawn_in_its_tree() -> None:
    root = Path(__file__).resolve().parents[2]
    trees = {
        SiloError: (root / "silo" / "errors.py").read_text(),
        MembershipTableError: (root / "membership_tables" / "errors.py").read_text(),
    }
    exceptions = _public_exceptions()
    assert len(exceptions) > 40  # the walk sees the whole tree
    outside = [error.__qualname__ for error in exceptions if not issubclass(error, tuple(trees))]
    assert not outside, f"exceptions outside SiloError and MembershipTableError: {outside}"
    undrawn = [
        f"{error.__module__}.{error.__qualname__}"
        for error in exceptions
        for root_error, tree in trees.items()
        if issubclass(error, root_error) and f" {error.__qualname__} " not in tree.replace("\n", " ")
    ]
    assert not undrawn, f"draw these in their root's errors.py docstring: {undrawn}"
