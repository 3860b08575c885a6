"""Where the ZooKeeper ensemble is, who the handle is and how patient it is: ``ZooKeeperSettings``,
``DigestCredentials`` and the URI parser."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from kazoo.security import make_digest_acl

from membership_tables.errors import InvalidTableUriError
from membership_tables.model import MAX_PORT
from membership_tables.redaction import remember_secret

DEFAULT_CHROOT = "/silo-membership"
DEFAULT_PORT = 2181
DIGEST_ENV = "SILO_ZOOKEEPER_DIGEST"
"""``user:password`` for the digest ACLs when the URI carries no credentials."""

_HOST_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]/\s]+))(?::(?P<port>[^:]*))?$")
_BAD_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\s]")


@dataclass(frozen=True)
class ZooKeeperSettings:
    """Where the table lives and how patient the client is.

    ``timeout`` (seconds, default 10): the ZooKeeper session timeout and the longest one
    request may wait for its answer. ``connect_timeout`` (seconds, default 5): how long
    the first use of a handle waits for a connection before raising
    ``TableUnavailableError`` (the client then keeps connecting in the background); a handle
    does not connect until it is first used.
    """

    hosts: str
    chroot: str = DEFAULT_CHROOT
    timeout: float = 10.0
    connect_timeout: float = 5.0
    digest: DigestCredentials | None = field(default=None, repr=False)
    """Who the handle is, for ZooKeeper's ``digest`` ACLs; ``None``: no authentication, open ACLs."""


@dataclass(frozen=True)
class DigestCredentials:
    """A ZooKeeper ``digest`` identity; the password never shows in a repr."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str) -> DigestCredentials:
        """``user:password`` (from ``source``, named in errors) as credentials."""
        user, _, password = text.partition(":")
        return cls.checked(user, password, source)

    @classmethod
    def checked(cls, user: str, password: str, source: str) -> DigestCredentials:
        """Credentials, once the password is registered for redaction and both parts are valid."""
        remember_secret(password)
        if not user or not password or ":" in user:
            raise InvalidTableUriError(
                f"ZooKeeper credentials in {source} must be 'user:password': both parts non-empty, no ':' in the user"
            )
        return cls(user, password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What kazoo sends to add this identity to the session."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[Any]:
        """Every permission for this identity, none for anyone else."""
        return [make_digest_acl(self.user, self.password, all=True)]


_OPTIONS = ("timeout", "connect_timeout")
_EXAMPLE = "zookeeper://127.0.0.1:2181,10.0.0.2:2181/silo-membership"


def parse_uri(uri: str, options: Mapping[str, object]) -> ZooKeeperSettings:
    """Settings from ``zookeeper://host:port[,host:port...][/chroot][?timeout=S]`` and options.

    Options may come from the query string or from keyword arguments (these win).
    """
    try:
        parts = urlsplit(uri)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidTableUriError(f"cannot parse ZooKeeper URI {uri!r} ({exc}); expected e.g. {_EXAMPLE}") from exc
    if parts.fragment:
        raise InvalidTableUriError(f"ZooKeeper URI {uri!r} must not have a '#fragment'; expected e.g. {_EXAMPLE}")
    given: dict[str, object] = dict(query)
    given.update(options)
    unknown = sorted(set(given) - set(_OPTIONS))
    if unknown:
        raise InvalidTableUriError(
            f"unknown ZooKeeper table option(s) {unknown} in {uri!r}; supported: {', '.join(_OPTIONS)} (seconds)"
        )
    timeouts = {name: _positive_seconds(name, value) for name, value in given.items()}
    userinfo, at, netloc = parts.netloc.rpartition("@")
    digest = _parse_digest(userinfo, uri) if at else None
    if digest is None and os.environ.get(DIGEST_ENV):
        digest = DigestCredentials.parse(os.environ[DIGEST_ENV], f"${DIGEST_ENV}")
    return ZooKeeperSettings(
        hosts=_parse_hosts(netloc, uri), chroot=_parse_chroot(parts.path, uri), digest=digest, **timeouts
    )


def _parse_digest(userinfo: str, uri: str) -> DigestCredentials:
    user, colon, password = userinfo.partition(":")
    if not colon:
        raise InvalidTableUriError(
            f"ZooKeeper URI {uri!r} names a user but no password; put 'user:password@' before the hosts "
            f"(percent-encode ':', '@' and '/' in them) or set {DIGEST_ENV}=user:password"
        )
    return DigestCredentials.checked(unquote(user), unquote(password), "the URI")


def _parse_hosts(netloc: str, uri: str) -> str:
    hosts = []
    for item in netloc.split(","):
        match = _HOST_RE.match(item.strip())
        if not item.strip() or match is None:
            raise InvalidTableUriError(
                f"ZooKeeper URI {uri!r} has no valid host in {item!r}; list servers as host:port, e.g. {_EXAMPLE}"
            )
        port_text = match.group("port")
        if port_text is None:
            port = DEFAULT_PORT
        elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) <= MAX_PORT:
            port = int(port_text)
        else:
            raise InvalidTableUriError(f"ZooKeeper URI {uri!r} has a bad port {port_text!r}; use 1..{MAX_PORT}")
        host = f"[{match.group('v6')}]" if match.group("v6") else match.group("host")
        hosts.append(f"{host}:{port}")
    return ",".join(hosts)


def _parse_chroot(path: str, uri: str) -> str:
    if path in ("", "/"):
        return DEFAULT_CHROOT
    components = path.strip("/").split("/")
    if any(c in ("", ".", "..") for c in components) or _BAD_PATH_CHARS.search(path):
        raise InvalidTableUriError(
            f"ZooKeeper URI {uri!r} has an invalid chroot {path!r}: use /name[/name...] without empty, '.' or '..' "
            "parts, spaces or control characters"
        )
    return "/" + "/".join(components)


def _positive_seconds(name: str, value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidTableUriError(f"ZooKeeper option {name} must be a positive number of seconds, got {value!r}")
    return seconds
