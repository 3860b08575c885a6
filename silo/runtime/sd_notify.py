"""systemd's readiness protocol (``Type=notify``): a datagram to the socket in ``NOTIFY_SOCKET``.

``silo run`` sends ``READY=1`` once the silo is Active and ``STOPPING=1`` when it starts to
drain, so that units ordered after it (``After=silo-sidecar.service``) start only once it
serves. Without ``NOTIFY_SOCKET`` (not started by systemd) nothing is sent. The protocol is a
few bytes on a unix datagram socket, implemented here rather than with a dependency; an
address starting with ``@`` is in the abstract namespace (see ``sd_notify(3)``).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)

NOTIFY_SOCKET = "NOTIFY_SOCKET"


def notify(state: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to systemd; False if there is no ``NOTIFY_SOCKET`` or the
    send failed (logged at WARNING: the service runs on, systemd times the start out)."""
    path = environ.get(NOTIFY_SOCKET, "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("cannot notify systemd of %s at %s=%s: %s", state, NOTIFY_SOCKET, path, exc)
        return False
    return True
