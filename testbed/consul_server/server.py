"""A real HTTP server speaking the subset of Consul's HTTP API that the membership table uses.

Endpoints: ``GET/PUT/DELETE /v1/kv/<key>`` (``recurse``, ``keys``, ``separator``, ``raw``,
``cas``, ``flags``; ``consistent``/``stale``/``dc`` are accepted and ignored), ``PUT /v1/txn``
(KV operations only) and ``GET /v1/status/leader``. Reads carry ``X-Consul-Index``,
``X-Consul-KnownLeader`` and ``X-Consul-LastContact`` like an agent's. There are no sessions or
blocking queries. ACLs are off unless configured: ``acl`` (an ``AclTable`` of tokens and their
``key_prefix`` policies) makes the server enforce them the way an agent with a default-deny ACL
system does (see ``testbed.consul_server.acl``); ``acl_token`` is the shorthand for one token that
may do everything. The token travels as the ``X-Consul-Token`` header or ``?token=``.

The server answers with ``HTTP/1.0`` (one request per connection) so that ``stop()`` really
stops serving: no kept-alive connection outlives the listener. ``stop()`` keeps the store, and
``start()`` serves it again on the same port, which lets tests take the "store" down and up.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self, cast
from urllib.parse import parse_qs, unquote, urlsplit

from testbed.consul_server.acl import ACL_NOT_FOUND, PERMISSION_DENIED, AclPolicy, AclTable
from testbed.consul_server.store import Entry, KVOp, KVStore, TxnError, TxnOutcome

MAX_TXN_OPS = 64
"""Consul's limit per transaction up to 1.x (newer agents allow 128); more gets 413."""

MAX_VALUE_SIZE = 512 * 1024
"""Consul refuses values larger than 512 KiB with 413."""

KV_PREFIX = "/v1/kv/"


class HttpError(Exception):
    """An error answered as plain text with a status code, the way Consul reports bad input."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _uint(params: dict[str, list[str]], name: str) -> int | None:
    if name not in params:
        return None
    text = params[name][0]
    if not text.isdigit():
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Invalid {name} value {text!r}: expected an unsigned integer")
    return int(text)


def parse_txn_ops(body: bytes) -> list[KVOp]:
    """Decode a ``/v1/txn`` body; malformed input raises ``HttpError`` (400 or 413)."""
    try:
        payload = json.loads(body or b"null")
    except ValueError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Failed to parse body: {exc}") from exc
    if not isinstance(payload, list):
        raise HttpError(HTTPStatus.BAD_REQUEST, "Failed to parse body: expected a JSON array of operations")
    if len(payload) > MAX_TXN_OPS:
        raise HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"Transaction contains too many operations ({len(payload)} > {MAX_TXN_OPS})",
        )
    return [_parse_kv_op(item) for item in payload]


def _parse_kv_op(item: object) -> KVOp:
    if not isinstance(item, dict) or set(item) != {"KV"} or not isinstance(item["KV"], dict):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"Failed to parse body: only KV operations are supported here, got {item!r}"
        )
    kv: dict[str, Any] = item["KV"]
    verb, key = kv.get("Verb"), kv.get("Key", "")
    flags, index = kv.get("Flags") or 0, kv.get("Index") or 0
    if not isinstance(verb, str) or not isinstance(key, str):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Failed to parse body: Verb and Key must be strings in {kv!r}")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in (flags, index)):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Failed to parse body: Flags and Index must be unsigned in {kv!r}")
    encoded = kv.get("Value") or ""
    try:
        value = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
    except binascii.Error:
        value = None
    if value is None:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Failed to parse body: Value of {key!r} is not base64")
    if len(value) > MAX_VALUE_SIZE:
        raise HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"Value for key {key!r} is too large ({len(value)} > {MAX_VALUE_SIZE})"
        )
    return KVOp(verb, key, value, flags, index)


def txn_response(outcome: TxnOutcome) -> tuple[HTTPStatus, dict[str, Any]]:
    """200 with the results, or 409 with the errors (rolled back), as Consul answers."""
    if outcome.ok:
        results = [{"KV": entry.to_json(with_value)} for entry, with_value in outcome.results]
        return HTTPStatus.OK, {"Results": results, "Errors": None}
    errors = [{"OpIndex": error.op_index, "What": error.what} for error in outcome.errors]
    return HTTPStatus.CONFLICT, {"Results": None, "Errors": errors}


def denied_ops(policy: AclPolicy | None, ops: list[KVOp]) -> TxnOutcome | None:
    """Consul's pre-check of a transaction: the ops ``policy`` may not run, or ``None`` if all pass."""
    if policy is None:
        return None
    errors = tuple(TxnError(i, PERMISSION_DENIED) for i, op in enumerate(ops) if not policy.may_run(op.verb, op.key))
    return TxnOutcome(errors=errors) if errors else None


def _keys_only(entries: list[Entry], prefix: str, separator: str | None) -> list[str]:
    if not separator:
        return [entry.key for entry in entries]
    keys: list[str] = []
    for entry in entries:
        cut = entry.key.find(separator, len(prefix))
        key = entry.key if cut < 0 else entry.key[: cut + len(separator)]
        if not keys or keys[-1] != key:
            keys.append(key)
    return keys


class _Handler(BaseHTTPRequestHandler):
    server_version = "ConsulTestServer/1"
    _policy: AclPolicy | None = None
    """The policy of this request's token (``None``: ACLs are off)."""

    @property
    def http_server(self) -> _HttpServer:
        return cast(_HttpServer, self.server)

    @property
    def store(self) -> KVStore:
        return self.http_server.store

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output should not carry one line per request."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        params = parse_qs(parts.query, keep_blank_values=True)
        try:
            self._policy = self._token_policy(params)
            if parts.path.startswith(KV_PREFIX):
                key = unquote(parts.path[len(KV_PREFIX) :])
                {"GET": self._kv_get, "PUT": self._kv_put, "DELETE": self._kv_delete}[method](key, params)
            elif parts.path == "/v1/txn" and method == "PUT":
                ops = parse_txn_ops(self._body())
                status, body = txn_response(denied_ops(self._policy, ops) or self.store.txn(ops))
                self._send_json(status, body)
            elif parts.path == "/v1/status/leader" and method == "GET":
                self._send_json(HTTPStatus.OK, f"{self.http_server.host}:8300")
            elif parts.path in ("/v1/txn", "/v1/status/leader"):
                raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"method {method} not allowed")
            else:
                raise HttpError(HTTPStatus.NOT_FOUND, f"{parts.path}: not served by the Consul test server")
        except HttpError as exc:
            self._send(exc.status, str(exc).encode(), "text/plain; charset=utf-8")

    def _token_policy(self, params: dict[str, list[str]]) -> AclPolicy | None:
        """The policy of the request's token; ``None`` when ACLs are off. 403 for an unknown token."""
        acl = self.http_server.acl
        if acl is None:
            return None
        token = self.headers.get("X-Consul-Token") or next(iter(params.get("token", [])), None)
        policy = acl.policy_of(token)
        if policy is None:
            raise HttpError(HTTPStatus.FORBIDDEN, ACL_NOT_FOUND)
        return policy

    def _require(self, allowed: bool) -> None:
        if not allowed:
            raise HttpError(HTTPStatus.FORBIDDEN, PERMISSION_DENIED)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _kv_get(self, key: str, params: dict[str, list[str]]) -> None:
        policy = self._policy
        if "keys" in params or "recurse" in params:
            index, entries = self.store.list(key)
            if policy is not None:  # Consul leaves out what the token may not read
                entries = [entry for entry in entries if policy.may_read(entry.key)]
            if not entries:
                self._send(HTTPStatus.NOT_FOUND, b"", index=index)
            elif "keys" in params:
                self._send_json(HTTPStatus.OK, _keys_only(entries, key, params.get("separator", [""])[0]), index)
            else:
                self._send_json(HTTPStatus.OK, [entry.to_json() for entry in entries], index)
            return
        self._require(policy is None or policy.may_read(key))
        index, entry = self.store.get(key)
        if entry is None:
            self._send(HTTPStatus.NOT_FOUND, b"", index=index)
        elif "raw" in params:
            self._send(HTTPStatus.OK, entry.value, "application/octet-stream", index)
        else:
            self._send_json(HTTPStatus.OK, [entry.to_json()], index)

    def _kv_put(self, key: str, params: dict[str, list[str]]) -> None:
        if not key:
            raise HttpError(HTTPStatus.BAD_REQUEST, "Missing key name")
        if "acquire" in params or "release" in params:
            raise HttpError(HTTPStatus.BAD_REQUEST, "sessions (acquire/release) are not supported by the test server")
        self._require(self._policy is None or self._policy.may_write(key))
        value = self._body()
        if len(value) > MAX_VALUE_SIZE:
            raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"Value exceeds {MAX_VALUE_SIZE} byte limit")
        done = self.store.put(key, value, _uint(params, "flags") or 0, _uint(params, "cas"))
        self._send_json(HTTPStatus.OK, done)

    def _kv_delete(self, key: str, params: dict[str, list[str]]) -> None:
        recurse = "recurse" in params
        if not key and not recurse:
            raise HttpError(HTTPStatus.BAD_REQUEST, "Missing key name")
        policy = self._policy
        self._require(policy is None or (policy.may_write_tree(key) if recurse else policy.may_write(key)))
        self._send_json(HTTPStatus.OK, self.store.delete(key, recurse, _uint(params, "cas")))

    def _send_json(self, status: HTTPStatus, body: object, index: int | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", index)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "", index: int | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if index is not None:
            self.send_header("X-Consul-Index", str(index))
            self.send_header("X-Consul-KnownLeader", "true")
            self.send_header("X-Consul-LastContact", "0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 resets connections when a test races 20 clients

    def __init__(self, address: tuple[str, int], store: KVStore, acl: AclTable | None) -> None:
        super().__init__(address, _Handler)
        self.store = store
        self.host = address[0]
        self.acl = acl


class ConsulTestServer:
    """The Consul test server: one ``KVStore`` served over HTTP from a background thread.

    ``port=0`` picks a free port on the first ``start()``; later starts reuse it.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        store: KVStore | None = None,
        acl_token: str | None = None,
        acl: AclTable | None = None,
    ) -> None:
        if acl_token is not None and acl is not None:
            raise ValueError("give acl_token (one all-powerful token) or acl (tokens and policies), not both")
        self.host = host
        self.port = port
        self.store = store if store is not None else KVStore()
        self.acl = AclTable.single_token(acl_token) if acl_token is not None else acl
        self._http: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port``, the form of ``CONSUL_HTTP_ADDR``."""
        return f"{self.host}:{self.port}"

    def uri(self, prefix: str = "") -> str:
        """A ``consul://`` table URI on this server, with an optional key prefix."""
        return f"consul://{self.address}/{prefix}".rstrip("/")

    def start(self) -> None:
        """Serve (again) on the same port; the data of earlier runs is still there."""
        if self._http is not None:
            return
        self._http = _HttpServer((self.host, self.port), self.store, self.acl)
        self.port = int(self._http.server_address[1])
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},  # how long stop() may wait for the loop to notice
            name=f"consul-test-server-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (connections are then refused); the store is kept for ``start()``."""
        http, thread = self._http, self._thread
        self._http = self._thread = None
        if http is not None:
            http.shutdown()
            http.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
