"""A hosted silo's crash (``benchmarks.silo_host``) shuts its sockets as a process kill does, without the event loop."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import psutil
import pytest

from benchmarks.silo_host import shut_sockets


def accepted_on(port: int) -> bool:
    """Whether a connection to ``port`` was accepted by this process."""
    return any(
        c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
        for c in psutil.Process().net_connections(kind="tcp")
    )


def test_the_listener_refuses_and_an_open_connection_ends_at_once() -> None:
    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        peer = socket.create_connection(("127.0.0.1", port), timeout=5)
        deadline = time.monotonic() + 5
        while not accepted_on(port):
            assert time.monotonic() < deadline, "the server never accepted the connection"
            time.sleep(0.01)
        assert shut_sockets(port) == 2  # the listener and the connection it accepted; not the peer's end
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        received = b""
        with peer:
            while chunk := peer.recv(4096):  # gRPC's SETTINGS frame, then the end of the stream
                received += chunk
        assert received  # the server had spoken on it: it was a live connection that ended
    finally:
        server.stop(None)
