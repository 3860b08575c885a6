"""gRPC server reflection on a real ``silo run``: on by default, plaintext and mutual TLS; ``--no-reflection``.

The client is grpcio-reflection's own descriptor database, what ``grpcurl``-like tools do: list
the services, then resolve each one's methods from the descriptors the silo sends.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from silo.wire.peer_identity import Role
from silo.wire.tls import ChannelPool, TlsSettings
from testbed.cluster_harness import SiloProcess
from tests.silo.certificates import TestCa, tls_flags

pytestmark = pytest.mark.slow

CLUSTER = "reflected"
SERVICES = {
    "silo.v1.Membership": {
        "Ping",
        "ProbeIndirectly",
        "Gossip",
        "GetMembership",
        "ConfirmMembership",
        "WatchMembership",
        "PingStream",
        "GossipStream",
        "Drain",
    },
    "silo.v1.Work": {"Process"},
    "grpc.health.v1.Health": {method.name for method in health_pb2.DESCRIPTOR.services_by_name["Health"].methods},
    "grpc.reflection.v1alpha.ServerReflection": {"ServerReflectionInfo"},
}


@contextlib.contextmanager
def started_silo(tmp_path: Path, *flags: str) -> Iterator[str]:
    """A ``silo run`` process; yields its endpoint once it listens, SIGKILLed afterwards."""
    table = f"sqlite:///{tmp_path / 'm.db'}"
    argv = [sys.executable, "-m", "silo", "run", "--table", table, "--cluster", CLUSTER, "--preset", "local", *flags]
    silo = SiloProcess(argv, tmp_path / "silo.log")
    try:
        yield silo.wait_listening().endpoint
    finally:
        silo.close()


def reflected(endpoint: str, tls: TlsSettings | None = None) -> dict[str, set[str]]:
    """Every service the silo lists, with the methods its descriptors name."""
    pool = ChannelPool(CLUSTER, tls, [], aio=False)
    channel = pool.get(endpoint)
    try:
        database = ProtoReflectionDescriptorDatabase(channel)
        descriptors = DescriptorPool(database)
        return {
            name: {method.name for method in descriptors.FindServiceByName(name).methods}
            for name in database.get_services()
        }
    finally:
        for opened in pool.drain():
            opened.close()


def test_a_plaintext_silo_lists_and_describes_its_services(tmp_path: Path) -> None:
    with started_silo(tmp_path) as endpoint:
        assert reflected(endpoint) == SERVICES


def test_a_tls_silo_lists_its_services_to_a_client_of_the_cluster(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "ca")
    silo_tls = ca.issue("silo-1", CLUSTER, Role.SILO)
    with started_silo(tmp_path, *tls_flags(silo_tls)) as endpoint:
        assert reflected(endpoint, ca.issue("app", CLUSTER, Role.CLIENT)) == SERVICES
        with pytest.raises(grpc.RpcError) as refused:
            reflected(endpoint)  # plaintext against mutual TLS: no handshake, nothing listed
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_no_reflection_turns_it_off(tmp_path: Path) -> None:
    with started_silo(tmp_path, "--no-reflection") as endpoint:
        with pytest.raises(grpc.RpcError) as refused:
            reflected(endpoint)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
