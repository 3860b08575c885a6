"""The ZooKeeper ephemeral-node baseline: member processes, and an observer watching the group.

Each member is ``benchmarks.zk_member`` in its own process (own session, own ephemeral
znode). The observer holds one more session with a children watch on the group and
records, in wall-clock time, when each member's node disappears: that is when a kazoo
user would learn of the death. A node that disappears while its process still runs is a
false positive (its session expired although the member was alive).
"""

from __future__ import annotations

import random
import signal
import sys
import threading
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch

from benchmarks.common import ROOT, wall
from testbed.services.process import ServerProcess, wait_until

START_TIMEOUT = 60.0


class ZkGroup:
    def __init__(self, workdir: Path, hosts: str, group: str, session_timeout: float) -> None:
        self.workdir = workdir
        self.hosts = hosts
        self.group = group
        self.session_timeout = session_timeout
        self.members: dict[str, ServerProcess] = {}
        self.killed: set[str] = set()
        self.gone: dict[str, float] = {}
        self._present: set[str] = set()
        self._changed = threading.Condition()
        self._count = 0
        self.observer = KazooClient(hosts=hosts, timeout=10.0)
        self.observer.start(timeout=30)
        self.observer.ensure_path(group)
        ChildrenWatch(self.observer, group, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        now = wall()
        with self._changed:
            current = set(children)
            for name in self._present - current:
                self.gone.setdefault(name, now)
            self._present = current
            self._changed.notify_all()

    @property
    def running(self) -> list[str]:
        return [name for name, process in self.members.items() if process.running and name not in self.killed]

    def start(self, count: int) -> None:
        names = []
        for _ in range(count):
            name = f"member-{self._count}"
            self._count += 1
            argv = [
                sys.executable,
                "-m",
                "benchmarks.zk_member",
                self.hosts,
                f"{self.group}/{name}",
                str(self.session_timeout),
            ]
            self.members[name] = ServerProcess(argv, self.workdir / f"{name}.log", env={"PYTHONPATH": str(ROOT)})
            names.append(name)
        wait_until(lambda: set(names) <= self._present, START_TIMEOUT, f"{count} ZooKeeper members to register")

    def kill_one(self, rng: random.Random, bound: float, freeze: bool = False) -> float | None:
        """SIGKILL (or SIGSTOP) a random member; seconds until the observer saw its node go (None: not within bound)."""
        name = rng.choice(self.running)
        self.killed.add(name)
        killed_at = wall()
        self.members[name].signal(signal.SIGSTOP if freeze else signal.SIGKILL)
        with self._changed:
            self._changed.wait_for(lambda: name in self.gone, timeout=bound)
        self.members[name].signal(signal.SIGKILL)
        self.members[name].stop()
        return self.gone[name] - killed_at if name in self.gone else None

    def replace_missing(self, count: int) -> None:
        missing = count - len(self.running)
        if missing > 0:
            self.start(missing)

    def signal(self, name: str, signum: int) -> None:
        self.members[name].signal(signum)

    def pid(self, name: str) -> int:
        return self.members[name].process.pid

    def false_positives(self) -> list[str]:
        """Members whose node vanished although nobody killed them."""
        return sorted(name for name in self.gone if name not in self.killed)

    def close(self) -> None:
        for process in self.members.values():
            process.signal(signal.SIGKILL)
            process.stop()
        self.observer.stop()
        self.observer.close()
