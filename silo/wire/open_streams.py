"""The PingStream and GossipStream calls a silo's server holds open, ended quietly when it stops.

Peers keep one such stream open per target for as long as they probe or gossip with it. When
the server stops, a stream waiting for its next request is cancelled there and ends with OK
(the peer's stream reports that it ended); a stream busy with a request (taking it, or gRPC
writing its answer) is not cancelled but ends before it waits for the next. A stream cancelled
while busy ended with a cancellation that gRPC, not the servicer, handled, and gRPC logged
it as an error of the servicer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

_Request = TypeVar("_Request")


class OpenStreams:
    """The tasks of the open stream calls, and which of them wait for a request."""

    def __init__(self) -> None:
        self.closing = False
        self._streams: set[asyncio.Task[Any]] = set()
        self._awaiting_request: set[asyncio.Task[Any]] = set()

    async def requests(self, requests: AsyncIterator[_Request]) -> AsyncIterator[_Request]:
        """``requests`` of the calling stream until it ends, or until ``end()`` (quietly)."""
        stream = asyncio.current_task()
        assert stream is not None, "gRPC runs each call in a task"
        self._streams.add(stream)
        try:
            while not self.closing:
                self._awaiting_request.add(stream)
                try:
                    request = await anext(requests)
                except StopAsyncIteration:
                    return
                finally:
                    self._awaiting_request.discard(stream)
                yield request
        except asyncio.CancelledError:
            if not self.closing:
                raise
            stream.uncancel()  # end() cancelled the wait: the call ends with OK
        finally:
            self._streams.discard(stream)

    async def end(self, timeout: float) -> None:
        """Cancel the streams waiting for a request, and wait at most ``timeout`` seconds for every
        open stream to end (the busy ones end once their request is answered)."""
        self.closing = True
        streams = list(self._streams)
        for stream in self._awaiting_request:
            stream.cancel()
        if streams:
            await asyncio.wait(streams, timeout=timeout)
