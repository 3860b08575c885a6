"""Secrets out of every text that leaves a process: logs, ``silo status``, errors, reprs.

One function, ``redact``, used by every path (``MembershipTableError`` messages, the
``silo`` log formatter, ``silo status`` and the CLI's error lines, the tables' reprs). It
masks two kinds of secret with ``***``:

* by shape: the password of a URI's user-info (``scheme://user:PASSWORD@host``, e.g. a SQL
  or ZooKeeper URI) and the value of a ``token=``, ``password=`` or ``secret``-like query
  parameter;
* by value: secrets that travel out of band and so have no recognisable shape (the Consul
  token from ``CONSUL_HTTP_TOKEN``, ZooKeeper digest credentials from the environment, AWS
  keys given as table options). The backend that reads such a secret registers it with
  ``remember_secret`` before anything can print it, and every later ``redact`` masks each
  occurrence, wherever a driver or a message quotes it, unless it is part of a longer word
  (a password ``secret`` does not turn ``aws_secret_access_key`` into ``aws_***_access_key``).

The registry is process-wide and only grows: a secret once used stays masked.
"""

from __future__ import annotations

import re
import threading

MASK = "***"

_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:)[^/?#@\s]*@")
_SECRET_PARAMETER = re.compile(
    r"(?P<head>[?&;\s\"'](?:token|password|passwd|pwd|secret|[a-z_]*secret[a-z_]*|[a-z_]*session_token)=)[^&;\s\"']+",
    re.IGNORECASE,
)

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_registered: re.Pattern[str] | None = None
"""Every registered secret not inside a longer word, longest first (a secret containing
another is masked whole)."""


def remember_secret(secret: str | None) -> None:
    """Mask ``secret`` in every text ``redact`` sees from now on (empty or ``None``: nothing)."""
    global _secrets, _registered
    if not secret:
        return
    with _lock:
        if secret in _secrets:
            return
        _secrets = _secrets | {secret}
        alternatives = "|".join(re.escape(known) for known in sorted(_secrets, key=len, reverse=True))
        _registered = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


def redact(text: str) -> str:
    """``text`` with every password, token and registered secret replaced by ``***``."""
    if _registered is not None:
        text = _registered.sub(MASK, text)
    text = _URI_PASSWORD.sub(rf"\g<head>{MASK}@", text)
    return _SECRET_PARAMETER.sub(rf"\g<head>{MASK}", text)
