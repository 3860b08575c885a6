"""Clusters of real ``silo run`` processes over mutual TLS (development CA certificates, SQLite).

The TLS side of issue 12's acceptance: a TLS cluster detects failures as before; silos with a
certificate of another cluster, of an untrusted CA, an expired one, or no TLS are refused and
change nothing in the table; rotated files are picked up without a restart; Work and the
membership need a client certificate, and a client certificate cannot probe or gossip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from membership_tables import MembershipTableData, SiloStatus
from silo.client import MembershipClient
from silo.exit_codes import ExitCode
from silo.membership.probing import GossipMessage
from silo.wire.admission import TRANSPORT_PROPERTY
from silo.wire.peer_identity import Role
from silo.wire.prober import GrpcProber
from silo.wire.tls import TlsSettings
from silo.work.client import SyncWorkClient, WorkUnavailableError
from testbed.cluster_harness import SLACK, Cluster, SiloProcess, death_bound
from tests.silo.certificates import TestCa, tls_flags

pytestmark = pytest.mark.slow

CLUSTER = "secure"
JOIN_TIMEOUT = 60.0


@pytest.fixture
def ca(tmp_path: Path) -> TestCa:
    return TestCa(tmp_path / "ca")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, f"sqlite:///{tmp_path / 'membership.db'}", CLUSTER)
    try:
        yield made
    finally:
        made.close()
    made.check_history()


def start_tls(cluster: Cluster, ca: TestCa, count: int, *extra: str) -> list[SiloProcess]:
    """``count`` silos, each with its own certificate, Active."""
    started = [
        cluster.start(1, *tls_flags(ca.issue(f"silo-{len(cluster.silos)}", CLUSTER)), *extra)[0] for _ in range(count)
    ]
    cluster.wait_statuses(started, SiloStatus.ACTIVE, JOIN_TIMEOUT)
    return started


def table_state(data: MembershipTableData) -> tuple[object, ...]:
    """The version and every row with its etag, liveness heartbeats left out (they keep moving)."""
    rows = tuple((entry.replace(i_am_alive_time=entry.start_time), etag) for entry, etag in data.rows)
    return (data.version, rows)


def test_a_tls_cluster_forms_detects_a_kill_and_a_silo_declared_dead_exits(cluster: Cluster, ca: TestCa) -> None:
    silos = start_tls(cluster, ca, 4)
    assert all(cluster.row(silo).properties[TRANSPORT_PROPERTY] == "tls" for silo in silos)

    victim, frozen, survivors = silos[0], silos[1], silos[2:]
    victim.kill()
    cluster.wait_statuses([victim], SiloStatus.DEAD, death_bound(cluster.options))
    frozen.freeze()
    cluster.wait_statuses([frozen], SiloStatus.DEAD, death_bound(cluster.options))
    frozen.thaw()
    assert frozen.wait_exit(cluster.options.table_refresh_timeout + SLACK) == ExitCode.DECLARED_DEAD
    assert cluster.statuses(survivors) == [SiloStatus.ACTIVE] * 2
    for silo in survivors:
        assert "refused" not in silo.log_text(), silo.log_tail()


def test_silos_the_cluster_would_refuse_exit_and_change_nothing_in_the_table(
    cluster: Cluster, ca: TestCa, tmp_path: Path
) -> None:
    members = start_tls(cluster, ca, 2)
    before = table_state(cluster.read())
    rogue_ca = TestCa(tmp_path / "rogue-ca")
    refused = {
        "a certificate of another cluster": tls_flags(ca.issue("stranger", "elsewhere")),
        "a certificate of an untrusted CA": tls_flags(rogue_ca.issue("rogue", CLUSTER)),
        "an expired certificate": tls_flags(ca.issue("expired", CLUSTER, expired=True)),
        "no TLS": [],
    }
    for what, flags in refused.items():
        silo = cluster.launch(*flags)
        assert silo.wait_exit(JOIN_TIMEOUT) == ExitCode.BAD_CONFIGURATION, (what, silo.log_tail())
    assert table_state(cluster.read()) == before
    logs = [silo.log_text() for silo in cluster.silos[2:]]
    assert "not of cluster 'secure'" in logs[0]
    assert "the cluster refuses this silo's TLS identity" in logs[1]
    assert "not now" in logs[2]
    assert "the cluster runs over tls" in logs[3]

    # A peer that skips those checks is refused by the silos themselves, and changes nothing.
    async def intrude() -> list[grpc.StatusCode]:
        codes = []
        async with GrpcProber(CLUSTER, None, tls=ca.issue("intruder", "elsewhere")) as prober:
            for member in members:
                assert member.address is not None
                try:
                    await prober.ping_call(member.address, 10)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
                try:
                    await prober.send(member.address, GossipMessage(10_000))
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
        return codes

    assert asyncio.run(intrude()) == [grpc.StatusCode.PERMISSION_DENIED] * 4
    assert table_state(cluster.read()) == before
    for member in members:
        assert "refused Ping" in member.log_text()
        assert "refused Gossip" in member.log_text()
        assert member.running


def replace_file(target: Path, source: Path) -> None:
    """Swap ``target``'s content for ``source``'s in one rename, as a careful operator would."""
    staged = target.with_suffix(".new")
    shutil.copyfile(source, staged)
    os.replace(staged, target)


def test_rotated_certificates_are_picked_up_by_servers_and_callers_without_a_restart(
    cluster: Cluster, ca: TestCa, tmp_path: Path
) -> None:
    files = tmp_path / "installed"
    files.mkdir()
    new_ca = TestCa(tmp_path / "new-ca")
    installed: list[TlsSettings] = []
    for index in range(2):
        issued = ca.issue(f"silo-{index}", CLUSTER)
        settings = TlsSettings(files / f"silo-{index}.pem", files / f"silo-{index}-key.pem", files / f"ca-{index}.pem")
        for target, source in ((settings.cert, issued.cert), (settings.key, issued.key), (settings.ca, issued.ca)):
            shutil.copyfile(source, target)
        installed.append(settings)
    silos = [cluster.start(1, *tls_flags(settings))[0] for settings in installed]
    cluster.wait_statuses(silos, SiloStatus.ACTIVE, JOIN_TIMEOUT)
    old_client = ca.issue("old-client", CLUSTER, Role.CLIENT)

    # Rotate to a new CA in place: new certificates and keys, and only the new CA trusted.
    for index, settings in enumerate(installed):
        issued = new_ca.issue(f"silo-{index}", CLUSTER)
        replace_file(settings.ca, issued.ca)
        replace_file(settings.key, issued.key)
        replace_file(settings.cert, issued.cert)

    new_client = new_ca.issue("new-client", CLUSTER, Role.CLIENT)
    for silo in silos:
        assert silo.address is not None
        with MembershipClient(CLUSTER, [silo.address.endpoint], tls=new_client, retry_timeout=10) as client:
            assert len(client.view()) == 2  # the server presents the new certificate and trusts the new CA
        with pytest.raises(WorkUnavailableError), SyncWorkClient(CLUSTER, tls=old_client) as work:
            work.process(silo.address, "silo.checksum", [("k", b"v")], timeout=10)

    # The running silos call a newcomer that trusts only the new CA: their callers use the new files.
    (newcomer,) = start_tls_with(cluster, new_ca.issue("newcomer", CLUSTER))
    quiet = cluster.options.detection_time + cluster.options.table_refresh_timeout
    asyncio.run(asyncio.sleep(quiet))
    assert cluster.statuses([*silos, newcomer]) == [SiloStatus.ACTIVE] * 3
    assert all(not entry.suspect_times for entry in cluster.read().entries), cluster.describe()
    assert "refused" not in newcomer.log_text(), newcomer.log_tail()
    for silo in silos:
        assert f"TLS files {silo_cert(silo)} changed" in silo.log_text()


def silo_cert(silo: SiloProcess) -> str:
    """The ``--tls-cert`` a silo was started with."""
    return silo.argv[silo.argv.index("--tls-cert") + 1]


def start_tls_with(cluster: Cluster, settings: TlsSettings) -> list[SiloProcess]:
    started = cluster.start(1, *tls_flags(settings))
    cluster.wait_statuses(started, SiloStatus.ACTIVE, JOIN_TIMEOUT)
    return started


def test_work_and_membership_need_a_client_certificate_which_cannot_ping_or_gossip(
    cluster: Cluster, ca: TestCa
) -> None:
    (silo,) = start_tls(cluster, ca, 1, "--handler", "rev=tests.silo.work_handlers:reverse")
    assert silo.address is not None
    client_tls = ca.issue("app", CLUSTER, Role.CLIENT)

    with SyncWorkClient(CLUSTER, tls=client_tls) as work:
        assert work.process(silo.address, "rev", [("k", b"abc")], timeout=30) == [b"cba"]
    with MembershipClient(CLUSTER, [silo.address.endpoint], tls=client_tls) as client:
        assert client.view().addresses == (silo.address,)
    with pytest.raises(WorkUnavailableError), SyncWorkClient(CLUSTER) as plaintext:
        plaintext.process(silo.address, "rev", [("k", b"abc")], timeout=10)

    async def probe_and_gossip() -> list[grpc.StatusCode]:
        codes = []
        async with GrpcProber(CLUSTER, None, tls=client_tls) as prober:
            assert silo.address is not None
            for call in (prober.ping_call(silo.address, 10), prober.get_membership(silo.address, 10)):
                try:
                    await call
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
        return codes

    before = table_state(cluster.read())
    assert asyncio.run(probe_and_gossip()) == [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.OK]
    assert table_state(cluster.read()) == before
    assert "Ping refused to a certificate of secure with client: it needs the silo role" in silo.log_text()
