from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from membership_tables import MembershipTable, SiloAddress, SiloStatus
from silo.errors import SiloError
from silo.exit_codes import ExitCode
from silo.membership.clock import FakeClock, settle
from silo.membership.liveness import freshness_limit
from silo.membership.local_health import MAX_SCORE
from silo.membership.probing import MembershipRpcHandler
from silo.runtime.process import SiloProcessConfig, assemble
from silo.runtime.silo import Silo
from testbed.services.process import free_port
from tests.silo.harness import (
    CLUSTER,
    LOCAL,
    T0,
    FakeNetwork,
    FlakyTable,
    FunctionProber,
    RecordingGossip,
    address,
    async_test,
    cluster_silos,
    make_silo,
    memory_table,
    row,
    seed,
)

ME, PEER = address(1), address(2)


def kill(table: MembershipTable, silo: SiloAddress) -> None:
    data = table.read_all()
    found = data.get(silo)
    assert found is not None
    assert table.update_row(found[0].replace(status=SiloStatus.DEAD), found[1], data.version.next())


@async_test
async def test_the_silo_is_the_rpc_handler_the_server_calls() -> None:
    table, clock = memory_table(), FakeClock(T0)
    seed(table, row(PEER), row(address(3), SiloStatus.DEAD))  # in the table, but never answers
    silo = make_silo(table, ME, clock, prober=FunctionProber(reachable=lambda target: target == PEER))
    handler: MembershipRpcHandler = silo
    await silo.start()
    assert (handler.cluster_id, handler.silo_address, handler.health_score()) == (CLUSTER, ME, 0)
    assert handler.membership_snapshot().get(ME) is not None
    answered = await handler.probe_for_peer(PEER, 1.0)
    assert (answered.succeeded, answered.intermediary_health_score, answered.failure_message) == (True, 0, "")
    watch = asyncio.ensure_future(handler.probe_for_peer(address(3), 1.0))
    await clock.advance(1.0)  # the intermediary watches the silent silo for the whole second
    missed = await watch
    assert not missed.succeeded
    assert "did not answer" in missed.failure_message
    stranger = await handler.probe_for_peer(address(4), 1.0)  # not in the table: never probed
    assert not stranger.succeeded
    assert "not in this silo's membership table" in stranger.failure_message
    await silo.stop()


@async_test
async def test_each_write_is_gossiped_to_the_live_silos_only() -> None:
    table, clock = memory_table(), FakeClock(T0)
    stale = address(4)
    seed(table, row(PEER), row(address(3), SiloStatus.DEAD), row(stale, when=T0 - timedelta(hours=1)))
    gossip = RecordingGossip()
    silo = make_silo(table, ME, clock, gossip=gossip)
    await silo.start()
    await settle()
    version = table.read_all().version.version
    # just joined: a row whose heartbeat we have not watched long enough counts as live
    assert sorted(gossip.sent) == sorted([(PEER, version - 1), (stale, version - 1), (PEER, version), (stale, version)])
    [joined, activated] = [message for _, message in gossip.messages[::2]]
    assert joined.delta is not None
    assert activated.delta is not None
    assert [entry.status for entry, _ in joined.delta.rows] == [SiloStatus.JOINING]
    assert [entry.status for entry, _ in activated.delta.rows] == [SiloStatus.ACTIVE]
    limit = freshness_limit(LOCAL)
    while clock.monotonic() < limit + LOCAL.table_refresh_timeout:  # PEER heartbeats, the stale silo never
        await clock.advance(LOCAL.i_am_alive_table_publish_timeout)
        table.update_i_am_alive(PEER, clock.now())
    await silo.set_properties({"endpoint": "grpc://x"})
    await settle()
    assert [target for target, sent in gossip.sent if sent == version + 1] == [PEER]
    await silo.stop()


@async_test
async def test_gossip_from_a_peer_refreshes_the_view() -> None:
    table, clock = memory_table(), FakeClock(T0)
    network = FakeNetwork()
    first, second = cluster_silos(table, clock, network, [1, 2])
    await first.start()
    await second.start()
    await settle()
    assert first.snapshot.status_of(second.silo_address) is SiloStatus.ACTIVE  # gossip, no refresh tick yet
    assert first.snapshot.version == second.snapshot.version
    await second.stop()
    await settle()
    assert first.snapshot.status_of(second.silo_address) is SiloStatus.DEAD
    await first.stop()


@async_test
async def test_the_silo_terminates_itself_when_it_reads_itself_dead() -> None:
    table, clock = memory_table(), FakeClock(T0)
    silo = make_silo(table, ME, clock)
    await silo.start()
    kill(table, ME)
    await clock.advance(LOCAL.table_refresh_timeout)
    assert await silo.wait_terminated() is ExitCode.DECLARED_DEAD
    assert silo.status is SiloStatus.DEAD
    assert "Dead" in silo.termination_reason
    await silo.stop()  # a no-op now
    assert await silo.wait_terminated() is ExitCode.DECLARED_DEAD


@async_test
async def test_the_silo_terminates_itself_when_a_newer_generation_joins() -> None:
    table, clock = memory_table(), FakeClock(T0)
    old = make_silo(table, ME, clock)
    await old.start()
    new = make_silo(table, address(1, generation=2), clock, prober=FunctionProber(reachable=lambda target: False))
    await new.start()  # declares the old generation Dead
    await clock.advance(LOCAL.table_refresh_timeout)
    assert await old.wait_terminated() is ExitCode.DECLARED_DEAD
    assert new.status is SiloStatus.ACTIVE
    await new.stop()


@async_test
async def test_snapshots_arrive_in_version_order() -> None:
    table, clock = memory_table(), FakeClock(T0)
    silo = make_silo(table, ME, clock)
    seen: list[int] = []

    async def watch() -> None:
        async for snapshot in silo.snapshots():
            seen.append(snapshot.version)

    watcher = asyncio.create_task(watch())
    await silo.start()
    await silo.set_properties({"k": "v"})
    await settle()
    await silo.stop()
    await watcher
    assert seen == sorted(set(seen))
    assert seen[-1] >= 3


@async_test
async def test_start_twice_and_stop_before_start() -> None:
    table, clock = memory_table(), FakeClock(T0)
    never_started = make_silo(table, ME, clock)
    await never_started.stop()
    assert await never_started.wait_terminated() is ExitCode.OK
    silo: Silo = make_silo(table, PEER, clock)
    await silo.start()
    with pytest.raises(SiloError, match="already started"):
        await silo.start()
    await silo.stop()


async def outage_with_one_silo_unreachable(probe_periods: int) -> tuple[FlakyTable, FakeClock, FakeNetwork, list[Silo]]:
    """Three Active silos; then the table goes down and the third silo becomes unreachable."""
    flaky, clock, network = FlakyTable(memory_table()), FakeClock(T0), FakeNetwork()
    silos = cluster_silos(flaky, clock, network, [1, 2, 3])
    for silo in silos:
        await silo.start()
    flaky.down = True
    network.partitioned.add(silos[2].silo_address)  # probes of it fail all through the outage
    for _ in range(probe_periods):
        await clock.advance(LOCAL.probe_timeout)
    return flaky, clock, network, silos


@async_test
async def test_a_table_outage_never_leads_to_a_death_declaration() -> None:
    flaky, clock, network, silos = await outage_with_one_silo_unreachable(20)
    assert flaky.failed_calls > 0
    network.partitioned.clear()
    flaky.down = False
    for _ in range(20):
        await clock.advance(LOCAL.probe_timeout)
    data = flaky.inner.read_all()
    assert [entry.status for entry in data.entries] == [SiloStatus.ACTIVE] * 3
    assert all(entry.suspect_times == () for entry in data.entries)
    assert [silo.status for silo in silos] == [SiloStatus.ACTIVE] * 3
    for silo in silos:
        await silo.stop()


@async_test
async def test_after_an_outage_a_silo_still_unreachable_is_declared_dead_after_the_grace_period() -> None:
    flaky, clock, _, silos = await outage_with_one_silo_unreachable(10)
    victim = silos[2].silo_address
    flaky.down = False
    await clock.advance(LOCAL.probe_timeout)
    found = flaky.inner.read_all().get(victim)
    assert found is not None
    assert found[0].status is SiloStatus.ACTIVE  # still within the grace after the outage
    for _ in range(int(LOCAL.stale_after / LOCAL.probe_timeout) + 6):
        await clock.advance(LOCAL.probe_timeout)
    found = flaky.inner.read_all().get(victim)
    assert found is not None
    assert found[0].status is SiloStatus.DEAD
    for silo in silos:
        await silo.stop()


@pytest.mark.parametrize(
    ("asked", "given"),
    [(0.2, 0.2), (LOCAL.probe_timeout, LOCAL.probe_timeout), (1e9, LOCAL.detection_time * (MAX_SCORE + 1))],
)
def test_an_indirect_probe_for_a_peer_waits_at_most_a_degraded_suspicion_time(asked: float, given: float) -> None:
    """A peer may ask for any timeout; ours is capped at what the most degraded honest caller asks for
    (a round watches until the caller's silence is a suspicion)."""
    prober = FunctionProber()

    @async_test
    async def scenario() -> None:
        table = memory_table()
        seed(table, row(PEER))
        silo = make_silo(table, ME, FakeClock(T0), prober=prober)
        await silo.start()
        prober.timeouts.clear()
        result = await silo.probe_for_peer(PEER, asked)
        assert result.succeeded
        await silo.stop()

    scenario()
    assert prober.timeouts[0] == pytest.approx(given)


@async_test
async def test_a_host_of_many_silos_reads_the_table_once_for_their_generations() -> None:
    """``assemble(..., known_silos)``: the generation still outranks a known older one at the
    same endpoint, without a whole-table read per silo (``benchmarks.silo_host`` starts 50)."""
    table = FlakyTable(memory_table())
    port = free_port()
    future = SiloAddress("127.0.0.1", port, 2**50)  # a generation far ahead of the wall clock
    elsewhere = SiloAddress("127.0.0.1", port + 1, 2**51)
    stack = assemble(table, SiloProcessConfig(CLUSTER, port=port), known_silos=[future, elsewhere])
    try:
        assert stack.silo.silo_address == SiloAddress("127.0.0.1", port, 2**50 + 1)
        assert table.calls == []
    finally:
        await stack.close()
    alone = SiloAddress("127.0.0.1", free_port(), 2**50)
    seed(table.inner, row(alone))
    stack = assemble(table, SiloProcessConfig(CLUSTER, port=alone.port))  # one silo: it reads the table itself
    try:
        assert stack.silo.silo_address.generation == 2**50 + 1
        assert table.calls == ["read_all"]
    finally:
        await stack.close()


@async_test
async def test_the_row_carries_the_advertised_address_and_the_server_binds_the_given_one() -> None:
    port = free_port()
    config = SiloProcessConfig(CLUSTER, port=port, advertise_host="10.9.8.7", advertise_port=4242, gateway_port=0)
    stack = assemble(memory_table(), config)
    try:
        assert (stack.silo.silo_address.host, stack.silo.silo_address.port) == ("10.9.8.7", 4242)
        assert stack.server.port == port
        assert stack.gateway_port not in (0, port)  # gateway port 0: a free port, not "no gateway"
    finally:
        await stack.close()
    stack = assemble(memory_table(), SiloProcessConfig(CLUSTER))
    try:
        assert stack.gateway_port == 0  # no gateway_port: no gateway
        assert stack.silo.silo_address.endpoint == f"127.0.0.1:{stack.server.port}"
    finally:
        await stack.close()
