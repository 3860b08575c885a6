"""Where the Consul agent is and how to talk to it: ``ConsulSettings`` and the URI parser."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from membership_tables.errors import InvalidTableUriError
from membership_tables.redaction import remember_secret

DEFAULT_PREFIX = "silo-membership"
DEFAULT_PORT = 8500
DEFAULT_TIMEOUT = 5.0
"""Seconds each request waits for the agent to connect, and then between any two bytes of its
answer (the HTTP timeout of every call); then ``TableUnavailableError``."""

_URI_HELP = "expected 'consul://host:port/key/prefix', e.g. consul://127.0.0.1:8500/silo-membership"


@dataclass(frozen=True)
class ConsulSettings:
    """Where the agent is and how to talk to it, parsed from the URI and the options."""

    host: str
    port: int
    prefix: str
    scheme: str = "http"
    timeout: float = DEFAULT_TIMEOUT
    token: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def parse_consul_uri(uri: str, options: Mapping[str, Any]) -> ConsulSettings:
    """Parse ``consul://host[:port][/key/prefix][?scheme=https&timeout=5]`` plus keyword options.

    Keyword options win over query parameters. The ACL token comes from the ``token`` option or
    the ``CONSUL_HTTP_TOKEN`` environment variable, never from the URI.
    """
    try:
        parts = urlsplit(uri)
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse Consul URI {uri!r} ({exc}); {_URI_HELP}") from exc
    if parts.scheme.lower() != "consul" or not parts.hostname:
        raise InvalidTableUriError(f"Consul URI {uri!r} names no host; {_URI_HELP}")
    if parts.username is not None or parts.password is not None:
        raise InvalidTableUriError(
            f"Consul URI {uri!r} carries credentials; pass the ACL token in CONSUL_HTTP_TOKEN or token=..."
        )
    if parts.fragment:
        raise InvalidTableUriError(f"Consul URI {uri!r} has a fragment (#...); {_URI_HELP}")
    prefix = parts.path.strip("/") or DEFAULT_PREFIX
    if any(segment in ("", ".", "..") for segment in prefix.split("/")):
        raise InvalidTableUriError(
            f"Consul key prefix {prefix!r} in {uri!r} has an empty, '.' or '..' segment; "
            "use e.g. consul://127.0.0.1:8500/team/silo-membership"
        )
    settings: dict[str, Any] = {**dict(parse_qsl(parts.query, keep_blank_values=True)), **options}
    unknown = sorted(set(settings) - {"scheme", "timeout", "token"})
    if unknown:
        raise InvalidTableUriError(f"unknown Consul table options {unknown}; supported: scheme, timeout, token")
    scheme = settings.get("scheme", "http")
    if scheme not in ("http", "https"):
        raise InvalidTableUriError(f"Consul option scheme must be 'http' or 'https', got {scheme!r}")
    try:
        timeout = float(settings.get("timeout", DEFAULT_TIMEOUT))
    except (TypeError, ValueError) as exc:
        raise InvalidTableUriError(f"Consul option timeout must be seconds > 0, got {settings['timeout']!r}") from exc
    if not timeout > 0:
        raise InvalidTableUriError(f"Consul option timeout must be seconds > 0, got {settings['timeout']!r}")
    token = settings.get("token") or os.environ.get("CONSUL_HTTP_TOKEN") or None
    if token is not None and not isinstance(token, str):
        raise InvalidTableUriError(f"Consul option token must be a str, got {type(token).__name__}")
    remember_secret(token)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return ConsulSettings(host, port, prefix, scheme, timeout, token)
