"""The dashboard's HTTP server: the page, its JSON state, and a server-sent event stream.

Standard library only (``http.server``). Routes, all GET:

- ``/``: the page (``static/index.html``), with ``/static/dashboard.js`` and ``.css``;
- ``/api/state``: the current document as JSON (see ``state.dashboard_document``);
- ``/api/stream``: ``text/event-stream``, one ``data:`` line with the document each time
  the monitor publishes a new one, and a comment every few seconds to keep proxies open.

Every other method is refused with 405: the dashboard never writes anything.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from silo.dashboard.monitor import ClusterMonitor

log = logging.getLogger(__name__)

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/static/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
KEEPALIVE = 5.0
"""Seconds between keep-alive comments on an idle event stream."""


def _asset(name: str) -> bytes:
    return resources.files("silo.dashboard").joinpath("static", name).read_bytes()


class DashboardServer:
    """Serves ``monitor``'s state on ``host:port`` (``0`` = a free port) in a daemon thread."""

    def __init__(self, monitor: ClusterMonitor, host: str = "127.0.0.1", port: int = 0) -> None:
        self.monitor = monitor
        handler = type("Handler", (_Handler,), {"monitor": monitor})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="silo-dashboard-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    monitor: ClusterMonitor
    server_version = "silo-dashboard"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in STATIC:
            name, content_type = STATIC[path]
            self._send(HTTPStatus.OK, _asset(name), content_type)
        elif path == "/api/state":
            self._send(HTTPStatus.OK, json.dumps(self.monitor.current()).encode(), "application/json")
        elif path == "/api/stream":
            self._stream()
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found: the dashboard serves /, /api/state and /api/stream\n")

    def _refuse(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815 - read-only: nothing may be written

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _stream(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        seq = -1
        try:
            self.wfile.write(b"retry: 2000\n\n")
            while True:
                document: dict[str, Any] | None = self.monitor.wait_newer(seq, KEEPALIVE)
                if document is None:
                    if self.monitor.stopped:
                        return
                    self.wfile.write(b": keep-alive\n\n")
                else:
                    seq = document["seq"]
                    self.wfile.write(b"data: " + json.dumps(document).encode() + b"\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return  # the browser went away

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)
