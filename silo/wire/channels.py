"""gRPC channel and server options every silo, client and work caller uses to reach a silo."""

from __future__ import annotations

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The largest gRPC message a silo accepts or sends, and a caller sends or accepts (8 MiB).

gRPC's default receive limit is 4 MiB; a Work batch of 10,000 Arrow rows with payloads of a few
hundred bytes needs more. A bound keeps one hostile or buggy caller from making a silo buffer an
arbitrarily large message. Servers and channels use the same limit so neither side sends what
the other would refuse."""

MESSAGE_SIZE_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
"""The size limits, as gRPC options for both servers and channels."""

MIN_CONNECT_OPTION = "grpc.min_reconnect_backoff_ms"
"""Also the connect timeout (see ``CHANNEL_OPTIONS``)."""

CHANNEL_OPTIONS = [
    # Silos talk to each other directly; an http_proxy in the environment must not apply.
    ("grpc.enable_http_proxy", 0),
    # Reconnect to a silo that came back within about a second, not gRPC's default two minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    (MIN_CONNECT_OPTION, 100),  # also the connect timeout: see below
    ("grpc.max_reconnect_backoff_ms", 1000),
    *MESSAGE_SIZE_OPTIONS,
]
"""Options of every channel to a silo. gRPC also takes ``grpc.min_reconnect_backoff_ms`` as the
least time a connection attempt (TCP, then HTTP/2 up to the server's SETTINGS) may take before it
is abandoned (MIN_CONNECT_TIMEOUT of gRPC's connection backoff protocol; 20 s by default): here
100 ms, which a client's fail-over wants; silos use ``channel_options``."""


def channel_options(connect_timeout: float) -> list[tuple[str, int]]:
    """``CHANNEL_OPTIONS`` whose connection attempts may take ``connect_timeout`` seconds.

    Silo to silo (``GrpcProber``) this is the probe timeout. At 100 ms, a connect to a silo
    whose process was busy for longer (hundreds of silos on two cores) was abandoned before the
    server's SETTINGS frame came ("connection attempt timed out before receiving SETTINGS
    frame"), and the next one started over: at 500 silos about 50 gossip sends of one kill
    failed that way, and their receivers kept the dead silo until their periodic refresh (a
    read of the whole table each). A longer attempt also serves the calls after the one that
    timed out. A closed port still fails at once (refused), and a peer back from a partition is
    retried at least every ``grpc.max_reconnect_backoff_ms``.
    """
    milliseconds = max(100, round(connect_timeout * 1000))
    return [(name, value) for name, value in CHANNEL_OPTIONS if name != MIN_CONNECT_OPTION] + [
        (MIN_CONNECT_OPTION, milliseconds)
    ]
