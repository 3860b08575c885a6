"""A TCP forwarder that can stop passing bytes: a network that silently drops packets, without root.

Why: a store that vanishes without a word (a cable pulled, a firewall dropping packets, a
half-dead load balancer) is the case client-side deadlines exist for, and no throwaway server
can play it: stopping one closes its sockets, SIGSTOP freezes only the process. A
``FreezingProxy`` sits between a client and a real server; ``freeze()`` keeps every
connection open but forwards nothing in either direction (new connections are accepted and
get nothing either), and ``thaw()`` lets the held bytes through again, as a network whose
outage ends does. The client's kernel still acknowledges what it sends, so TCP itself never
notices: only a deadline kept by the client ends its wait.

Usage::

    with FreezingProxy("127.0.0.1", server.port) as proxy:
        table = open_table(f"postgresql://...@127.0.0.1:{proxy.port}/db", ...)
        proxy.freeze()
        ...
        proxy.thaw()
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self

_CHUNK = 65536


class FreezingProxy:
    """Forwards connections to ``127.0.0.1:port`` (``port``) to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._closing = threading.Event()
        """Set by ``close``: ends a pump's hold (``_passing``) at once."""
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name=f"freezing-proxy-{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def frozen(self) -> bool:
        return not self._flowing.is_set()

    def freeze(self) -> None:
        """Stop forwarding: every byte from now on is held, connections stay open."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again, the held bytes first."""
        self._flowing.set()

    def close(self) -> None:
        """Stop listening and close every connection (both ends)."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor (closing alone would not)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._flowing.set()  # pumps waiting for a thaw find their sockets closed and end
        self._acceptor.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
            link = self._opened()
            for source, sink, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, link, upstream), daemon=True).start()

    def _opened(self) -> object:
        """A new connection was accepted: what ``_passing`` gets to tell its bytes from others' (a subclass's hook)."""
        return None

    def _passing(self, link: object, upstream: bool, data: bytes) -> float:
        """``data`` is about to be forwarded on ``link``, to the server if ``upstream`` (a subclass's
        hook); returns the seconds to hold it first (0: none). A hold delays that direction of
        ``link`` only: later bytes queue behind it, other connections flow on.

        Called before the bytes are sent on, so the answer to them is always seen after them."""
        return 0.0

    def _pump(self, source: socket.socket, sink: socket.socket, link: object, upstream: bool) -> None:
        """Copy ``source`` to ``sink`` while flowing; at its end, end ``sink``'s side too."""
        try:
            while True:
                self._flowing.wait()
                data = source.recv(_CHUNK)
                if not data:
                    break
                self._flowing.wait()  # a freeze while reading holds what was read
                if self._closed:
                    return
                hold = self._passing(link, upstream, data)
                if hold > 0 and self._closing.wait(hold):
                    return
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
