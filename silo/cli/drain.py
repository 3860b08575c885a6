"""``silo drain ADDRESS``: ask one silo to drain and exit, as SIGTERM does (the ``Drain`` RPC).

For a silo whose process the operator cannot signal (another host, a container): it answers at
once and then drains on its own (``docs/operations.md``, "Drain and rolling restarts"). Under
mutual TLS the caller needs a silo certificate of the cluster: client certificates may not
drain silos.

``--wait DURATION`` then waits until the silo has exited (its port no longer answers the gRPC
health check): a decommission hook (``deploy/spark/decommission-worker.sh``) runs it before
the host goes away, so the silo has written ShuttingDown, finished its calls in flight and
written Dead by the time the hook returns.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from silo.cli import tls_options
from silo.cli.arguments import duration
from silo.errors import OptionsError
from silo.exit_codes import ExitCode
from silo.wire import codec
from silo.wire.channels import channel_options
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tls import ChannelPool

DRAIN_FAILED = 1
"""The silo could not be asked (unreachable, refused the call), or with ``--wait`` it had not exited in time."""

POLL_SECONDS = 0.2
"""How often ``--wait`` asks whether the silo is still there."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="ADDRESS", help="the silo's host:port (as `silo status` shows it)")
    parser.add_argument("--cluster", required=True, metavar="ID", help="the silo's cluster id")
    parser.add_argument(
        "--timeout", type=duration, default=10.0, help="how long to wait for the silo's answer (default 10s)"
    )
    parser.add_argument(
        "--wait",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="then wait up to DURATION until the silo has exited (drained and written Dead); default: do not wait",
    )
    tls_options.add_arguments(parser)


def endpoint_of(address: str) -> str:
    """``host:port`` of ``host:port`` or ``host:port@generation``; ``OptionsError`` for anything else."""
    endpoint = address.partition("@")[0]
    host, colon, port = endpoint.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionsError(f"expected the silo's host:port, e.g. 10.0.0.5:11111, got {address!r}")
    return endpoint


def run(args: argparse.Namespace) -> int:
    endpoint = endpoint_of(args.address)
    tls = tls_options.caller_settings_from_args(args, "silo drain")
    pool = ChannelPool(args.cluster, tls, channel_options(args.timeout), aio=False)
    request = pb.DrainRequest(header=pb.RequestHeader(cluster_id=args.cluster))
    try:
        channel = pool.get(endpoint)
        try:
            answer = codec.DRAIN.bind_sync(channel)(request, timeout=args.timeout)
        except grpc.RpcError as exc:
            print(f"silo: error: cannot drain {endpoint}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return DRAIN_FAILED
        silo = codec.address_from_proto(answer.silo)
        print(f"silo {silo} {'was draining already' if answer.already_draining else 'is draining'}", flush=True)
        if args.wait <= 0:
            return int(ExitCode.OK)
        if wait_until_gone(health_check(channel), args.wait):
            print(f"silo {silo} has exited")
            return int(ExitCode.OK)
        print(f"silo: error: silo {silo} still answers after {args.wait:g}s of --wait", file=sys.stderr)
        return DRAIN_FAILED
    finally:
        for open_channel in pool.drain():
            open_channel.close()


def health_check(channel: grpc.Channel) -> Callable[[float], bool]:
    """A probe of the silo behind ``channel``: True while its port answers the gRPC health check."""
    stub = health_pb2_grpc.HealthStub(channel)

    def answers(timeout: float) -> bool:
        try:
            stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            # Refused (the process is gone): UNAVAILABLE. A silent network: DEADLINE_EXCEEDED, ask again.
            return exc.code() is not grpc.StatusCode.UNAVAILABLE
        return True

    return answers


def wait_until_gone(
    answers: Callable[[float], bool],
    limit: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Ask ``answers`` until it says no (True) or ``limit`` seconds have passed (False)."""
    deadline = monotonic() + limit
    while (left := deadline - monotonic()) > 0:
        if not answers(min(left, 2.0)):
            return True
        sleep(min(POLL_SECONDS, max(0.0, deadline - monotonic())))
    return False
