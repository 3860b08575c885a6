"""A virtual LAN of network namespaces with injectable faults, for multi-process tests and benchmarks.

Why: loopback cannot be partitioned, and this kernel has no ``netem`` qdisc, so faults between
processes on one machine need each process on its own network stack. A ``NetworkLab`` gives them
that, and cuts or thins the links with iptables.

Topology (one lab)::

      host ns "smf<pid>x<n>-a"        host ns "smf<pid>x<n>-b"        ...
      lo, eth0 10.213.0.1/16          lo, eth0 10.213.0.2/16
               |  veth                          |  veth
      ---------+--------------------------------+---------  bridge "br0" in switch ns "smf<pid>x<n>"

* Each host is a network namespace with ``lo`` and one veth end (``eth0``); the other end (``p<i>``)
  is a port of a Linux bridge in the lab's own switch namespace. Both veth ends are created
  directly inside those namespaces, so the root namespace never sees a lab interface.
* Addresses come from 10.213.0.0/16 and exist only inside the lab: the hosts have no default
  route, there is no NAT and no forwarding out, so lab traffic cannot leave and the root namespace
  cannot reach in. Labs are mutually isolated, so two labs (even in parallel runs) may reuse the
  same addresses. IPv6 is disabled in the hosts because the faults are IPv4 rules: a program that
  fell back to an IPv6 link-local address would otherwise bypass them.
* Processes join a host with ``ip netns exec`` (``Host.command``/``popen``/``run``). They can still
  use the shared filesystem, but not servers listening in the root namespace: run those (a
  database, say) on a lab host of their own, which also lets a test cut a silo from its storage.

Faults are iptables rules in each receiving host's namespace, in dedicated chains so that
``heal()`` only has to flush them:

* ``INPUT -j SMF-PART``: ``-s <peer> -j DROP`` rules for ``partition``, ``block`` and ``isolate``.
* ``INPUT ! -i lo -j SMF-LOSS``: one ``-m statistic --mode random --probability p -j DROP`` rule
  for ``set_loss`` (with ``-s <host>`` for ``set_link_loss``: one host's link only); loopback
  traffic inside a host is spared.

Packets are dropped only where they arrive, never in the sender's OUTPUT chain: a DROP in OUTPUT
makes a UDP ``sendto()`` fail at once with EPERM (checked on this kernel), which no real network
does. Dropping on arrival gives the sender what a real partition gives it, silence and timeouts,
including on connections that were already established (there is no conntrack ACCEPT rule).

iptables backend: the first of ``iptables-nft`` and ``iptables-legacy`` that can create a chain
and a ``statistic`` rule in a scratch namespace. ``iptables-nft`` comes first because it is
Debian's default, its tables are per namespace with no global lock (legacy serialises every
namespace on ``/run/xtables.lock``), and the legacy x_tables interface is deprecated and may be
compiled out of newer kernels. Both worked on this machine's kernel (6.18); nft is used. Rules are
loaded with the matching ``*-restore --noflush``, one atomic batch per host per call. Nothing is
ever written to the root namespace's tables, so the lab cannot conflict with a host firewall.

No delay or bandwidth faults: they need ``netem``/``tbf``, which this kernel lacks.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

PREFIX = "smf"
"""Every namespace the harness creates starts with this, then the creating pid, so that
``remove_stale_labs`` can tell a crashed run's namespaces from a live one's."""

SUBNET_PREFIX = "10.213"
PREFIX_LENGTH = 16
PARTITION_CHAIN = "SMF-PART"
LOSS_CHAIN = "SMF-LOSS"

_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,16}$")
_NAMESPACE_PATTERN = re.compile(rf"^{PREFIX}(\d+)x(\d+)(?:-.*)?$")
_BACKENDS = (("iptables-nft", "iptables-nft-restore"), ("iptables-legacy", "iptables-legacy-restore"))
_COMMAND_TIMEOUT = 30.0
_lab_numbers = itertools.count(1)  # 0 is the probe namespace of lab_unavailable_reason


class LabError(RuntimeError):
    """A command that builds or changes the lab failed."""


class LabUnavailableError(LabError):
    """Network namespaces or iptables cannot be used here; the message says why."""


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    """Run a setup command; raise ``LabError`` with its stderr so failures explain themselves."""
    try:
        result = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=_COMMAND_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LabError(f"{' '.join(argv)}: {error}") from error
    if result.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list`` prints ``name (id: N)``)."""
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.strip()]


def _namespace_pids(namespace: str) -> list[int]:
    try:
        return [int(pid) for pid in _run(["ip", "netns", "pids", namespace]).split()]
    except LabError:
        return []  # the namespace is already gone


def _kill_namespace_processes(namespaces: Sequence[str], grace: float) -> None:
    """SIGTERM every process in ``namespaces``, SIGKILL what is left after ``grace`` seconds.

    Why loop: a process may fork while being killed, and a namespace with a live process in it
    outlives ``ip netns del`` (only its name goes away).
    """
    term_deadline = time.monotonic() + grace
    kill_deadline = term_deadline + 5.0
    while pids := [pid for namespace in namespaces for pid in _namespace_pids(namespace)]:
        now = time.monotonic()
        if now >= kill_deadline:
            raise LabError(f"processes survived SIGKILL in {', '.join(namespaces)}: {pids}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL if now >= term_deadline else signal.SIGTERM)
        time.sleep(0.05)


def _delete_namespaces(namespaces: Iterable[str]) -> list[str]:
    """Delete the namespaces that still exist; return the errors instead of stopping at the first."""
    errors = []
    existing = set(_namespaces())
    for namespace in namespaces:
        if namespace in existing:
            try:
                _run(["ip", "netns", "del", namespace])
            except LabError as error:
                errors.append(str(error))
    return errors


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_labs() -> None:
    """Delete lab namespaces whose creating process is dead (a crashed or SIGKILLed earlier run).

    ``close()`` and ``atexit`` cover every ordinary exit; this covers the rest, and runs whenever a
    new lab starts. A reused pid can keep a dead run's namespaces until that pid exits too.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return
    stale = []
    for namespace in _namespaces():
        match = _NAMESPACE_PATTERN.match(namespace)
        if match is not None and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1))):
            stale.append(namespace)
    if stale:
        _kill_namespace_processes(stale, grace=0.0)
        _delete_namespaces(stale)


@functools.cache
def _probe() -> tuple[str | None, tuple[str, str]]:
    """Try everything a lab needs once, in a scratch namespace: (reason it is unusable, backend)."""
    no_backend = ("", "")
    if os.geteuid() != 0:
        return "not root: network namespaces and iptables need root", no_backend
    if shutil.which("ip") is None:
        return "ip not found: apt-get install iproute2", no_backend
    if not any(shutil.which(tool) for tool, _ in _BACKENDS):
        return "iptables not installed: apt-get install iptables", no_backend
    try:
        remove_stale_labs()
    except LabError as error:
        return f"cannot list or remove network namespaces: {error}", no_backend
    namespace = f"{PREFIX}{os.getpid()}x0"
    try:
        _run(["ip", "netns", "add", namespace])
    except LabError as error:
        return f"network namespace creation failed: {error}", no_backend
    try:
        try:
            _run(["ip", "-n", namespace, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", namespace, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
            _run(["ip", "-n", namespace, "link", "set", "v1", "master", "br0"])
        except LabError as error:
            return f"veth/bridge creation failed: {error}", no_backend
        failures = []
        for tool, restore in _BACKENDS:
            if shutil.which(tool) is None or shutil.which(restore) is None:
                failures.append(f"{tool}: not installed")
                continue
            rule = f"-A {LOSS_CHAIN} -m statistic --mode random --probability 0.5 -j DROP"
            try:
                _run(
                    ["ip", "netns", "exec", namespace, restore, "-w", "--noflush"],
                    stdin=f"*filter\n:{LOSS_CHAIN} - [0:0]\n{rule}\nCOMMIT\n",
                )
            except LabError as error:
                failures.append(str(error))
                continue
            return None, (tool, restore)
        return f"no working iptables backend: {'; '.join(failures)}", no_backend
    finally:
        _delete_namespaces([namespace])


def lab_unavailable_reason() -> str | None:
    """None if a ``NetworkLab`` can be built here, else why not (for ``pytest.skip``)."""
    return _probe()[0]


def iptables_backend() -> str:
    """The iptables command the labs use (``iptables-nft`` or ``iptables-legacy``)."""
    reason, (tool, _) = _probe()
    if reason is not None:
        raise LabUnavailableError(reason)
    return tool


class Host:
    """One machine on the lab's LAN: a network namespace with ``lo`` and ``eth0`` at ``address``."""

    def __init__(self, lab: NetworkLab, name: str, namespace: str, address: str) -> None:
        self.lab = lab
        self.name = name
        self.namespace = namespace
        self.address = address

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address}, ns={self.namespace})"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run inside this host, for callers with their own process launcher.

        ``ip netns exec`` execs the program in place, so the launcher's pid is the program's pid;
        ``NetworkLab.close()`` still kills it if the launcher did not.
        """
        return ["ip", "netns", "exec", self.namespace, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside this host; the lab reaps it on ``close()``."""
        process: subprocess.Popen[bytes] = subprocess.Popen(self.command(argv), **kwargs)
        self.lab._processes.append(process)
        return process

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this host to completion; text output captured unless redirected."""
        kwargs.setdefault("text", True)
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs.setdefault("capture_output", True)
        result: subprocess.CompletedProcess[str] = subprocess.run(self.command(argv), **kwargs)
        return result

    def kill_processes(self, grace: float = 0.0) -> None:
        """Crash this host: SIGKILL every process in its namespace (after SIGTERM and ``grace``
        seconds if ``grace`` > 0); its address stays up, so peers get connection resets, not silence."""
        _kill_namespace_processes([self.namespace], grace)

    def rules(self) -> str:
        """This host's iptables rules (``iptables-save``), to explain a surprising test result."""
        return _run(self.command([f"{self.lab._iptables}-save"]))


class NetworkLab:
    """One isolated virtual LAN: a bridge in its own namespace, and hosts added with ``add_host``.

    Faults accumulate until ``heal()``; e.g. to move a partition, ``heal()`` then ``partition()``.
    Use as a context manager, or call ``close()``; ``atexit`` closes it if neither happened.
    """

    def __init__(self, name: str = "lab") -> None:
        reason, (self._iptables, self._restore) = _probe()
        if reason is not None:
            raise LabUnavailableError(reason)
        self.name = name
        self.hosts: list[Host] = []
        self.switch_namespace = f"{PREFIX}{os.getpid()}x{next(_lab_numbers)}"
        self._namespaces: list[str] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._closed = False
        self._owner_pid = os.getpid()  # a forked child inherits the atexit hook; only the owner closes
        remove_stale_labs()
        atexit.register(self.close)
        try:
            self._add_namespace(self.switch_namespace)
            ns = ["ip", "-n", self.switch_namespace]
            _run([*ns, "link", "add", "br0", "type", "bridge"])
            _run([*ns, "link", "set", "br0", "up"])
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"NetworkLab({self.name!r}, switch={self.switch_namespace}, hosts={self.hosts})"

    def __enter__(self) -> NetworkLab:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _add_namespace(self, namespace: str) -> None:
        self._namespaces.append(namespace)  # before creating it, so close() removes a half-built one
        _run(["ip", "netns", "add", namespace])

    def add_host(self, name: str) -> Host:
        """Plug a new host into the LAN and return it, with lo and eth0 up and the next address."""
        if self._closed:
            raise LabError(f"{self.name} is closed")
        if not _NAME_PATTERN.match(name):
            raise ValueError(f"host name {name!r} must match {_NAME_PATTERN.pattern}")
        if any(host.name == name for host in self.hosts):
            raise ValueError(f"{self.name} already has a host named {name!r}")
        index = len(self.hosts) + 1
        if index >= 2 ** (32 - PREFIX_LENGTH) - 1:
            raise LabError(f"{self.name} is full")
        address = f"{SUBNET_PREFIX}.{index >> 8}.{index & 0xFF}"
        host = Host(self, name, f"{self.switch_namespace}-{name}", address)
        port = f"p{index}"
        self._add_namespace(host.namespace)
        _run(
            ["ip", "netns", "exec", host.namespace, "sysctl", "-q", "-w"]
            + [f"net.ipv6.conf.{scope}.disable_ipv6=1" for scope in ("all", "default", "lo")]
        )
        _run(
            [
                *("ip", "link", "add", "eth0", "netns", host.namespace, "type", "veth"),
                *("peer", "name", port, "netns", self.switch_namespace),
            ]
        )
        _run(["ip", "-n", self.switch_namespace, "link", "set", port, "master", "br0", "up"])
        ns = ["ip", "-n", host.namespace]
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", "eth0"])
        _run([*ns, "link", "set", "eth0", "up"])
        self._load_rules(
            host,
            f":{PARTITION_CHAIN} - [0:0]",
            f":{LOSS_CHAIN} - [0:0]",
            f"-A INPUT -j {PARTITION_CHAIN}",
            f"-A INPUT ! -i lo -j {LOSS_CHAIN}",
        )
        self.hosts.append(host)
        return host

    def _load_rules(self, host: Host, *lines: str) -> None:
        """Apply ``lines`` to the host's filter table in one atomic ``iptables-restore`` batch."""
        rules = "\n".join(["*filter", *lines, "COMMIT", ""])
        _run(host.command([self._restore, "-w", "--noflush"]), stdin=rules)

    def _check(self, hosts: Iterable[Host]) -> list[Host]:
        hosts = list(hosts)
        for host in hosts:
            if host.lab is not self:
                raise ValueError(f"{host!r} is not in {self.name}")
        if self._closed:
            raise LabError(f"{self.name} is closed")
        return hosts

    def _drop_from(self, receivers: Sequence[Host], senders: Sequence[Host]) -> None:
        """Make every receiver drop packets arriving from every sender."""
        for receiver in receivers:
            lines = [
                f"-A {PARTITION_CHAIN} -s {sender.address} -j DROP" for sender in senders if sender is not receiver
            ]
            if lines:
                self._load_rules(receiver, *lines)

    def partition(self, *sides: Sequence[Host]) -> None:
        """Cut every link between hosts on different sides, both ways; links within a side stay.

        Hosts on no side keep talking to everyone.
        """
        groups = [self._check(side) for side in sides]
        if len(groups) < 2:
            raise ValueError("partition needs at least two sides")
        seen: set[int] = set()
        for group in groups:
            for host in group:
                if id(host) in seen:
                    raise ValueError(f"{host!r} is on two sides")
                seen.add(id(host))
        for number, group in enumerate(groups):
            others = [host for other in groups[:number] + groups[number + 1 :] for host in other]
            self._drop_from(group, others)

    def block(self, src: Sequence[Host], dst: Sequence[Host]) -> None:
        """Drop packets from ``src`` hosts to ``dst`` hosts; the reverse direction still flows.

        One-way loss suits datagram protocols (UDP arrives dst→src, not src→dst). TCP needs both
        directions, so every TCP connection between the two sets fails, whoever opens it: a SYN
        from src is dropped, and a dst-opened connection never receives src's SYN-ACK.
        """
        self._drop_from(self._check(dst), self._check(src))

    def isolate(self, host: Host) -> None:
        """Cut ``host`` from every other host, both ways (its loopback still works)."""
        others = [other for other in self.hosts if other is not host]
        if others:
            self.partition([host], others)

    def set_loss(self, fraction: float, hosts: Sequence[Host] | None = None) -> None:
        """Drop each packet arriving at ``hosts`` (default: all hosts now in the lab) with probability ``fraction``.

        A packet crosses the LAN into exactly one host, so it is dropped at most once; a request
        and its reply are each lost independently. Replaces the hosts' earlier loss; 0 removes it.
        """
        self._set_loss(fraction, self.hosts if hosts is None else hosts)

    def set_link_loss(self, fraction: float, host: Host) -> None:
        """Drop each packet that crosses ``host``'s link, either way, with probability ``fraction``:
        every packet arriving at ``host``, and every packet from ``host`` arriving at another host
        (a lossy cable or switch port of one server, say the store's). The other links stay whole.
        Replaces every host's earlier loss; 0 removes it."""
        others = [other for other in self.hosts if other is not host]
        self._set_loss(fraction, [host])
        self._set_loss(fraction, others, source=host)

    def _set_loss(self, fraction: float, hosts: Sequence[Host], source: Host | None = None) -> None:
        """``hosts`` drop each packet arriving (from ``source`` only, if given) with probability ``fraction``."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"loss fraction must be in [0, 1], got {fraction}")
        match = "" if source is None else f"-s {self._check([source])[0].address} "
        for host in self._check(hosts):
            lines = [f"-F {LOSS_CHAIN}"]
            if fraction > 0:
                lines.append(f"-A {LOSS_CHAIN} {match}-m statistic --mode random --probability {fraction:.6f} -j DROP")
            self._load_rules(host, *lines)

    def heal(self) -> None:
        """Remove every fault (partitions, blocks, isolation, loss) from every host."""
        for host in self._check(self.hosts):
            self._load_rules(host, f"-F {PARTITION_CHAIN}", f"-F {LOSS_CHAIN}")

    def close(self, grace: float = 1.0) -> None:
        """Kill every process in the lab's namespaces and delete them all; safe to call twice.

        Processes get SIGTERM, then SIGKILL after ``grace`` seconds. Deleting a host namespace
        destroys its veth pair; deleting the switch namespace destroys the bridge.
        """
        if self._closed or os.getpid() != self._owner_pid:
            return
        self._closed = True
        atexit.unregister(self.close)
        errors: list[str] = []
        try:
            _kill_namespace_processes(self._namespaces, grace)
        except LabError as error:
            errors.append(str(error))
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)  # reap: they were killed above, or had exited already
        errors += _delete_namespaces(reversed(self._namespaces))
        if errors:
            raise LabError(f"closing {self.name}: {'; '.join(errors)}")
