"""The Router with function-backed fakes: consistent routing, failover, bounded retries, sidecars."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from membership_tables import SiloAddress, SiloStatus, TableUnavailableError
from silo.client.topology import ClusterView, SiloInfo
from silo.work.client import WorkError, WorkNotOwnedError, WorkUnavailableError
from silo.work.handlers import checksum, checksum_handler
from silo.work.hashring import HashRing
from silo.work.routing import NoLiveSiloError, Record, Routed, Router, exponential_backoff

CLUSTER = "routing-test"
HANDLER = "example.checksum"
A, B, C, D = (SiloAddress("127.0.0.1", 11111 + index, 1_000 + index) for index in range(4))


def view(version: int, *silos: SiloAddress) -> ClusterView:
    infos = tuple(
        SiloInfo(silo, f"silo-{silo.port}", SiloStatus.ACTIVE, 0, {}, datetime(2026, 1, 1, tzinfo=UTC))
        for silo in silos
    )
    return ClusterView(CLUSTER, version, infos)


def records(count: int) -> list[Record[int]]:
    return [Record(index, f"key-{index}", str(index).encode()) for index in range(count)]


class FakeSilos:
    """``send`` backed by the checksum handler; silos in ``down`` refuse like a dead process."""

    def __init__(self, down: Sequence[SiloAddress] = ()) -> None:
        self.down = set(down)
        self.calls: list[tuple[SiloAddress, int]] = []
        self.view_versions: list[int] = []

    def send(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int = 0
    ) -> list[bytes]:
        self.calls.append((silo, len(items)))
        self.view_versions.append(view_version)
        if silo in self.down:
            raise WorkUnavailableError(f"{silo} is gone", silo=silo, handler=handler)
        return checksum_handler(items)


def router(
    start: ClusterView,
    silos: FakeSilos,
    refresh: Callable[[], ClusterView] | None = None,
    **options: object,
) -> tuple[Router[int], list[float]]:
    waits: list[float] = []
    built: Router[int] = Router(
        start,
        HANDLER,
        silos.send,
        refresh or (lambda: start),
        sleep=waits.append,
        **options,  # type: ignore[arg-type]
    )
    return built, waits


def check_complete(output: list[Routed[int]], count: int) -> None:
    """Every record exactly once, with the handler's result for it."""
    assert sorted(routed.key for routed in output) == list(range(count))
    assert all(routed.result == checksum(f"key-{routed.key}", str(routed.key).encode()) for routed in output)


def test_each_key_goes_to_its_ring_owner_in_every_process() -> None:
    start = view(5, A, B, C)
    silos = FakeSilos()
    first, _ = router(start, silos)
    second, _ = router(pickle.loads(pickle.dumps(start)), FakeSilos())  # as an executor gets it
    ring = HashRing([C, A, B])
    output = list(first.route(records(2000), batch_size=64))
    check_complete(output, 2000)
    assert all(routed.silo == ring.owner(f"key-{routed.key}") for routed in output)
    assert all(first.owner(f"key-{index}") == second.owner(f"key-{index}") for index in range(2000))
    assert not any(routed.rerouted or routed.via_sidecar for routed in output)
    assert set(Counter(routed.silo for routed in output)) == {A, B, C}
    assert max(size for _, size in silos.calls) <= 64


def test_a_dead_silo_moves_only_its_own_keys_to_their_next_owners() -> None:
    start = view(5, A, B, C, D)
    silos = FakeSilos(down=[B])
    routing, waits = router(start, silos)
    output = list(routing.route(records(3000), batch_size=100))
    check_complete(output, 3000)
    ring = HashRing(start.addresses)
    for routed in output:
        owners = ring.owners(f"key-{routed.key}", 2)
        if owners[0] == B:
            assert (routed.silo, routed.rerouted) == (owners[1], True)
        else:
            assert (routed.silo, routed.rerouted) == (owners[0], False)
    assert routing.excluded == {B}
    assert sum(1 for silo, _ in silos.calls if silo == B) == 1  # excluded after its first failure
    assert waits == []  # other silos were live: no waiting


def test_a_newer_view_is_adopted_and_an_older_one_ignored() -> None:
    start = view(7, A, B, C)
    older, _ = router(start, FakeSilos(down=[B]), refresh=lambda: view(6, A, B, C, D))
    check_complete(output := list(older.route(records(2000), batch_size=50)), 2000)
    assert older.view.version == 7
    assert D not in {routed.silo for routed in output}

    newer, _ = router(start, FakeSilos(down=[B]), refresh=lambda: view(9, A, C, D))
    check_complete(output := list(newer.route(records(2000), batch_size=50)), 2000)
    assert newer.view.version == 9
    ring = HashRing([A, C, D])
    joined = [routed for routed in output if routed.silo == D]
    assert joined, "records moved to the silo that joined in version 9"
    assert all(ring.owner(f"key-{routed.key}") == D and routed.rerouted for routed in joined)


def test_every_call_carries_the_version_of_the_view_its_batch_was_grouped_on() -> None:
    silos = FakeSilos(down=[B])
    routing, _ = router(view(7, A, B, C), silos, refresh=lambda: view(9, A, C, D))
    check_complete(list(routing.route(records(2000), batch_size=50)), 2000)
    first_failure = next(index for index, (silo, _) in enumerate(silos.calls) if silo == B)
    assert set(silos.view_versions[: first_failure + 1]) == {7}
    assert set(silos.view_versions[first_failure + 1 :]) == {9}, "calls after the failover carry the adopted view"


def test_a_table_outage_while_failing_over_keeps_the_current_view() -> None:
    def unreachable() -> ClusterView:
        raise TableUnavailableError("the table is down")

    routing, _ = router(view(3, A, B), FakeSilos(down=[A]), refresh=unreachable)
    output = list(routing.route(records(500)))
    check_complete(output, 500)
    assert {routed.silo for routed in output} == {B}
    assert routing.view.version == 3


def test_no_live_silo_fails_after_bounded_attempts_with_a_clear_error() -> None:
    silos = FakeSilos(down=[A, B])
    routing, waits = router(view(4, A, B), silos, max_attempts=4)
    with pytest.raises(
        NoLiveSiloError, match=r"no live silo could process a batch for handler 'example.checksum'"
    ) as info:
        list(routing.route(records(100)))
    message = str(info.value)
    assert "after 4 attempts" in message
    assert str(A) in message
    assert str(B) in message
    assert "Start silos" in message
    assert len(silos.calls) <= 4
    assert waits == [exponential_backoff(3)]  # both silos failed: waited once before trying them again


def test_an_empty_view_waits_for_a_silo_to_become_active() -> None:
    reads = iter([view(2), view(3, C)])
    routing, waits = router(view(1), FakeSilos(), refresh=lambda: next(reads))
    output = list(routing.route(records(10)))
    check_complete(output, 10)
    assert {routed.silo for routed in output} == {C}
    assert all(routed.rerouted for routed in output)  # no silo owned them when the job started
    assert waits == [exponential_backoff(1), exponential_backoff(2)]


def test_an_empty_view_that_stays_empty_names_the_problem() -> None:
    routing, waits = router(view(1), FakeSilos(), max_attempts=3)
    with pytest.raises(NoLiveSiloError, match=r"Active silos: none"):
        list(routing.route(records(1)))
    assert len(waits) == 2


def test_handler_errors_propagate_without_failing_over() -> None:
    def broken(
        silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int
    ) -> list[bytes]:
        raise WorkError("handler raised", silo=silo, handler=handler, code="INTERNAL")

    routing: Router[int] = Router(view(1, A, B), HANDLER, broken, lambda: view(1, A, B))
    with pytest.raises(WorkError, match="handler raised"):
        list(routing.route(records(10)))
    assert routing.excluded == frozenset()


def test_a_wrong_number_of_results_is_an_error() -> None:
    routing: Router[int] = Router(
        view(1, A), HANDLER, lambda silo, handler, items, *, view_version: [b"x"], lambda: view(1, A)
    )
    with pytest.raises(WorkError, match="returned 1 results for 5 items"):
        list(routing.route(records(5)))


@pytest.mark.parametrize("sidecar", [B.endpoint, str(B)])
def test_records_the_local_sidecar_owns_are_marked_via_sidecar(sidecar: str) -> None:
    routing, _ = router(view(1, A, B, C), FakeSilos(), sidecar=sidecar)
    assert routing.sidecar == B
    output = list(routing.route(records(1000)))
    check_complete(output, 1000)
    assert {routed.via_sidecar for routed in output if routed.silo == B} == {True}
    assert {routed.via_sidecar for routed in output if routed.silo != B} == {False}


def test_a_sidecar_outside_the_view_is_not_used() -> None:
    routing, _ = router(view(1, A, C), FakeSilos(), sidecar=B.endpoint)
    assert routing.sidecar is None
    assert not any(routed.via_sidecar for routed in routing.route(records(100)))


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts must be a positive int"):
        router(view(1, A), FakeSilos(), max_attempts=0)
    routing, _ = router(view(1, A), FakeSilos())
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        list(routing.route(records(1), batch_size=0))


def test_backoff_doubles_up_to_five_seconds() -> None:
    assert [exponential_backoff(attempt) for attempt in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


class Later:
    """A call in flight to a fake silo: it fails only when its result is asked for, like a real one."""

    def __init__(self, silos: FakeSilos, silo: SiloAddress, items: list[tuple[str, bytes]]) -> None:
        self.silos, self.silo, self.items = silos, silo, items
        self.cancelled = self.done = False

    def result(self) -> list[bytes]:
        self.done = True
        return self.silos.send(self.silo, HANDLER, self.items)

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Shard:
    """Records as a ``Shard`` of the dispatch engine."""

    def __init__(self, records: list[Record[int]]) -> None:
        self.records = records
        self.keys = [record.key for record in records]

    def __len__(self) -> int:
        return len(self.records)

    def take(self, indices: Any) -> Shard:
        return Shard([self.records[index] for index in indices.tolist()])

    def extend(self, others: Sequence[Shard]) -> Shard:
        return Shard([record for shard in (self, *others) for record in shard.records])


def dispatch(
    routing: Router[int], silos: FakeSilos, chunks: list[list[Record[int]]], in_flight: int
) -> tuple[list[Routed[int]], int]:
    """Dispatch ``chunks`` with up to ``in_flight`` calls; returns the results and the most calls seen in flight."""
    calls: list[Later] = []
    most = 0

    def submit(silo: SiloAddress, shard: Shard) -> Later:
        nonlocal most
        calls.append(Later(silos, silo, [(record.key, record.payload) for record in shard.records]))
        most = max(most, sum(not call.done for call in calls))
        return calls[-1]

    output: list[Routed[int]] = []
    for delivery in routing.dispatch((Shard(chunk) for chunk in chunks), submit, 64, in_flight):
        output.extend(
            Routed(record.value, result, delivery.silo, moved, delivery.via_sidecar)
            for record, result, moved in zip(delivery.shard.records, delivery.results, delivery.rerouted, strict=True)
        )
    return output, most


@pytest.mark.parametrize("in_flight", [1, 3, 8])
def test_calls_in_flight_fail_over_like_single_calls(in_flight: int) -> None:
    start = view(5, A, B, C, D)
    silos = FakeSilos(down=[C])
    routing, waits = router(start, silos)
    chunks = [records(3000)[index : index + 100] for index in range(0, 3000, 100)]
    output, most = dispatch(routing, silos, chunks, in_flight)
    check_complete(output, 3000)
    ring = HashRing(start.addresses)
    for routed in output:
        owners = ring.owners(f"key-{routed.key}", 2)
        assert (routed.silo, routed.rerouted) == ((owners[1], True) if owners[0] == C else (owners[0], False))
    assert all(size <= 64 for _, size in silos.calls)
    # A retry sends its pieces at once, one call per new owner, on top of those in flight.
    assert min(in_flight, 2) <= most <= in_flight + len(start.addresses)
    calls_to_c = sum(1 for silo, _ in silos.calls if silo == C)
    assert 1 <= calls_to_c <= in_flight, "calls already in flight to C fail too, later ones go elsewhere"
    assert waits == []


def test_a_handler_error_cancels_the_calls_in_flight() -> None:
    pending: list[Later] = []

    class Broken(FakeSilos):
        def send(
            self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int = 0
        ) -> list[bytes]:
            raise WorkError("handler raised", silo=silo, handler=handler, code="INTERNAL")

    silos = Broken()

    def submit(silo: SiloAddress, shard: Shard) -> Later:
        pending.append(Later(silos, silo, [(record.key, record.payload) for record in shard.records]))
        return pending[-1]

    routing, _ = router(view(1, A, B, C), silos)
    chunks = [Shard(records(1000)[index : index + 100]) for index in range(0, 1000, 100)]
    with pytest.raises(WorkError, match="handler raised"):
        list(routing.dispatch(iter(chunks), submit, 64, 4))
    assert any(call.cancelled for call in pending)


class MovingCluster(FakeSilos):
    """A dies; the survivors refuse its keys (ABORTED) until the cluster moved them (``moved``)."""

    def __init__(self) -> None:
        super().__init__(down=[A])
        self.moved = False
        self.refused = 0

    def send(
        self, silo: SiloAddress, handler: str, items: Sequence[tuple[str, bytes]], *, view_version: int = 0
    ) -> list[bytes]:
        owners = HashRing([A, B, C])
        if silo not in self.down and not self.moved and any(owners.owner(key) == A for key, _ in items):
            self.refused += 1
            raise WorkNotOwnedError(f"{silo}: A's keys are held until its lease ran out", silo=silo, handler=handler)
        return super().send(silo, handler, items, view_version=view_version)


def test_keys_a_silo_does_not_serve_yet_wait_for_the_cluster_instead_of_failing_over_again() -> None:
    start, after = view(5, A, B, C), view(6, B, C)
    silos = MovingCluster()
    views = iter([start] * 6 + [after] * 1000)

    def refresh() -> ClusterView:
        current = next(views)
        silos.moved = current is after
        return current

    routing, waits = router(start, silos, refresh)
    output = list(routing.route(records(300), batch_size=50))
    check_complete(output, 300)
    assert silos.refused > 0, "the survivors refused A's keys while A was still Active in their view"
    assert all(routed.silo != A for routed in output)
    assert waits, "it paused between refusals"
    assert max(waits) <= 1.0


def test_a_batch_refused_for_longer_than_the_failover_timeout_fails_with_every_try() -> None:
    silos = MovingCluster()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    start = view(5, A, B, C)
    routing: Router[int] = Router(
        start, HANDLER, silos.send, lambda: start, sleep=sleep, failover_timeout=10.0, monotonic=lambda: now[0]
    )
    with pytest.raises(NoLiveSiloError, match="A's keys are held"):
        list(routing.route(records(100), batch_size=100))
    assert 10.0 <= now[0] <= 12.0


def test_a_router_rejects_a_failover_timeout_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="failover_timeout"):
        Router(view(1, A), HANDLER, FakeSilos().send, lambda: view(1, A), failover_timeout=0)
