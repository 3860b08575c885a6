"""Calls of one endpoint over one long-lived bidirectional stream (``StreamedCalls``, for ``GrpcProber``).

Probing is most of an idle silo's CPU and gossip most of a changing one's, and a unary gRPC call
costs the two silos about three times the CPU of one message on a stream that is already open
(0.30 ms against 0.09 ms on the server, plaintext, grpcio 1.85). So a prober keeps one stream per
endpoint for each of them (``PingStream``, ``GossipStream``): each call writes a request with a
fresh ``sequence`` and waits for the response that echoes it. One reader task per stream hands
every response to the call waiting for its sequence; an answer that comes after its call gave up is
dropped. When the stream fails, every call waiting on it gets that error, and the next call opens a
new stream. A peer without the streaming RPC (UNIMPLEMENTED: an older silo) gets the unary one.

The first ``unary_calls_first`` calls of an endpoint are unary: a stream pays off only for the
endpoints called again and again (the silos we monitor, the heads of our gossip arcs), not for
one-off calls (a joining silo pings up to ``max_join_validation_pings`` silos once each; an
indirect probe pings a target once). A stream unused for ``IDLE_CLOSE_SECONDS`` is closed: gossip
to a peer can be rare, and an open stream holds a task and buffers on both silos.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc

from silo.errors import SiloError
from silo.membership.background import BackgroundTasks
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb

log = logging.getLogger(__name__)

UNARY_CALLS_FIRST = 2
"""Calls of an endpoint sent as unary calls before its stream is opened. In a 500-silo join storm,
a stream opened (and closed again when the channel pool evicted the channel) for each validation
ping was a large share of the joiners' CPU."""

STREAM_RETRY_SECONDS = 60.0
"""After a peer answered UNIMPLEMENTED, its endpoint gets unary calls this long, then the stream is
tried again (a rolling upgrade may have put a newer silo at the same endpoint)."""

IDLE_CLOSE_SECONDS = 120.0
"""A stream no call used for this long is closed (the next call opens a new one)."""

Request = TypeVar("Request", pb.PingRequest, pb.GossipRequest)
Response = TypeVar("Response", pb.PingResponse, pb.GossipResponse)


class StreamEndedError(SiloError, ConnectionError):
    """The stream ended (closed by this side, or by the peer without an error) before the answer."""


class _Stream(Generic[Request, Response]):
    """One bidirectional call and the calls waiting on it, by sequence."""

    def __init__(
        self,
        call: codec.BidiCall[Request, Response],
        response_type: type[Response],
        readers: BackgroundTasks,
    ) -> None:
        self._call: codec.BidiCall[Request, Response] = call
        self._response_type: type[Response] = response_type
        self._write_lock = asyncio.Lock()
        """grpc.aio allows one write at a time on a call."""
        self._waiting: dict[int, asyncio.Future[Response | BaseException]] = {}
        self._reader = readers.spawn(self._read())

    @property
    def broken(self) -> bool:
        return self._call.done() or self._reader.done()

    @property
    def idle(self) -> bool:
        return not self._waiting

    async def ask(self, request: Request) -> Response:
        """The answer to ``request``; raises the stream's error if it fails first.

        The caller checks ``broken`` just before (no await in between): the reader then still
        runs, and settles this call's future whatever happens to the stream.
        """
        answer: asyncio.Future[Response | BaseException] = asyncio.get_running_loop().create_future()
        self._waiting[request.sequence] = answer
        try:
            try:
                async with self._write_lock:
                    await self._call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the call has ended: the reader hands every waiting call its status
            outcome = await answer
        finally:
            del self._waiting[request.sequence]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def close(self) -> None:
        self._call.cancel()
        self._reader.cancel()

    async def _read(self) -> None:
        ending: BaseException = StreamEndedError("the peer ended the stream")
        try:
            while isinstance(response := await self._call.read(), self._response_type):
                answer = self._waiting.get(response.sequence)
                if answer is not None and not answer.done():
                    answer.set_result(response)
                # else: a late answer to a call that gave up, dropped
        except grpc.aio.AioRpcError as exc:
            ending = exc
        except asyncio.CancelledError:
            ending = StreamEndedError("the stream was closed")
            raise
        finally:
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_result(ending)


class StreamedCalls(Generic[Request, Response]):
    """Calls of one method to one endpoint on one channel: over its streaming twin (reopened after
    it breaks, closed when idle), or the unary method for a peer without it."""

    def __init__(
        self,
        endpoint: str,
        channel: Any,
        stream: codec.BidiStreamMethod[Request, Response],
        unary: codec.Method[Request, Response],
        readers: BackgroundTasks,
        *,
        unary_calls_first: int = UNARY_CALLS_FIRST,
    ) -> None:
        self.channel = channel
        self._endpoint = endpoint
        self._readers = readers
        self._stream_method: codec.BidiStreamMethod[Request, Response] = stream
        self._open: Callable[[], codec.BidiCall[Request, Response]] = stream.bind(channel)
        self._unary_method: codec.Method[Request, Response] = unary
        self._unary: Callable[..., Awaitable[Response]] = unary.bind(channel)
        self._stream: _Stream[Request, Response] | None = None
        self._unary_until = -math.inf
        self._unary_calls_left = unary_calls_first
        self._retiring = False
        self._last_call = -math.inf
        self._idle_timer: asyncio.TimerHandle | None = None

    async def call(self, request: Request, timeout: float) -> Response:
        """The answer within ``timeout``: raises ``TimeoutError``, ``StreamEndedError`` or ``grpc.aio.AioRpcError``."""
        loop = asyncio.get_running_loop()
        if self._unary_calls_left > 0 and self._stream is None:
            self._unary_calls_left -= 1
            return await self._unary(request, timeout=timeout)
        if loop.time() < self._unary_until:
            return await self._unary(request, timeout=timeout)
        deadline = loop.time() + timeout
        self._last_call = loop.time()
        try:
            async with asyncio.timeout_at(deadline):
                return await self._current_stream().ask(request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        finally:
            if self._retiring and self._idle:
                self.close()
        if loop.time() >= self._unary_until:  # once, not for every call that was waiting on the stream
            log.info(
                "%s does not serve %s (an older silo?): calling %s unary for the next %.0f s",
                self._endpoint,
                self._stream_method.name,
                self._unary_method.name,
                STREAM_RETRY_SECONDS,
            )
            self._unary_until = loop.time() + STREAM_RETRY_SECONDS
        return await self._unary(request, timeout=max(deadline - loop.time(), 0.0))

    def retire(self) -> None:
        """Close the stream once the calls waiting on it are done (the channel is being replaced)."""
        self._retiring = True
        if self._idle:
            self.close()

    def close(self) -> None:
        """Close the stream now: calls waiting on it end with ``StreamEndedError``."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    @property
    def _idle(self) -> bool:
        return self._stream is None or self._stream.idle

    def _current_stream(self) -> _Stream[Request, Response]:
        if self._stream is None or self._stream.broken:
            # a broken stream is left to its reader: it hands the calls still waiting the stream's error
            self._stream = _Stream(self._open(), self._stream_method.response, self._readers)
            if self._idle_timer is None:
                self._idle_timer = asyncio.get_running_loop().call_later(IDLE_CLOSE_SECONDS, self._close_if_idle)
        return self._stream

    def _close_if_idle(self) -> None:
        """The idle timer: close the stream if no call used it for ``IDLE_CLOSE_SECONDS``, else look again then."""
        self._idle_timer = None
        loop = asyncio.get_running_loop()
        left = IDLE_CLOSE_SECONDS - (loop.time() - self._last_call)
        if left <= 0 and self._idle:
            log.debug("%s: %s unused for %.0f s, closed", self._endpoint, self._stream_method.name, IDLE_CLOSE_SECONDS)
            self.close()
        elif self._stream is not None:  # used since, or a call still waits on it
            self._idle_timer = loop.call_later(left if left > 0 else IDLE_CLOSE_SECONDS, self._close_if_idle)
