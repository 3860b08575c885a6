"""Pings of one endpoint over one long-lived ``PingStream`` (``EndpointPinger``, for ``GrpcProber``).

Probing is most of an idle silo's CPU, and a unary gRPC call costs the two silos about twice the
CPU of one message on a stream that is already open. So a prober keeps one ``PingStream`` per
target endpoint: each ping writes a request with a fresh ``sequence`` and waits for the response
that echoes it. One reader task per stream hands every response to the ping waiting for its
sequence; an answer that comes after its ping gave up is dropped. When the stream fails, every
ping waiting on it gets that error, and the next ping opens a new stream. A peer without
``PingStream`` (UNIMPLEMENTED: an older silo) is pinged with the unary ``Ping`` instead.

The first ``UNARY_PINGS_FIRST`` pings of an endpoint are unary: a stream pays off only for the
endpoints pinged again and again (the silos we monitor), not for one-off pings (a joining silo
pings up to ``max_join_validation_pings`` silos once each; an indirect probe pings a target once).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import grpc

from silo.errors import SiloError
from silo.membership.background import BackgroundTasks
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb

log = logging.getLogger(__name__)

UNARY_PINGS_FIRST = 2
"""Pings of an endpoint sent as unary calls before its stream is opened. In a 500-silo join storm,
a stream opened (and closed again when the channel pool evicted the channel) for each validation
ping was a large share of the joiners' CPU."""

STREAM_RETRY_SECONDS = 60.0
"""After a peer answered UNIMPLEMENTED, its endpoint is pinged with the unary Ping this long, then
the stream is tried again (a rolling upgrade may have put a newer silo at the same endpoint)."""


class StreamEndedError(SiloError, ConnectionError):
    """The ping stream ended (closed by this side, or by the peer without an error) before the answer."""


_Outcome = pb.PingResponse | BaseException
"""What the reader hands a waiting ping: its answer, or the error that ended the stream."""


class _Stream:
    """One ``PingStream`` call and the pings waiting on it, by sequence."""

    def __init__(self, call: codec.BidiCall[pb.PingRequest, pb.PingResponse], readers: BackgroundTasks) -> None:
        self._call = call
        self._write_lock = asyncio.Lock()
        """grpc.aio allows one write at a time on a call."""
        self._waiting: dict[int, asyncio.Future[_Outcome]] = {}
        self._reader = readers.spawn(self._read())

    @property
    def broken(self) -> bool:
        return self._call.done() or self._reader.done()

    @property
    def idle(self) -> bool:
        return not self._waiting

    async def ping(self, request: pb.PingRequest) -> pb.PingResponse:
        """The answer to ``request``; raises the stream's error if it fails first.

        The caller checks ``broken`` just before (no await in between): the reader then still
        runs, and settles this ping's future whatever happens to the call.
        """
        answer: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
        self._waiting[request.sequence] = answer
        try:
            try:
                async with self._write_lock:
                    await self._call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the call has ended: the reader hands every waiting ping its status
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
        ending: BaseException = StreamEndedError("the peer ended the ping stream")
        try:
            while isinstance(response := await self._call.read(), pb.PingResponse):
                answer = self._waiting.get(response.sequence)
                if answer is not None and not answer.done():
                    answer.set_result(response)
                # else: a late answer to a ping that gave up, dropped
        except grpc.aio.AioRpcError as exc:
            ending = exc
        except asyncio.CancelledError:
            ending = StreamEndedError("the ping stream was closed")
            raise
        finally:
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_result(ending)


class EndpointPinger:
    """Pings of one endpoint on one channel: over a ``PingStream`` (reopened after it breaks), or the
    unary ``Ping`` for a peer without it."""

    def __init__(
        self, endpoint: str, channel: Any, readers: BackgroundTasks, *, unary_pings_first: int = UNARY_PINGS_FIRST
    ) -> None:
        self.channel = channel
        self._endpoint = endpoint
        self._readers = readers
        self._open = codec.PING_STREAM.bind(channel)
        self._unary = codec.PING.bind(channel)
        self._stream: _Stream | None = None
        self._unary_until = -math.inf
        self._unary_pings_left = unary_pings_first
        self._retiring = False

    async def ping(self, request: pb.PingRequest, timeout: float) -> pb.PingResponse:
        """The answer within ``timeout``: raises ``TimeoutError``, ``StreamEndedError`` or ``grpc.aio.AioRpcError``."""
        loop = asyncio.get_running_loop()
        if self._unary_pings_left > 0 and self._stream is None:
            self._unary_pings_left -= 1
            return await self._unary(request, timeout=timeout)
        if loop.time() < self._unary_until:
            return await self._unary(request, timeout=timeout)
        deadline = loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                return await self._current_stream().ping(request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        finally:
            if self._retiring and self._idle:
                self.close()
        if loop.time() >= self._unary_until:  # once, not for every ping that was waiting on the stream
            log.info(
                "%s does not serve PingStream (an older silo?): pinging it with unary calls for the next %.0f s",
                self._endpoint,
                STREAM_RETRY_SECONDS,
            )
            self._unary_until = loop.time() + STREAM_RETRY_SECONDS
        return await self._unary(request, timeout=max(deadline - loop.time(), 0.0))

    def retire(self) -> None:
        """Close the stream once the pings waiting on it are done (the channel is being replaced)."""
        self._retiring = True
        if self._idle:
            self.close()

    def close(self) -> None:
        """Close the stream now: pings waiting on it end with ``StreamEndedError``."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    @property
    def _idle(self) -> bool:
        return self._stream is None or self._stream.idle

    def _current_stream(self) -> _Stream:
        if self._stream is None or self._stream.broken:
            # a broken stream is left to its reader: it hands the pings still waiting the call's error
            self._stream = _Stream(self._open(), self._readers)
        return self._stream
