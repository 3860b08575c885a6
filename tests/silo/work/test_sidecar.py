"""Finding a worker's sidecar in a view: by endpoint, by the ``spark.host`` property, by address."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from membership_tables import SiloAddress, SiloStatus
from silo.client.topology import ClusterView, SiloInfo
from silo.spark.sidecar import SIDECAR_ENV, SIDECAR_HOST_ENV, executor_sidecar
from silo.work.client import WorkUnavailableError
from silo.work.handlers import checksum_handler
from silo.work.routing import Record, Router
from silo.work.sidecar import HOST_PROPERTY, SidecarLocator, is_local_address

CLUSTER = "sidecar-test"


def silo(host: str, port: int = 11111, generation: int = 1, spark_host: str | None = None) -> SiloInfo:
    properties = {} if spark_host is None else {HOST_PROPERTY: spark_host}
    return SiloInfo(
        SiloAddress(host, port, generation),
        f"{host}:{port}",
        SiloStatus.ACTIVE,
        0,
        properties,
        datetime(2026, 1, 1, tzinfo=UTC),
    )


def view(*silos: SiloInfo, version: int = 1) -> ClusterView:
    return ClusterView(CLUSTER, version, silos)


def addresses(*local: str) -> Callable[[str], bool]:
    """A host whose interfaces carry ``local`` (instead of binding sockets)."""
    return lambda address: address in local


WORKERS = view(
    silo("10.0.0.1", spark_host="node-1.example.com"),
    silo("10.0.0.2", spark_host="node-2.example.com"),
    silo("10.0.0.3", spark_host="node-3.example.com"),
)


@pytest.mark.parametrize("name", ["node-2.example.com", "NODE-2.example.com.", "node-2", "10.0.0.2"])
def test_the_silo_whose_spark_host_names_this_host_is_its_sidecar(name: str) -> None:
    locator = SidecarLocator.on_host([name], addresses())
    assert locator.find(WORKERS) == SiloAddress("10.0.0.2", 11111, 1)


def test_a_spark_host_address_on_a_local_interface_names_this_host() -> None:
    by_address = view(silo("10.0.0.1", spark_host="10.9.0.1"), silo("10.0.0.2", spark_host="10.9.0.2"))
    locator = SidecarLocator.on_host(["worker"], addresses("10.9.0.2"))
    assert locator.find(by_address) == SiloAddress("10.0.0.2", 11111, 1)


def test_a_short_name_does_not_match_another_domain_nor_a_longer_label() -> None:
    assert SidecarLocator.on_host(["node-2.other.org", "node", "node-2x"], addresses()).find(WORKERS) is None


def test_silos_on_one_local_address_are_told_apart_by_their_spark_host() -> None:
    """Silos on one loopback interface, each for its own (test) host: the property decides."""
    loopback = view(silo("127.0.0.1", 11111, spark_host="worker-a"), silo("127.0.0.1", 11112, spark_host="worker-b"))
    assert SidecarLocator.on_host(["worker-b"], addresses("127.0.0.1")).find(loopback) == SiloAddress(
        "127.0.0.1", 11112, 1
    )
    assert SidecarLocator.on_host(["worker-c"], addresses("127.0.0.1")).find(loopback) is None


def test_the_advertised_host_decides_first() -> None:
    plain = view(silo("10.0.0.1"), silo("10.0.0.2"), silo("node-3.example.com"))
    assert SidecarLocator.on_host(["h"], addresses("10.0.0.2")).find(plain) == SiloAddress("10.0.0.2", 11111, 1)
    assert SidecarLocator.on_host(["node-3"], addresses()).find(plain) == SiloAddress("node-3.example.com", 11111, 1)
    assert SidecarLocator.on_host(["h"], addresses("10.0.0.9")).find(plain) is None


def test_a_silo_listening_on_this_host_wins_over_one_whose_property_names_it() -> None:
    """A per-pod sidecar (the pod's own address) is more local than the node's DaemonSet silo."""
    mixed = view(silo("10.0.0.1", spark_host="node-1"), silo("10.1.0.7", spark_host="node-1"))
    assert SidecarLocator.on_host(["node-1"], addresses("10.1.0.7")).find(mixed) == SiloAddress("10.1.0.7", 11111, 1)


def test_several_endpoints_on_this_host_give_no_sidecar_but_a_restart_gives_the_newest() -> None:
    two = view(silo("10.0.0.1", 11111), silo("10.0.0.1", 11112))
    assert SidecarLocator.on_host(["h"], addresses("10.0.0.1")).find(two) is None
    restarted = view(silo("10.0.0.1", 11111, 5, "h"), silo("10.0.0.1", 11111, 9, "h"))
    assert SidecarLocator.on_host(["h"], addresses()).find(restarted) == SiloAddress("10.0.0.1", 11111, 9)


def test_an_endpoint_names_the_sidecar_whatever_its_host() -> None:
    assert SidecarLocator.at("10.0.0.3:11111").find(WORKERS) == SiloAddress("10.0.0.3", 11111, 1)
    assert SidecarLocator.at("10.0.0.3:11111@1").find(WORKERS) == SiloAddress("10.0.0.3", 11111, 1)
    assert SidecarLocator.at("10.0.0.3:11111@2").find(WORKERS) is None
    with pytest.raises(ValueError, match="advertised host:port"):
        SidecarLocator.at(" ")


def test_the_environment_endpoint_wins_over_the_host() -> None:
    locator = executor_sidecar({SIDECAR_ENV: "10.0.0.3:11111", SIDECAR_HOST_ENV: "node-1"}, lambda: "node-2")
    assert locator.find(WORKERS) == SiloAddress("10.0.0.3", 11111, 1)


@pytest.mark.parametrize(
    ("environ", "sidecar"),
    [
        ({}, "10.0.0.2"),  # the host name alone
        ({"NM_HOST": "node-3.example.com"}, None),  # YARN: ambiguous with the host name, so none
        ({SIDECAR_HOST_ENV: "x,node-1"}, None),
        ({SIDECAR_ENV: " "}, "10.0.0.2"),
    ],
)
def test_an_executor_knows_its_host_by_its_environment_and_host_name(
    environ: dict[str, str], sidecar: str | None
) -> None:
    found = executor_sidecar(environ, lambda: "node-2", addresses()).find(WORKERS)
    assert (found and found.host) == sidecar


@pytest.mark.parametrize("variable", ["NM_HOST", "SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP", "SPARK_EXECUTOR_POD_IP"])
def test_each_cluster_managers_variable_names_the_host(variable: str) -> None:
    value = "10.0.0.1" if variable.endswith("IP") else "node-1"
    found = executor_sidecar({variable: value}, lambda: "elsewhere", addresses()).find(WORKERS)
    assert found == SiloAddress("10.0.0.1", 11111, 1)


def test_an_address_of_this_host_binds_and_another_does_not() -> None:
    assert is_local_address("127.0.0.1")
    assert not is_local_address("192.0.2.77")  # TEST-NET-1: on no interface here
    assert not is_local_address(socket.gethostname())  # names are compared, never resolved


def test_the_router_finds_its_sidecar_again_in_each_newer_view() -> None:
    """The sidecar is looked up in every view the router adopts: a restarted sidecar is found again."""
    first = view(silo("10.0.0.1", generation=1, spark_host="h"), silo("10.0.0.2"), version=1)
    second = view(silo("10.0.0.1", generation=2, spark_host="h"), silo("10.0.0.2"), version=2)

    def send(
        address: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int
    ) -> list[bytes]:
        if address.generation == 1 and address.host == "10.0.0.1":
            raise WorkUnavailableError(f"{address} restarted", silo=address, handler=handler)
        return checksum_handler(items)

    locator = SidecarLocator.on_host(["h"], addresses())
    router: Router[int] = Router(first, "example.checksum", send, lambda: second, sidecar=locator, sleep=lambda _: None)
    assert router.sidecar == SiloAddress("10.0.0.1", 11111, 1)
    output = list(router.route([Record(index, f"key-{index}", b"x") for index in range(200)]))
    assert router.sidecar == SiloAddress("10.0.0.1", 11111, 2)
    assert {routed.via_sidecar for routed in output if routed.silo == router.sidecar} == {True}
    assert len(output) == 200
