"""The membership lease under real network faults, with a real PostgreSQL table on the network.

Each silo is a ``silo run`` process on its own ``NetworkLab`` host and the table is a throwaway
PostgreSQL server on a lab host of its own (``NetCluster(table="postgres")``), so a fault can
cut a silo from its peers, from the table, or both (``testbed/net_cluster.py``). What the
lease (``silo.membership.lease``) must guarantee:

* a silo cut off from peers and table fences itself (health NOT_SERVING, no work) within
  ``lease_timeout`` of the cut, before the others declare it Dead, and exits (code 3) once it
  can read that;
* a table down for everyone fences nobody and kills nobody (every member says the same);
* a silo cut off from the table only is confirmed by its peers: never fenced, never Dead;
* a silo cut off from its peers only keeps the table: it reads itself Dead at its next lease
  renewal and exits;
* a silo frozen (SIGSTOP) until it was declared Dead serves nothing after it resumes.

The tests print what they measured from the cut (``fenced after``, ``declared Dead after``):
run them with ``-s`` to see the figures. Times come from the silos' log lines (their wall
clock) and from the recorded history of table writes (``recorded_at``: just before the write was
issued), all on this machine's clock. The Dead write is timed by its ``recorded_at``; it
commits a few milliseconds later.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from membership_tables import SiloStatus
from membership_tables.history import HistoryRecord, load_history
from silo.exit_codes import ExitCode
from silo.membership.options import SiloOptions
from silo.work.handlers import ECHO_HANDLER
from silo.work.token_sink import TokenSink
from testbed.cluster_harness import ROOT
from testbed.net_cluster import (
    HEALTH_CHECK,
    PORT,
    TABLE_HOST,
    NetCluster,
    NetSilo,
    active_and_running,
    nobody_dead,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# --- timing, derived from the ``local`` preset every silo runs with ----------------------------
OPTIONS = SiloOptions.local()
LEASE = OPTIONS.lease_timeout
"""1 s: a silo the table has not confirmed Active for this long is fenced."""
FLOOR = OPTIONS.detection_time
"""1.5 s: the detection floor, the silence after which a silo is suspected."""
LAG = 0.5
"""Seconds of scheduling lag allowed on top of a protocol bound: five Python silos, PostgreSQL and
the test share two cores, and a log line is written when the event loop gets to it."""
DEATH_BOUND = 30.0
"""Seconds from a fault until the cut-off silo is Dead in the table: a correctness bound for a
loaded two-core machine (``test_network_faults.DEATH_BOUND``), not a speed goal."""
EXIT_BOUND = 30.0
"""Seconds from a heal until a silo declared Dead meanwhile has exited. After a long cut TCP
retransmits to the table only every few seconds (exponential backoff), so its calls that hung
through the cut may need that long to come back and show it Dead."""
TABLE_OUTAGE = float(os.environ.get("SILO_TABLE_OUTAGE_SECONDS", "20"))
"""Seconds the table is cut off from every silo. The issue's target is 5 minutes (300 s); the
suite keeps it short, a long run sets SILO_TABLE_OUTAGE_SECONDS=300 (the test's timeout grows
with it)."""
TABLE_CUT_HOLD = 10.0
"""Seconds one silo is cut off from the table only: ten lease timeouts, forty renewals, over six
detection floors, three vote expiries (death_vote_expiration 3 s)."""
VIEWS_SETTLE = 1.0
"""Seconds between the last join and a table outage for everyone: the views agree by then."""
AFTER_HEAL = 5.0
"""Seconds every silo must stay Active and running after a heal: over two table refreshes (2 s),
five lease timeouts."""
MIN_VOTERS = OPTIONS.num_votes_for_death_declaration
FREEZE = 2 * FLOOR
"""3 s of SIGSTOP: twice the detection floor, so the others declare the frozen silo Dead meanwhile."""
WORK_TIMEOUT = 2.0
"""Seconds a Work call to the frozen silo may wait: the calls sent just before SIGCONT are still
waiting, in its socket, when it resumes."""
WORK_AFTER_RESUME = 3.0
"""Seconds the client keeps calling the resumed silo (it exits within about one renewal)."""
WORK_CLIENTS = 4
"""Threads calling at once, so calls are in flight at every instant around the resume."""

FENCED = "is fenced"
UNFENCED = "is no longer fenced"
TERMINATES = "terminates itself"

WORK_CALLS = """
import itertools, json, sys, threading, time
from membership_tables import SiloAddress
from silo.work.client import SyncWorkClient, WorkError, WorkNotOwnedError, WorkUnavailableError
from silo.work.hashring import HashRing
cluster_id, target, handler = sys.argv[1], SiloAddress.parse(sys.argv[2]), sys.argv[3]
timeout, seconds, threads = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
ring = HashRing(SiloAddress.parse(silo) for silo in sys.argv[7].split(","))
key = next(key for key in (f"key-{i}" for i in itertools.count()) if ring.owner(key) == target)
FAILED = (WorkUnavailableError, WorkError, WorkNotOwnedError)
client = SyncWorkClient(cluster_id, sender="fencing test")
deadline = time.time() + 10.0
while True:  # opens the HTTP/2 connection; a silo that just joined serves its keys after its takeover wait
    try:
        client.process(target, handler, [(key, b"up")], timeout=10.0)
        print("warm ok", flush=True)
        break
    except WorkNotOwnedError as exc:
        if time.time() > deadline:
            print("warm", exc, flush=True)
            break
        time.sleep(0.1)
    except FAILED as exc:
        print("warm", exc, flush=True)
        break
sys.stdin.readline()  # "go": from now on, call continuously
results, lock = [], threading.Lock()
stop_at = time.time() + seconds

def call_continuously():
    while time.time() < stop_at:
        sent = time.time()
        try:
            client.process(target, handler, [(key, b"payload")], timeout=timeout)
            outcome = "ok"
        except FAILED as exc:
            outcome = str(exc)
        with lock:
            results.append({"sent": sent, "done": time.time(), "outcome": outcome})
        if outcome != "ok":
            time.sleep(0.01)  # a refused connection fails at once: do not spin

workers = [threading.Thread(target=call_continuously) for _ in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
print(json.dumps(results), flush=True)
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    """A lab with the PostgreSQL table on host ``pg`` and no silos yet; all gone after the test."""
    with NetCluster(tmp_path, table="postgres") as net_cluster:
        yield net_cluster


def log_times(silo: NetSilo, text: str) -> list[float]:
    """Wall-clock times (epoch seconds) of the silo's log lines that contain ``text``.

    A text log line starts with ``asctime`` in local time: ``2026-11-28 15:48:59,123``."""
    times = []
    for line in silo.log_text().splitlines():
        if text in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.astimezone(UTC).timestamp())
    return times


def first_log_time(silo: NetSilo, text: str, timeout: float = 10.0) -> float:
    """The time of the silo's first log line with ``text``, waiting up to ``timeout`` for it."""
    deadline = time.monotonic() + timeout
    while not (found := log_times(silo, text)):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{silo.name} never logged {text!r}:\n{silo.log_tail()}")
        time.sleep(0.1)
    return found[0]


def dead_write(cluster: NetCluster, name: str, timeout: float = 10.0) -> HistoryRecord:
    """The recorded write of ``name``'s row as Dead by another silo (waits for its record)."""
    address = cluster.silo(name).address
    deadline = time.monotonic() + timeout
    while True:
        for record in load_history(cluster.history_dir):
            if record.silo == address and record.entry.status is SiloStatus.DEAD and record.writer != str(address):
                return record
        if time.monotonic() >= deadline:
            raise AssertionError(f"no recorded Dead write of {name}\n{cluster.describe()}")
        time.sleep(0.1)


def health(cluster: NetCluster, name: str, via: str | None = None) -> str:
    """``name``'s gRPC health status (``SERVING``, ``NOT_SERVING``), asked from ``via``'s host
    (default: its own, where no lab fault cuts it off from itself)."""
    host = cluster.host(via or name)
    result = host.run([sys.executable, "-c", HEALTH_CHECK, f"{cluster.host(name).address}:{PORT}"], timeout=60)
    assert result.returncode == 0, f"health check of {name} from {host.name} failed: {result.stderr}"
    return result.stdout.strip()


def fenced_spans(silo: NetSilo) -> list[tuple[float, float | None]]:
    """(fenced at, unfenced at or None) of each time the silo fenced itself, from its log."""
    spans: list[tuple[float, float | None]] = []
    for fenced in log_times(silo, FENCED):
        unfenced = [at for at in log_times(silo, UNFENCED) if at >= fenced]
        spans.append((fenced, unfenced[0] if unfenced else None))
    return spans


def describe_fencing(cluster: NetCluster, cut: float, healed: float) -> str:
    """Who fenced, when (seconds from the cut) and for how long in all: for the printed figures."""
    parts, now = [], time.time()
    for silo in cluster.silos:
        spans = fenced_spans(silo)
        if spans:
            total = sum((now if end is None else end) - start for start, end in spans)
            last = spans[-1][1]
            still, since = ("still fenced", now) if last is None else ("unfenced for good", last)
            until = f"{still} {since - healed:.2f}s after the heal"
            parts.append(
                f"{silo.name} fenced {len(spans)}x, first {spans[0][0] - cut:.2f}s after the cut, "
                f"{total:.1f}s in all, {until}"
            )
    return "; ".join(parts) or "nobody fenced"


def assert_never_fenced(cluster: NetCluster, names: Sequence[str]) -> None:
    for name in names:
        silo = cluster.silo(name)
        assert not log_times(silo, FENCED), f"{name} fenced itself:\n{silo.log_tail()}"


def test_a_silo_cut_off_from_peers_and_table_fences_itself_before_it_is_declared_dead(cluster: NetCluster) -> None:
    """1|4 with the table on the majority side: the isolated silo fences within ``lease_timeout``,
    while the others are still detecting it; it reports NOT_SERVING and refuses work, and exits
    (code 3) once the heal lets it read that it was declared Dead."""
    cluster.start(5)
    victim, others = "s5", ["s1", "s2", "s3", "s4"]
    silo = cluster.silo(victim)

    cut = time.time()
    cluster.lab.isolate(cluster.host(victim))
    cluster.wait_until_dead(victim, others, "isolated", DEATH_BOUND)
    fenced = first_log_time(silo, FENCED)
    dead = dead_write(cluster, victim).recorded_at.timestamp()
    print(f"\n[cut off from peers and table] fenced after {fenced - cut:.2f}s, declared Dead after {dead - cut:.2f}s")
    assert not cluster.reachable(victim, TABLE_HOST), "isolation must cut the silo off from the table"
    assert not cluster.reachable(victim, "s1"), "isolation must cut the silo off from its peers"
    assert cluster.reachable("s1", TABLE_HOST), "the others must keep the table"

    assert fenced - cut <= LEASE + LAG, f"fenced {fenced - cut:.2f}s after the cut; lease_timeout is {LEASE}s"
    assert fenced < dead, f"declared Dead {fenced - dead:.2f}s before it fenced itself:\n{silo.log_tail()}"
    assert silo.running, f"{victim} exited while cut off from the table:\n{silo.log_tail()}"
    assert health(cluster, victim) == "NOT_SERVING", "a fenced silo must fail its health check"
    refusals = work_calls(cluster, victim, via=victim, seconds=0.3)
    assert refusals, "the Work client must have called the fenced silo"
    assert all(FENCED in outcome for _, outcome in refusals), f"fenced {victim} served work: {refusals}"

    cluster.lab.heal()
    healed = time.time()
    code = silo.wait_exit(EXIT_BOUND)
    print(f"[cut off from peers and table] exited with {code} {time.time() - healed:.2f}s after the heal")
    assert code == ExitCode.DECLARED_DEAD, silo.log_tail()
    cluster.check_history(MIN_VOTERS, protected=others)


@pytest.mark.timeout(max(240, TABLE_OUTAGE + 180))
def test_a_table_outage_for_everyone_fences_nobody_and_kills_nobody(cluster: NetCluster) -> None:
    """The table is cut off from every silo (the silos still reach each other) for
    ``TABLE_OUTAGE``: every member answers that it cannot reach the table at the same view, so
    nobody fences, and nobody can be declared Dead; after the heal all are Active."""
    cluster.start(5)
    # an outage vouch needs every member at one view version: let the last join reach every view
    # (gossip takes milliseconds; cut at once, a silo that joined last once fenced for 0.1 s)
    time.sleep(VIEWS_SETTLE)
    cut = time.time()
    cluster.lab.partition(cluster.hosts, [cluster.host(TABLE_HOST)])
    assert not cluster.reachable("s1", TABLE_HOST), "the partition must cut the silos off from the table"
    assert cluster.reachable("s1", "s5"), "the silos must still reach each other"

    cluster.hold(nobody_dead, TABLE_OUTAGE, f"nobody Dead, every silo running through a {TABLE_OUTAGE:.0f}s outage")
    serving = {name: health(cluster, name, via="s1") for name in ("s1", "s5")}
    cluster.lab.heal()
    healed = time.time()
    cluster.wait_for(
        active_and_running(cluster.names),
        EXIT_BOUND,
        "every silo Active and running after the heal",
        invariant=nobody_dead,
        invariant_what="nobody Dead",
    )
    cluster.hold(active_and_running(cluster.names), AFTER_HEAL, "every silo Active and running after the heal")
    print(f"\n[table down for everyone, {TABLE_OUTAGE:.0f}s] nobody Dead; {describe_fencing(cluster, cut, healed)}")
    cluster.check_history(MIN_VOTERS, protected=cluster.names)
    assert set(serving.values()) == {"SERVING"}, f"health during the outage: {serving}"
    assert_never_fenced(cluster, cluster.names)


def test_a_silo_cut_off_from_the_table_only_is_confirmed_by_its_peers(cluster: NetCluster) -> None:
    """One silo cannot reach PostgreSQL but reaches its peers: they read its row for it
    (``ConfirmMembership``), so it is never fenced, and never declared Dead."""
    cluster.start(5)
    cut_off = "s5"
    cut = time.time()
    cluster.lab.partition([cluster.host(cut_off)], [cluster.host(TABLE_HOST)])
    assert not cluster.reachable(cut_off, TABLE_HOST), "the partition must cut the silo off from the table"
    assert cluster.reachable(cut_off, "s1"), "the silo must still reach its peers"

    cluster.hold(active_and_running(cluster.names), TABLE_CUT_HOLD, f"every silo Active while {cut_off} has no table")
    serving = health(cluster, cut_off, via="s1")
    cluster.lab.heal()
    healed = time.time()
    cluster.hold(active_and_running(cluster.names), AFTER_HEAL, "every silo Active and running after the heal")
    fencing = describe_fencing(cluster, cut, healed)
    print(f"\n[cut off from the table only, {TABLE_CUT_HOLD:.0f}s] never Dead; {fencing}")
    cluster.check_history(MIN_VOTERS, protected=cluster.names)
    assert serving == "SERVING", f"{cut_off}'s health while cut off from the table: {serving}"
    assert_never_fenced(cluster, cluster.names)


def test_a_silo_cut_off_from_its_peers_only_reads_itself_dead_and_exits(cluster: NetCluster) -> None:
    """1|4 with the table reachable from both sides: the majority declares the lone silo Dead;
    it still reads its own row every ``lease_renew_interval``, so it stops (fenced or exited)
    within the takeover wait of the Dead write, and exits with code 3."""
    cluster.start(5)
    victim, others = "s5", ["s1", "s2", "s3", "s4"]
    silo = cluster.silo(victim)

    cut = time.time()
    cluster.lab.partition([cluster.host(victim)], cluster.hosts_of(others))
    code = silo.wait_exit(DEATH_BOUND)
    exited = time.time()
    dead = dead_write(cluster, victim).recorded_at.timestamp()
    stopped = min([*log_times(silo, FENCED), first_log_time(silo, TERMINATES)])
    print(
        f"\n[cut off from peers only] declared Dead after {dead - cut:.2f}s; stopped serving "
        f"{stopped - dead:.2f}s after the Dead write ({'fenced' if log_times(silo, FENCED) else 'read itself Dead'}), "
        f"exit seen {exited - dead:.2f}s after it"
    )
    assert code == ExitCode.DECLARED_DEAD, silo.log_tail()
    assert cluster.reachable(victim, TABLE_HOST), "the silo must have kept the table"
    assert not cluster.reachable(victim, "s1"), "the partition must cut the silo off from its peers"
    assert stopped - dead <= OPTIONS.takeover_wait + LAG, (
        f"{victim} went on {stopped - dead:.2f}s after it was written Dead:\n{silo.log_tail()}"
    )
    assert exited - dead <= LEASE + LAG, f"{victim} exited {exited - dead:.2f}s after it was written Dead"
    cluster.hold(active_and_running(others), AFTER_HEAL, "the other silos Active and running")
    cluster.check_history(MIN_VOTERS, protected=others)


def test_a_silo_frozen_until_declared_dead_serves_nothing_when_it_resumes(cluster: NetCluster) -> None:
    """SIGSTOP for twice the detection floor: the others declare the silo Dead meanwhile. A client
    on another host keeps calling its ``Work.Process`` from just before SIGCONT: the calls waiting
    in its socket when it resumes, and every later one, must fail; it exits with code 3."""
    cluster.start(5)
    victim, others = "s5", ["s1", "s2", "s3", "s4"]
    silo = cluster.silo(victim)
    client = start_work_calls(cluster, victim, via="s1", seconds=WORK_AFTER_RESUME)

    frozen = time.time()
    silo.freeze()
    cluster.wait_until_dead(victim, others, "frozen", DEATH_BOUND)
    dead = dead_write(cluster, victim).recorded_at.timestamp()
    time.sleep(max(0.0, frozen + FREEZE - 0.3 - time.time()))
    assert client.stdin is not None
    client.stdin.write(b"go\n")
    client.stdin.flush()
    time.sleep(0.3)
    resumed = time.time()
    silo.thaw()
    code = silo.wait_exit(EXIT_BOUND)
    exited = time.time()
    results = finish_work_calls(client)

    served = [(round(sent - resumed, 3), outcome) for sent, outcome in results if outcome == "ok"]
    outcomes = Counter(kind_of(outcome) for _, outcome in results)
    terminated = first_log_time(silo, TERMINATES)
    print(
        f"\n[SIGSTOP {resumed - frozen:.1f}s] declared Dead after {dead - frozen:.2f}s; after SIGCONT: "
        f"terminated itself after {terminated - resumed:.2f}s, exit seen after {exited - resumed:.2f}s; "
        f"calls from 0.3s before SIGCONT: {dict(outcomes)}"
    )
    assert dead < resumed, "the others must have declared the frozen silo Dead before it resumed"
    assert code == ExitCode.DECLARED_DEAD, silo.log_tail()
    assert results, "the client must have called the silo around the resume"
    assert not served, f"the resumed silo served work after it was declared Dead: {served}\n{silo.log_tail()}"
    cluster.check_history(MIN_VOTERS, protected=others)


# --- Work calls from a lab host -----------------------------------------------------------------


def active_addresses(cluster: NetCluster) -> list[str]:
    """The silos' addresses, for the client to pick a key its target owns on their ring."""
    addresses = [cluster.silo(name).address for name in cluster.names]
    return [str(address) for address in addresses if address is not None]


def start_work_calls(
    cluster: NetCluster, name: str, *, via: str, seconds: float, connected: bool = True
) -> subprocess.Popen[bytes]:
    """Start a client on ``via``'s host that makes one call to ``name`` now (which opens the
    connection; with ``connected`` it must succeed), then, once it reads a line on stdin, calls
    ``name``'s ``Work.Process`` continuously for ``seconds``."""
    address = cluster.silo(name).address
    argv = [sys.executable, "-c", WORK_CALLS, cluster.cluster_id, str(address), ECHO_HANDLER]
    argv += [str(WORK_TIMEOUT), str(seconds), str(WORK_CLIENTS), ",".join(active_addresses(cluster))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"}
    client = cluster.host(via).popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert client.stdout is not None
    line = client.stdout.readline().decode(errors="replace").strip()
    assert line.startswith("warm"), f"the Work client could not start: {line!r}"
    if connected:
        assert line == "warm ok", f"the Work client could not call {name}: {line!r}"
    return client


def kind_of(outcome: str) -> str:
    """A Work call's outcome in a word, for the printed summary."""
    if outcome == "ok":
        return "served"
    for kind, marker in (("refused as fenced", FENCED), ("not Active", "not ACTIVE"), ("timed out", "DEADLINE")):
        if marker in outcome:
            return kind
    return "unreachable" if "UNAVAILABLE" in outcome else outcome


def finish_work_calls(client: subprocess.Popen[bytes]) -> list[tuple[float, str]]:
    """(sent at, "ok" or the error) of every call the client made after "go"."""
    output, _ = client.communicate(timeout=WORK_AFTER_RESUME + WORK_TIMEOUT + 30)
    assert client.returncode == 0, f"the Work client failed ({client.returncode})"
    return [(result["sent"], result["outcome"]) for result in json.loads(output)]


def work_calls(cluster: NetCluster, name: str, *, via: str, seconds: float) -> list[tuple[float, str]]:
    """Call ``name``'s ``Work.Process`` from ``via``'s host (once, then for ``seconds``); the results."""
    client = start_work_calls(cluster, name, via=via, seconds=seconds, connected=False)
    assert client.stdin is not None
    client.stdin.write(b"go\n")
    client.stdin.flush()
    return finish_work_calls(client)


ROUTED_JOB = """
import json, sys, time
from membership_tables import open_table
from silo.client.topology import ClusterView
from silo.work.client import SyncWorkClient
from silo.work.routing import Record, Router
table_uri, cluster_id, handler = sys.argv[1], sys.argv[2], sys.argv[3]
count, chunk, pause = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
table = open_table(table_uri, cluster_id)
def view():
    return ClusterView.from_table_data(cluster_id, table.read_all())
client = SyncWorkClient(cluster_id, sender="routed job")
def send(silo, name, items, *, view_version):
    return client.process(silo, name, items, timeout=1.0, view_version=view_version)
router = Router(view(), handler, send, view)
print("started", flush=True)
results = []
for start in range(0, count, chunk):
    records = [Record(i, f"key-{i}", f"value-{i}".encode()) for i in range(start, min(count, start + chunk))]
    results += [[routed.key, routed.result.decode(), str(routed.silo)] for routed in router.route(records, 50)]
    time.sleep(pause)
print(json.dumps(results), flush=True)
"""
"""A driver on a lab host of its own: routes ``count`` records in chunks (a pause after each, so a
cut lands mid-job) to ``handler`` and prints every record's result and silo as JSON."""

JOB_RECORDS, JOB_CHUNK, JOB_PAUSE = 6000, 200, 0.15
SINK_HANDLER = "fenced.sink"


def test_a_routed_job_across_a_cut_loses_nothing_and_no_stale_owner_write_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job routes records to their owners, whose handler stores each in a token-checking sink,
    while one silo is cut off from its peers, the table and the driver: every record is processed
    once in the output, the sink holds every record and refused no write (no stale owner wrote
    after a newer one), and the serving claims never overlap (``check_history``)."""
    sink = tmp_path / "sink.db"
    monkeypatch.setenv("SILO_TEST_SINK", str(sink))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    handler = f"{SINK_HANDLER}=tests.silo.work_handlers:token_sink"
    with NetCluster(tmp_path, table="postgres", extra_args=["--handler", handler]) as cluster:
        cluster.start(5)
        victim, others = "s3", ["s1", "s2", "s4", "s5"]
        driver = cluster.lab.add_host("drv")
        argv = [sys.executable, "-c", ROUTED_JOB, cluster.table_uri, cluster.cluster_id, SINK_HANDLER]
        argv += [str(JOB_RECORDS), str(JOB_CHUNK), str(JOB_PAUSE)]
        job = driver.popen(argv, stdout=subprocess.PIPE, env={**os.environ, "GRPC_VERBOSITY": "ERROR"})
        assert job.stdout is not None
        assert job.stdout.readline().decode().strip() == "started", "the driver could not start"
        time.sleep(1.0)
        cluster.lab.isolate(cluster.host(victim))
        cut = time.time()
        output, _ = job.communicate(timeout=180)
        finished = time.time()
        assert job.returncode == 0, f"the driver failed (exit {job.returncode}):\n{cluster.describe()}"
        results = json.loads(output.decode().strip().splitlines()[-1])

        keys = sorted(key for key, _, _ in results)
        assert keys == list(range(JOB_RECORDS)), "every record exactly once in the output"
        outcomes = Counter(result for _, result, _ in results)
        assert outcomes == {"stored": JOB_RECORDS}, f"a write under a stale token: {outcomes}"
        stored = TokenSink(f"sqlite:///{sink}")
        for key in range(JOB_RECORDS):
            row = stored.read(f"key-{key}")
            assert row is not None, f"key-{key} missing from the sink"
            assert row[1] == f"value-{key}".encode()
        by_silo = Counter(silo for _, _, silo in results)
        took = finished - cut
        print(f"\n[routed job across a cut] {JOB_RECORDS} records, done {took:.1f}s after the cut; {dict(by_silo)}")

        cluster.wait_until_dead(victim, others, "cut off", DEATH_BOUND)
        cluster.lab.heal()
        assert cluster.silo(victim).wait_exit(EXIT_BOUND) == ExitCode.DECLARED_DEAD
        cluster.check_history(MIN_VOTERS, protected=others)
