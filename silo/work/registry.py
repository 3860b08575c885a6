"""The work handlers a silo serves by name, and ``NAME=module:function`` handler specs.

``silo run --handler NAME=module:function`` (repeatable) and Python code
(``MembershipServer(..., handlers=HandlerRegistry({...}))`` or ``server.handlers.register``)
fill a ``HandlerRegistry``; the ``Work`` gRPC service looks handlers up in it. Every registry
starts with ``silo.work.handlers.BUILTIN_HANDLERS`` (e.g. ``example.checksum``).

A handler is ``handler(items: Sequence[tuple[str, bytes]]) -> Sequence[bytes]``: one result
per item, same order; or a columnar handler (``@silo.work.handlers.columnar``) taking a
``pyarrow.RecordBatch``. It runs in a worker thread, never on the event loop, so it may block.
Delivery is at-least-once: handlers must be idempotent.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping

from silo.errors import OptionsError
from silo.work.handlers import BUILTIN_HANDLERS, Handler

__all__ = ["HandlerRegistry", "HandlerSpecError", "load_handler", "split_handler_spec"]

SPEC_EXAMPLE = "NAME=module:function, e.g. wordcount=myjobs.handlers:count_words"


class HandlerSpecError(OptionsError):
    """A ``--handler`` spec is malformed, names a module that fails to import, or not a function."""


def split_handler_spec(text: str) -> tuple[str, str, str]:
    """``NAME=module:function`` as ``(name, module, function)``; raises ``HandlerSpecError``."""
    name, equals, target = text.partition("=")
    module, colon, function = target.partition(":")
    name, module, function = name.strip(), module.strip(), function.strip()
    if not (equals and colon and name and module and function):
        raise HandlerSpecError(f"bad handler spec {text!r}: expected {SPEC_EXAMPLE}")
    return name, module, function


def load_handler(text: str) -> tuple[str, Handler]:
    """Import the function a ``NAME=module:function`` spec names; raises ``HandlerSpecError``."""
    name, module_name, function_name = split_handler_spec(text)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import runs arbitrary code: any failure means "cannot load"
        raise HandlerSpecError(
            f"handler {name!r}: cannot import module {module_name!r} ({type(exc).__name__}: {exc}); "
            "make it importable (PYTHONPATH) or fix the spec"
        ) from exc
    function = getattr(module, function_name, None)
    if function is None:
        raise HandlerSpecError(f"handler {name!r}: module {module_name!r} has no attribute {function_name!r}")
    if not callable(function):
        raise HandlerSpecError(f"handler {name!r}: {module_name}:{function_name} is not callable")
    handler: Handler = function
    return name, handler


class HandlerRegistry:
    """Handlers by name: the built-ins plus the ones registered; a name is registered once."""

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = dict(BUILTIN_HANDLERS)
        for name, handler in (handlers or {}).items():
            self.register(name, handler)

    @classmethod
    def from_specs(cls, specs: Iterable[str]) -> HandlerRegistry:
        """The built-ins plus one handler per ``NAME=module:function`` spec."""
        registry = cls()
        for spec in specs:
            registry.register(*load_handler(spec))
        return registry

    def register(self, name: str, handler: Handler) -> None:
        """Serve ``handler`` as ``name``; raises ``HandlerSpecError`` if the name is empty or taken."""
        if not name or not name.strip():
            raise HandlerSpecError("a handler name must not be empty")
        if not callable(handler):
            raise HandlerSpecError(f"handler {name!r} is not callable: {handler!r}")
        if name in self._handlers:
            raise HandlerSpecError(f"handler {name!r} is registered twice; give each handler its own name")
        self._handlers[name] = handler

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._handlers))
