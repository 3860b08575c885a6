"""gRPC channel and server options every silo, client and work caller uses to reach a silo."""

from __future__ import annotations

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The largest gRPC message (8 MiB) a silo's server accepts or sends, and a channel to a silo.

A membership view of thousands of silos or a work batch is far below it; a larger
request is refused with ``RESOURCE_EXHAUSTED`` before any handler sees it, so one
caller cannot make a silo buffer an arbitrary amount of memory."""

MESSAGE_SIZE_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
"""The size limits, for every gRPC server and channel of the project."""

CHANNEL_OPTIONS = [
    # Silos talk to each other directly; an http_proxy in the environment must not apply.
    ("grpc.enable_http_proxy", 0),
    # Reconnect to a silo that came back within about a second, not gRPC's default two minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    *MESSAGE_SIZE_OPTIONS,
]
