"""The plumbing of a gRPC service of a silo: decoding requests, refusing bad ones, aborting calls.

Shared by the Membership service (``silo.wire.server``) and the Work service
(``silo.work.service``): a request that cannot be decoded is refused with ``INVALID_ARGUMENT``
(gRPC itself would answer ``INTERNAL``), and a caller's strings are clipped before they reach a
log line or an error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from silo.wire import codec
from silo.wire.peer_identity import PeerIdentity, identity_from_sans

__all__ = [
    "SHOWN_CHARACTERS",
    "Undecodable",
    "abort",
    "bidi",
    "clip",
    "decoded_stream",
    "decoder",
    "peer_identity",
    "refuse",
    "refuse_undecodable",
    "unary",
]

log = logging.getLogger(__name__)


class Undecodable:
    """What ``decoder`` hands the server for bytes that are not the method's request message."""

    def __init__(self, method: str, error: DecodeError) -> None:
        self.details = f"the request is not a valid {method} request message ({error}); send a {method} request"


def decoder(
    method: codec.Method[Any, Any] | codec.StreamMethod[Any, Any] | codec.BidiStreamMethod[Any, Any],
) -> Callable[[bytes], Any]:
    """The request deserializer: an ``Undecodable`` instead of the exception gRPC would answer INTERNAL to."""

    def decode(data: bytes) -> Any:
        try:
            return method.request.FromString(data)
        except DecodeError as exc:
            return Undecodable(method.name, exc)

    return decode


async def refuse_undecodable(request: object, context: Any) -> None:
    if isinstance(request, Undecodable):
        await refuse(request, context)


async def refuse(request: Undecodable, context: Any) -> NoReturn:
    log.warning("refused an undecodable request: %s", request.details)
    await abort(context, grpc.StatusCode.INVALID_ARGUMENT, request.details)


SHOWN_CHARACTERS = 160
"""How much of a caller's string (cluster id, sender, handler name) a log line or an error
repeats: more than any valid value, so a clipped one never matches, and one hostile request
cannot write megabytes into the log."""


def clip(text: str) -> str:
    """``text``, or its first ``SHOWN_CHARACTERS`` and how long it was."""
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters)"


def unary(method: codec.Method[codec.Request, codec.Response], behaviour: Callable[..., Awaitable[Any]]) -> Any:
    async def serve(request: Any, context: Any) -> Any:
        await refuse_undecodable(request, context)
        return await behaviour(request, context)

    return grpc.unary_unary_rpc_method_handler(
        serve,
        request_deserializer=decoder(method),
        response_serializer=method.response.SerializeToString,
    )


def bidi(method: codec.BidiStreamMethod[Any, Any], behaviour: Callable[..., AsyncIterator[Any]]) -> Any:
    return grpc.stream_stream_rpc_method_handler(
        behaviour,
        request_deserializer=decoder(method),
        response_serializer=method.response.SerializeToString,
    )


def decoded_stream(behaviour: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def serve(request: Any, context: Any) -> AsyncIterator[Any]:
        await refuse_undecodable(request, context)
        async for response in behaviour(request, context):
            yield response

    return serve


async def abort(context: Any, code: grpc.StatusCode, details: str) -> NoReturn:
    await context.abort(code, details)
    raise AssertionError("unreachable: abort raises")


def peer_identity(context: Any) -> PeerIdentity | None:
    """The verified certificate's identity; None if the call came without one."""
    auth = context.auth_context()
    if not auth.get("x509_pem_cert"):
        return None
    names = auth.get("x509_subject_alternative_name", [])
    return identity_from_sans(name.decode(errors="replace") for name in names)
