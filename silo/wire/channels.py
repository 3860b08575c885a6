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

CHANNEL_OPTIONS = [
    # Silos talk to each other directly; an http_proxy in the environment must not apply.
    ("grpc.enable_http_proxy", 0),
    # Reconnect to a silo that came back within about a second, not gRPC's default two minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    *MESSAGE_SIZE_OPTIONS,
]
