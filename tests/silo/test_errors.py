from __future__ import annotations

import pytest

from membership_tables import SiloAddress
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
