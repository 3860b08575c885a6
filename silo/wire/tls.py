"""Mutual TLS for every gRPC port: the settings, server credentials and caller channels.

``TlsSettings(cert, key, ca)`` names three PEM files: this process's certificate chain, its
private key and the CA bundle it trusts. The same object configures a silo (``silo run
--tls-cert/--tls-key/--tls-ca``), the client library, work callers and Spark routing.

Rotation without restart: the files are watched (size, mtime and inode) and re-read when one
changes; a new content takes effect for the next TLS handshake. The server's credentials
(``grpc.dynamic_ssl_server_credentials``) ask for the current files at every handshake;
callers (``ChannelPool``) check at most every ``RECHECK_SECONDS`` and open new channels with the
new files, leaving established ones to finish their calls. A file that cannot be read or
parsed keeps the previous files in use and is logged.

Callers verify the server against ``<cluster-id>.silo-cluster`` (silos dial IP addresses,
so the host name cannot be checked; the DNS SAN binds the server to the cluster instead), and
the server checks the caller's ``silo://`` SANs (``silo.wire.peer_identity``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from silo.errors import OptionsError
from silo.wire.peer_identity import cluster_dns_name

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0
"""How often a caller looks at its TLS files for a rotation (a stat of three files)."""

ChannelOptions = Sequence[tuple[str, Any]]


class TlsConfigError(OptionsError):
    """A TLS file is missing, unreadable or not PEM; the message names the file and the fix."""


@dataclass(frozen=True)
class TlsSettings:
    """The PEM files of one process's TLS identity: ``cert`` (chain), ``key``, ``ca`` (trusted CAs)."""

    cert: Path
    key: Path
    ca: Path

    def __init__(self, cert: str | os.PathLike[str], key: str | os.PathLike[str], ca: str | os.PathLike[str]) -> None:
        for label, value in (("cert", cert), ("key", key), ("ca", ca)):
            if not isinstance(value, (str, os.PathLike)) or not str(value):
                raise TlsConfigError(f"TlsSettings {label} must be the path of a PEM file, got {value!r}")
        object.__setattr__(self, "cert", Path(cert))
        object.__setattr__(self, "key", Path(key))
        object.__setattr__(self, "ca", Path(ca))


def checked_tls(tls: object) -> TlsSettings | None:
    """``tls`` as a caller passed it (client library, work clients, Spark): ``TlsSettings`` or None.

    Anything else raises ``TlsConfigError`` (a ``ValueError``) at once, before a channel is opened.
    """
    if tls is not None and not isinstance(tls, TlsSettings):
        raise TlsConfigError(f"tls must be a TlsSettings(cert, key, ca) or None, got {tls!r}")
    return tls


@dataclass(frozen=True)
class TlsMaterial:
    """The contents of the three files, read together."""

    cert: bytes
    key: bytes
    ca: bytes


def read_material(settings: TlsSettings) -> TlsMaterial:
    """The three files' contents; ``TlsConfigError`` if one is missing, empty or not PEM."""
    contents = []
    for label, path, marker in (
        ("--tls-cert", settings.cert, b"-----BEGIN CERTIFICATE-----"),
        ("--tls-key", settings.key, b"PRIVATE KEY-----"),
        ("--tls-ca", settings.ca, b"-----BEGIN CERTIFICATE-----"),
    ):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TlsConfigError(
                f"cannot read {label} {path}: {exc.strerror or exc}; "
                "make certificates with: silo certs init DIR && silo certs issue DIR ..."
            ) from exc
        if marker not in data:
            raise TlsConfigError(f"{label} {path} is not a PEM file (no {marker.decode().strip('-')} block)")
        contents.append(data)
    return TlsMaterial(*contents)


class WatchedTlsFiles:
    """The current ``TlsMaterial``, re-read when a file's size, mtime or inode changes."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.material = read_material(settings)
        self.generation = 0
        """Counts the content changes seen; callers reopen channels when it moves."""

    def refresh(self) -> bool:
        """Re-read the files if they changed on disk; True if their content changed.

        An unreadable or partial rotation keeps the previous material (logged), and is retried
        on the next call because the stamp is not advanced.
        """
        with self._lock:
            stamp = self._stat()
            if stamp == self._stamp:
                return False
            try:
                material = read_material(self.settings)
            except TlsConfigError as exc:
                log.warning("TLS files changed but cannot be used yet (%s); keeping the previous ones", exc)
                return False
            self._stamp = stamp
            if material == self.material:
                return False
            self.material = material
            self.generation += 1
            log.info("TLS files %s changed: new handshakes use them", self.settings.cert)
            return True

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.settings.cert, self.settings.key, self.settings.ca):
            try:
                found = path.stat()
            except OSError:
                stamps.append((-1, -1, -1))
            else:
                stamps.append((found.st_mtime_ns, found.st_size, found.st_ino))
        return tuple(stamps)


def server_credentials(settings: TlsSettings) -> Any:
    """Credentials that require a client certificate signed by ``settings.ca`` and follow rotations."""
    files = WatchedTlsFiles(settings)

    def configuration(material: TlsMaterial) -> Any:
        return grpc.ssl_server_certificate_configuration([(material.key, material.cert)], root_certificates=material.ca)

    def fetch() -> Any:
        # gRPC calls this before each handshake; None = keep the current configuration.
        return configuration(files.material) if files.refresh() else None

    return grpc.dynamic_ssl_server_credentials(configuration(files.material), fetch, require_client_authentication=True)


class ChannelPool:
    """One channel per endpoint, plaintext or TLS for ``cluster_id``; TLS channels follow rotations.

    ``get`` opens channels lazily. After a rotation it opens new ones; the old ones are kept
    (calls in flight finish on them) until ``drain`` hands every channel to the owner to close.
    ``aio`` chooses ``grpc.aio`` channels (asyncio callers) or blocking ones.

    ``max_channels`` bounds the pool: opening one more hands the least recently used channel to
    ``evict`` (the owner closes it, letting its calls in flight finish). A silo of a large cluster
    talks to every other one now and then (its join, a majority check, gossip); kept forever,
    those channels were a thousand per silo at a thousand silos.
    """

    def __init__(
        self,
        cluster_id: str,
        tls: TlsSettings | None,
        options: ChannelOptions,
        *,
        aio: bool,
        clock: Callable[[], float] = time.monotonic,
        max_channels: int | None = None,
        evict: Callable[[Any], None] | None = None,
    ) -> None:
        if max_channels is not None and (max_channels < 1 or evict is None):
            raise ValueError(f"max_channels must be at least 1 and come with evict, got {max_channels} and {evict}")
        self._max_channels = max_channels
        self._evict = evict
        self._options = list(options)
        self._aio = aio
        self._clock = clock
        self._files = WatchedTlsFiles(tls) if tls is not None else None
        if self._files is not None:
            self._options.append(("grpc.ssl_target_name_override", cluster_dns_name(cluster_id)))
        self._checked = clock()
        self._channels: OrderedDict[str, Any] = OrderedDict()
        """By endpoint, least recently used first."""
        self._retired: list[Any] = []

    @property
    def tls(self) -> bool:
        return self._files is not None

    def __len__(self) -> int:
        """Current channels (not those retired after a rotation)."""
        return len(self._channels)

    def get(self, endpoint: str) -> Any:
        self._follow_rotation()
        channel = self._channels.get(endpoint)
        if channel is not None:
            self._channels.move_to_end(endpoint)
            return channel
        channel = self._channels[endpoint] = self._open(endpoint)
        if self._max_channels is not None and self._evict is not None and len(self._channels) > self._max_channels:
            self._evict(self._channels.popitem(last=False)[1])
        return channel

    def drain(self) -> list[Any]:
        """Every channel opened and not drained yet (current and retired), to close."""
        channels = [*self._channels.values(), *self._retired]
        self._channels, self._retired = OrderedDict(), []
        return channels

    def _follow_rotation(self) -> None:
        if self._files is None or self._clock() - self._checked < RECHECK_SECONDS:
            return
        self._checked = self._clock()
        if self._files.refresh():
            self._retired.extend(self._channels.values())
            self._channels = OrderedDict()

    def open_unshared(self, endpoint: str) -> Any:
        """A new channel to ``endpoint`` on a connection of its own, outside the pool: the caller closes it.

        gRPC shares one connection among the channels of a process that have the same target and
        options (its global subchannel pool); a local pool makes this channel connect afresh, so
        it does not wait on a pooled connection whose TCP is backing off its retransmissions."""
        self._follow_rotation()
        return self._open(endpoint, [("grpc.use_local_subchannel_pool", 1)])

    def _open(self, endpoint: str, extra_options: ChannelOptions = ()) -> Any:
        options = [*self._options, *extra_options]
        if self._files is None:
            opener = grpc.aio.insecure_channel if self._aio else grpc.insecure_channel
            return opener(endpoint, options=options)
        material = self._files.material
        credentials = grpc.ssl_channel_credentials(
            root_certificates=material.ca, private_key=material.key, certificate_chain=material.cert
        )
        secure = grpc.aio.secure_channel if self._aio else grpc.secure_channel
        return secure(endpoint, credentials, options=options)
