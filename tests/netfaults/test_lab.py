"""The network-fault lab really isolates, cuts and thins traffic between processes, and cleans up.

Every check runs real programs inside the lab's hosts: a TCP echo server, TCP clients and UDP
senders/receivers, each a few lines of Python started with ``sys.executable``. Each host has its
own network stack, so every server can use the same fixed port.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from testbed.netfaults import Host, LabError, NetworkLab, iptables_backend, lab_unavailable_reason, remove_stale_labs
from testbed.services.process import wait_until

UNAVAILABLE = lab_unavailable_reason()
pytestmark = [
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"network lab unavailable: {UNAVAILABLE}"),
    pytest.mark.timeout(120),
]

PORT = 7000
REFUSED_TIMEOUT = 0.6  # seconds a client waits before calling a link cut; on a healthy veth LAN a round trip is ~0.1 ms

ECHO_SERVER = """
import socket, sys, threading
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(16)
print("ready", flush=True)
def serve(conn):
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""

# Connects, checks one echo, prints "ok"; exits 1 with the error if anything fails or times out.
TCP_CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as conn:
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
except Exception as error:
    print(f"{type(error).__name__}: {error}", flush=True)
    sys.exit(1)
print("ok", flush=True)
"""

# Keeps one connection open: echoes once per line read from stdin, printing "ok" or the error.
TCP_SESSION = """
import socket, sys
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
for _ in sys.stdin:
    try:
        conn.sendall(b"ping")
        print("ok" if conn.recv(4) == b"ping" else "bad echo", flush=True)
    except Exception as error:
        print(f"{type(error).__name__}: {error}", flush=True)
"""

# Counts datagrams until its stdin closes, then prints the count.
UDP_RECEIVER = """
import select, socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
sock.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
count = 0
while True:
    readable, _, _ = select.select([sock, sys.stdin], [], [])
    if sock in readable:
        sock.recv(64)
        count += 1
    elif not sys.stdin.readline():
        break
print(count, flush=True)
"""

UDP_SENDER = """
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for number in range(int(sys.argv[3])):
    sock.sendto(b"%d" % number, (sys.argv[1], int(sys.argv[2])))
    time.sleep(0.0002)
"""


def python(host: Host, script: str, *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
    return host.popen([sys.executable, "-c", script, *map(str, args)], **kwargs)


def wait_ready(process: subprocess.Popen[bytes]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line == b"ready\n", f"helper did not start: {line!r}"


def start_echo_server(host: Host) -> subprocess.Popen[bytes]:
    server = python(host, ECHO_SERVER, PORT, stdout=subprocess.PIPE)
    wait_ready(server)
    return server


def tcp_ok(client: Host, server: Host, timeout: float = REFUSED_TIMEOUT) -> bool:
    """One TCP connect + echo from ``client`` to ``server``'s echo server."""
    result = client.run([sys.executable, "-c", TCP_CLIENT, server.address, str(PORT), str(timeout)], timeout=30)
    return result.returncode == 0 and result.stdout.strip() == "ok"


def udp_received(sender: Host, receiver: Host, count: int) -> int:
    """How many of ``count`` datagrams from ``sender`` reach ``receiver``."""
    listener = python(receiver, UDP_RECEIVER, PORT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    wait_ready(listener)
    sent = sender.run([sys.executable, "-c", UDP_SENDER, receiver.address, str(PORT), str(count)], timeout=30)
    assert sent.returncode == 0, sent.stderr
    time.sleep(0.2)  # let the last datagrams cross the bridge before the count is taken
    output, _ = listener.communicate(timeout=10)
    return int(output)


@pytest.fixture
def lab() -> Iterator[NetworkLab]:
    """A three-host lab, each host running the TCP echo server."""
    with NetworkLab("test") as network:
        for name in ("a", "b", "c"):
            start_echo_server(network.add_host(name))
        yield network


def namespaces() -> set[str]:
    output = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in output.splitlines() if line.strip()}


def root_links() -> set[str]:
    output = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip() for line in output.splitlines()}


def test_hosts_reach_each_other_over_tcp(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    assert [a.address, b.address, c.address] == ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
    assert tcp_ok(a, b)
    assert tcp_ok(b, a)
    assert tcp_ok(c, a)


def test_partition_cuts_both_ways_and_heal_restores(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    lab.partition([a], [b, c])
    assert not tcp_ok(a, b)
    assert not tcp_ok(b, a)
    assert not tcp_ok(c, a)
    assert tcp_ok(b, c), "hosts on the same side must still talk"
    lab.heal()
    assert tcp_ok(a, b)
    assert tcp_ok(b, a)
    assert "DROP" not in a.rules() + b.rules() + c.rules()


def test_partition_cuts_an_established_connection_silently(lab: NetworkLab) -> None:
    """A real partition stalls live connections; it does not reset them or fail sends with EPERM."""
    a, b, _ = lab.hosts
    session = python(a, TCP_SESSION, b.address, PORT, REFUSED_TIMEOUT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert session.stdin is not None
    assert session.stdout is not None

    def echo() -> str:
        assert session.stdin is not None
        assert session.stdout is not None
        session.stdin.write(b"\n")
        session.stdin.flush()
        return session.stdout.readline().decode().strip()

    assert echo() == "ok"
    lab.partition([a], [b])
    assert echo().startswith("TimeoutError")
    lab.heal()
    # The echo the partition swallowed is retransmitted once healed, so the stream stays in step.
    deadline = time.monotonic() + 10
    while (reply := echo()) != "ok" and time.monotonic() < deadline:
        pass
    assert reply == "ok"
    session.kill()
    session.wait()


def test_block_drops_one_direction_only(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    lab.block([a], [b])
    assert udp_received(a, b, 20) == 0
    assert udp_received(b, a, 20) == 20, "the reverse direction must still flow"
    # TCP needs both directions, so neither side can open a connection.
    assert not tcp_ok(a, b)
    assert not tcp_ok(b, a)
    assert tcp_ok(a, c)
    assert tcp_ok(c, b)


def test_isolate_cuts_one_host_from_all_others(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    lab.isolate(a)
    assert not tcp_ok(a, b)
    assert not tcp_ok(c, a)
    assert tcp_ok(b, c)
    assert tcp_ok(a, a), "traffic to the host's own address goes over lo and is never cut"


def test_loss_drops_about_the_given_fraction_and_zero_restores(lab: NetworkLab) -> None:
    a, b, _ = lab.hosts
    lab.set_loss(0.3)
    received = udp_received(a, b, 400)
    assert 400 * 0.55 <= received <= 400 * 0.85, f"{400 - received} of 400 lost at 30% loss"
    lab.set_loss(0)
    assert udp_received(a, b, 400) == 400


def test_loss_on_some_hosts_spares_the_others(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    lab.set_loss(1.0, [b])
    assert udp_received(a, b, 50) == 0
    assert udp_received(a, c, 50) == 50
    assert udp_received(b, c, 50) == 50, "loss applies where packets arrive, not where they leave"
    lab.heal()
    assert udp_received(a, b, 50) == 50


def test_link_loss_thins_one_hosts_link_both_ways_and_spares_the_others(lab: NetworkLab) -> None:
    a, b, c = lab.hosts
    lab.set_link_loss(1.0, b)
    assert udp_received(a, b, 50) == 0, "packets to the host are lost"
    assert udp_received(b, c, 50) == 0, "packets from the host are lost"
    assert udp_received(a, c, 50) == 50, "a link without the host stays whole"
    assert udp_received(c, a, 50) == 50
    lab.set_link_loss(0, b)
    assert udp_received(b, a, 50) == 50


def packets_into(host: Host) -> int:
    """Packets the host's INPUT chain has seen (its first rule, the jump to SMF-PART, counts all)."""
    listing = host.run([iptables_backend(), "-L", "INPUT", "-v", "-x", "-n"], check=True).stdout
    return int(listing.splitlines()[2].split()[0])


def test_lab_is_unreachable_from_the_root_namespace_and_cannot_leave(lab: NetworkLab) -> None:
    a = lab.hosts[0]
    root_addresses = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert "10.213." not in root_addresses
    # From the root namespace 10.213.0.1 goes to the default gateway, if any; in some sandboxes
    # that gateway accepts every TCP connection, so only the missing echo and the host's packet
    # counter show that nothing arrived.
    before = packets_into(a)
    client = [sys.executable, "-c", TCP_CLIENT, a.address, str(PORT), str(REFUSED_TIMEOUT)]
    result = subprocess.run(client, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0, f"the root namespace reached {a.address}"
    assert packets_into(a) == before

    assert "default" not in a.run(["ip", "route"]).stdout
    assert a.run(["ip", "-6", "addr"]).stdout.strip() == "", "IPv6 would bypass the IPv4 fault rules"
    # A server in the root namespace is out of reach: 127.0.0.1 is the host's own loopback, and
    # the root's addresses and the internet have no route.
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        port = server.getsockname()[1]
        targets = {"127.0.0.1": "ConnectionRefusedError", "203.0.113.5": "Network is unreachable"}
        for line in root_addresses.splitlines():
            if " lo " not in line:
                targets[line.split()[3].split("/")[0]] = "Network is unreachable"
        for target, error in targets.items():
            result = a.run([sys.executable, "-c", TCP_CLIENT, target, str(port), str(REFUSED_TIMEOUT)], timeout=30)
            assert error in result.stdout, f"lab host to {target}: {result.stdout}"


def test_close_kills_processes_and_removes_everything() -> None:
    links_before = root_links()
    lab = NetworkLab("closing")
    host = lab.add_host("solo")
    lab.set_loss(0.5)
    owned = python(host, "import time; time.sleep(600)")
    # A process from the caller's own launcher, in its own session, that ignores SIGTERM.
    stubborn = subprocess.Popen(
        host.command(
            [
                sys.executable,
                "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(600)",
            ]
        ),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    wait_ready(stubborn)
    ours = {lab.switch_namespace, host.namespace}
    assert ours <= namespaces()
    assert root_links() == links_before, "a lab must not add interfaces to the root namespace"

    started = time.monotonic()
    lab.close(grace=0.3)
    assert time.monotonic() - started < 5
    assert owned.poll() is not None
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    assert not ours & namespaces()
    assert root_links() == links_before
    lab.close()  # idempotent
    with pytest.raises(LabError, match="closed"):
        lab.add_host("late")


def wait_in_namespace(namespace: str, pid: int, timeout: float = 10.0) -> None:
    """Wait until ``pid`` runs in ``namespace``: ``ip netns exec`` enters it after it started, and a
    cleanup that lists the namespace's processes before then leaves that one running."""

    def listed() -> bool:
        pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True)
        return str(pid) in pids.stdout.split()

    wait_until(listed, timeout, f"process {pid} to enter namespace {namespace}")


def test_remove_stale_labs_deletes_namespaces_of_dead_runs() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"smf{dead.pid}x1-a"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "600"])
    try:
        wait_in_namespace(stale, sleeper.pid)
        with NetworkLab("alive") as alive:
            remove_stale_labs()
            assert stale not in namespaces()
            assert alive.switch_namespace in namespaces(), "a live run's lab must be left alone"
            assert sleeper.wait(timeout=5) != 0
    finally:
        sleeper.kill()
        sleeper.wait()
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["ip", "netns", "del", stale], check=True, capture_output=True)


def test_context_manager_cleans_up_when_the_body_fails() -> None:
    before = namespaces()

    def failing_test() -> None:
        with NetworkLab("failing") as lab:
            python(lab.add_host("x"), "import time; time.sleep(600)")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_test()
    assert namespaces() == before
