"""``silo drain ADDRESS``: ask one silo to drain and exit, as SIGTERM does (the ``Drain`` RPC).

For a silo whose process the operator cannot signal (another host, a container): it answers at
once and then drains on its own (``docs/operations.md``, "Drain and rolling restarts"). Under
mutual TLS the caller needs a silo certificate of the cluster: client certificates may not
drain silos.
"""

from __future__ import annotations

import argparse
import sys

import grpc

from silo.cli import tls_options
from silo.cli.arguments import duration
from silo.errors import OptionsError
from silo.exit_codes import ExitCode
from silo.wire import codec
from silo.wire.channels import channel_options
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.tls import ChannelPool

DRAIN_FAILED = 1
"""The silo could not be asked (unreachable, refused the call)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="ADDRESS", help="the silo's host:port (as `silo status` shows it)")
    parser.add_argument("--cluster", required=True, metavar="ID", help="the silo's cluster id")
    parser.add_argument(
        "--timeout", type=duration, default=10.0, help="how long to wait for the silo's answer (default 10s)"
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
        answer = codec.DRAIN.bind_sync(pool.get(endpoint))(request, timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"silo: error: cannot drain {endpoint}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return DRAIN_FAILED
    finally:
        for channel in pool.drain():
            channel.close()
    silo = codec.address_from_proto(answer.silo)
    print(f"silo {silo} {'was draining already' if answer.already_draining else 'is draining'}")
    return int(ExitCode.OK)
