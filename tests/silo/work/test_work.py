"""Handler specs (``NAME=module:function``) and the handler registry."""

from __future__ import annotations

import pytest

from silo.errors import OptionsError
from silo.work.handlers import BUILTIN_HANDLERS, CHECKSUM_HANDLER
from silo.work.registry import HandlerRegistry, HandlerSpecError, load_handler, split_handler_spec
from tests.silo import work_handlers

MODULE = "tests.silo.work_handlers"


def test_a_spec_names_the_handler_its_module_and_function() -> None:
    assert split_handler_spec(f" rev = {MODULE}:reverse ") == ("rev", MODULE, "reverse")
    assert load_handler(f"rev={MODULE}:reverse") == ("rev", work_handlers.reverse)


@pytest.mark.parametrize("spec", ["rev", f"rev={MODULE}", f"={MODULE}:reverse", "rev=:reverse", f"rev={MODULE}:"])
def test_a_malformed_spec_says_what_shape_is_expected(spec: str) -> None:
    with pytest.raises(HandlerSpecError, match="expected NAME=module:function"):
        split_handler_spec(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x=no_such_module_anywhere:f", "cannot import module 'no_such_module_anywhere' (ModuleNotFoundError"),
        ("x=tests.silo.broken_handler_module:f", "ImportError: this module is broken on purpose"),
        (f"x={MODULE}:missing", f"module '{MODULE}' has no attribute 'missing'"),
        (f"x={MODULE}:NOT_A_FUNCTION", "is not callable"),
    ],
)
def test_a_spec_that_cannot_be_loaded_fails_with_the_reason(spec: str, message: str) -> None:
    with pytest.raises(HandlerSpecError) as failure:
        load_handler(spec)
    assert message in str(failure.value)
    assert isinstance(failure.value, OptionsError), "the CLI maps OptionsError to exit code 2"


def test_a_registry_always_holds_the_builtins_plus_the_registered_handlers() -> None:
    registry = HandlerRegistry.from_specs([f"rev={MODULE}:reverse", f"crash={MODULE}:crash"])
    assert registry.names == tuple(sorted({*BUILTIN_HANDLERS, "rev", "crash"}))
    assert registry.get("rev") is work_handlers.reverse
    assert registry.get(CHECKSUM_HANDLER) is BUILTIN_HANDLERS[CHECKSUM_HANDLER]
    assert registry.get("nosuch") is None


@pytest.mark.parametrize("name", ["rev", CHECKSUM_HANDLER])
def test_a_name_is_registered_once(name: str) -> None:
    registry = HandlerRegistry({"rev": work_handlers.reverse})
    with pytest.raises(HandlerSpecError, match="registered twice"):
        registry.register(name, work_handlers.crash)


def test_an_empty_name_is_refused() -> None:
    with pytest.raises(HandlerSpecError, match="must not be empty"):
        HandlerRegistry({" ": work_handlers.reverse})
