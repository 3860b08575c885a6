"""A bare TCP connect whose verdict the kernel keeps for us (``connect_outcome``, for ``GrpcProber.connect``).

A monitor checks the path to a silent target with a bare connect, and a refused one proves the
target's process gone. On an overloaded host our event loop can run seconds late; a connect
awaited through tasks (``asyncio.open_connection`` under ``wait_for``) then lost to its own
timeout whenever both came due in one late turn of the loop, so a closed port on a crashed silo's
host read as "no answer" (2,000 silos on two cores: connects on the loopback "timed out" after
5 s). Here the connect is made on a non-blocking socket: a refusal the kernel knows at once is
read at once, and otherwise the socket's writability settles a plain future, which the loop sets
before it runs any timer of the same turn; a connect still unsettled at the deadline is asked of
the kernel once more (``SO_ERROR``).
"""

from __future__ import annotations

import asyncio
import errno
import socket

from silo.membership.probing import ProbeOutcome

_IN_PROGRESS = (errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY)


async def connect_outcome(host: str, port: int, timeout: float) -> ProbeOutcome:
    """Connect to ``host:port`` and close at once: ANSWERED (its kernel accepted), REFUSED (nothing
    listens there) or TIMED_OUT (nothing came back within ``timeout``, or the connect failed otherwise)."""
    family, kind, proto, address = await _resolve(host, port)
    with socket.socket(family, kind, proto) as sock:
        sock.setblocking(False)
        error = sock.connect_ex(address)
        if error in _IN_PROGRESS:
            error = await _settled(sock, timeout)
        return _outcome(error)


async def _resolve(host: str, port: int) -> tuple[socket.AddressFamily, socket.SocketKind, int, tuple[str, int]]:
    """The first address of ``host:port``: an IP literal without a thread (every silo address is
    one), a name through the loop's resolver."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = found[0]
    return family, kind, proto, (str(address[0]), int(address[1]))


async def _settled(sock: socket.socket, timeout: float) -> int:
    """The connect's error code (0: connected) once the socket is writable, or as the kernel has
    it at the deadline (``EINPROGRESS`` while the handshake is still on its way)."""
    loop = asyncio.get_running_loop()
    writable: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not writable.done():
            writable.set_result(None)

    loop.add_writer(sock.fileno(), settle)
    try:
        await asyncio.wait_for(writable, timeout)
    except TimeoutError:
        pass
    finally:
        loop.remove_writer(sock.fileno())
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error == 0 and not _connected(sock):
        return errno.EINPROGRESS
    return error


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


def _outcome(error: int) -> ProbeOutcome:
    if error == 0:
        return ProbeOutcome.ANSWERED
    if error == errno.ECONNREFUSED:
        return ProbeOutcome.REFUSED
    return ProbeOutcome.TIMED_OUT
