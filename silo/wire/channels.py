"""gRPC channel options every silo, client and work caller uses to reach a silo."""

from __future__ import annotations

CHANNEL_OPTIONS = [
    # Silos talk to each other directly; an http_proxy in the environment must not apply.
    ("grpc.enable_http_proxy", 0),
    # Reconnect to a silo that came back within about a second, not gRPC's default two minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
