"""The tables of ``benchmarks.accuracy``'s real-network runs, as a title, headers and rows.

One builder per table, shared by the benchmark's console report (``print_table``) and by
docs/benchmarks.md (``benchmarks.report``), so the two never drift apart. Each takes the
``network_loss`` part of the results; a table without rows is ``None`` (older results lack the
kills and the flap levels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from benchmarks.common import fmt
from benchmarks.serf_group import PROFILES


@dataclass(frozen=True)
class Table:
    title: str
    headers: list[str]
    rows: list[list[object]]


def met(value: bool | None, no: str = "NO") -> str:
    return "-" if value is None else ("yes" if value else no)


def target_text(entry: dict[str, Any]) -> str:
    """A level's target as a bound on its false silo deaths."""
    target = entry.get("target")
    if target == "zero":
        return "0"
    if target == "tenth_of_zookeeper":
        return f"<= {entry['zookeeper']['live_sessions_expired'] / 10:g} (ZooKeeper / 10)"
    if target == "one_per_10_minutes":
        return f"<= {entry['seconds'] / 600:g} (1 per 10 min)"
    return "-"


def level_name(entry: dict[str, Any]) -> str:
    """``40% loss`` or ``1 s cuts``."""
    return f"{entry['loss']:.0%} loss" if "loss" in entry else f"{entry['cut_s']:g} s cuts"


def _levels(network: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return list(network.get(key, {}).values())


def loss_table(network: dict[str, Any], no: str = "NO") -> Table | None:
    levels = _levels(network, "levels")
    if not levels:
        return None
    first = levels[0]
    title = (
        f"Real packet loss (iptables, every lab host), N = {first['size']} silos and {first['size']} ZooKeeper "
        f"members (one per silo's namespace; session timeout {network['session_timeout_s']} s = the floor), at "
        f"the same time in the same lab, {first['seconds']} s per level:"
    )
    headers = ["loss", "measured loss", "live silos declared dead", "suspicion votes", "silo restarts",
               "live ZooKeeper sessions expired", "of which in the server log", "CPU % per silo",
               "CPU % per ZK member", "CPU % ZK server", "target", "target met"]  # fmt: skip
    rows: list[list[object]] = []
    for entry in levels:
        silos, zk = entry["silos"], entry["zookeeper"]
        rows.append(
            [f"{entry['loss']:.0%}", f"{entry['packets']['measured_loss']:.1%}", silos["live_silos_declared_dead"],
             silos["suspicion_votes"], silos["restarts"], zk["live_sessions_expired"],
             zk["server_expired_member_sessions"], silos["cpu_percent_per_silo"]["mean"],
             zk["cpu_percent_per_member"]["mean"], zk["cpu_percent_server"]["mean"], target_text(entry),
             met(entry["target_met"], no)]
        )  # fmt: skip
    return Table(title, headers, rows)


def _found(seconds: float | None, bound: float) -> object:
    return f"not within {bound:g}" if seconds is None else seconds


def kill_table(network: dict[str, Any]) -> Table | None:
    levels = [entry for entry in _levels(network, "levels") if entry.get("kill")]
    if not levels:
        return None
    profiles = [p for p in PROFILES if any(p in entry["kill"]["serf"] for entry in levels)]
    title = (
        "A crash found under the loss: at the end of each loss level, the loss still on, one host's silo, "
        "ZooKeeper member and Serf agents SIGKILLed; seconds from each kill to its Dead row, to its session's "
        "expiry, to `EventMemberFailed` at the first and at every other agent (an agent that held it failed already, "
        "after a false failure, logs nothing more and is not waited for):"
    )
    headers = ["loss", "host", "silo Dead row s", "ZooKeeper session expired s",
               *(f"Serf {p} first / all s" for p in profiles)]  # fmt: skip
    rows: list[list[object]] = []
    for entry in levels:
        kill, bound = entry["kill"], entry["kill"]["bound_s"]
        rows.append(
            [f"{entry['loss']:.0%}", kill["host"], _found(kill["silo_dead_after_s"], bound),
             _zookeeper_found(kill, bound),
             *(_serf_found(kill["serf"].get(p), bound) for p in profiles)]
        )  # fmt: skip
    return Table(title, headers, rows)


def _zookeeper_found(kill: dict[str, Any], bound: float) -> object:
    if not kill.get("zookeeper_registered_at_kill", True):
        return "session already expired at the kill"
    return _found(kill["zookeeper_expired_after_s"], bound)


def _serf_found(kill: dict[str, Any] | None, bound: float) -> str:
    """``first / all`` seconds of one Serf profile's finding of a kill, and the agents that held it failed already."""
    if kill is None:
        return "-"
    found = " / ".join(fmt(seconds) if isinstance(seconds := _found(kill[key], bound), float) else str(seconds)
                       for key in ("first_failed", "all_failed"))  # fmt: skip
    already = kill.get("already_failed", 0)
    return f"{found} ({already} of {kill['observers']} held it failed already)" if already else found


def flap_table(network: dict[str, Any], no: str = "NO") -> Table | None:
    levels = _levels(network, "flap_levels")
    if not levels:
        return None
    first = levels[0]
    profiles = [p for p in PROFILES if any(p in entry.get("serf", {}) for entry in levels)]
    title = (
        f"Flapping links, no loss: one host's links (its silo, ZooKeeper member and Serf agents) cut and healed "
        f"over and over, N = {first['size']}, {first['seconds']} s per level, session timeout = floor "
        f"{network['session_timeout_s']} s. Target: a cut short enough to have healed before a vote on silence "
        'never kills a silo; a longer one may (docs/protocol.md, "Short cuts"). A cut\'s length is given from its '
        "last rule to the start of its heal - from its first rule to the end of its heal (the rules reach the hosts "
        "one at a time):"
    )
    headers = ["cut s", "healed s", "cuts", "cut length mean s", "cut length max s",
               "live silos declared dead",
               "suspicion votes", "silo restarts", "live ZooKeeper sessions expired",
               *(f"Serf {p} live members failed" for p in profiles), "target", "target met"]  # fmt: skip
    rows: list[list[object]] = []
    for entry in levels:
        silos = entry["silos"]
        rows.append(
            [entry["cut_s"], entry["healed_s"], entry["cuts"], _spread(entry, "mean"), _spread(entry, "max"),
             silos["live_silos_declared_dead"], silos["suspicion_votes"], silos["restarts"],
             entry["zookeeper"]["live_sessions_expired"],
             *(entry["serf"].get(p, {}).get("live_members_failed", "-") for p in profiles),
             target_text(entry), met(entry["target_met"], no)]
        )  # fmt: skip
    return Table(title, headers, rows)


def _spread(entry: dict[str, Any], stat: str) -> str:
    """A flap level's cut lengths: from the last rule to the heal's start, and from the first rule to its end."""
    low, high = entry["cut_complete_s"].get(stat, math.nan), entry["cut_span_s"].get(stat, math.nan)
    return f"{fmt(low)}-{fmt(high)}"


def serf_table(network: dict[str, Any]) -> Table | None:
    levels = _levels(network, "levels") + _levels(network, "flap_levels")
    rows: list[list[object]] = [
        [level_name(entry), profile, tally["live_members_failed"], tally["member_failed_events"],
         tally["declarations"], tally["suspicions"], tally["refutations"], tally["cpu_percent_per_agent"]["mean"],
         entry["silos"]["live_silos_declared_dead"], entry["zookeeper"]["live_sessions_expired"]]
        for entry in levels
        for profile, tally in entry.get("serf", {}).items()
    ]  # fmt: skip
    if not rows:
        return None
    title = (
        f"HashiCorp Serf in the same lab at the same time: one agent per profile beside each silo "
        f"({levels[0]['size']} per profile; each profile its own cluster). A failure is a span during which at "
        f"least one agent held a live member failed:"
    )
    headers = ["level", "profile", "live members failed", "member-failed events (all agents' views)",
               "declarations", "suspicions", "refutations", "CPU % per agent", "live silos declared dead",
               "live ZooKeeper sessions expired"]  # fmt: skip
    return Table(title, headers, rows)


def network_tables(network: dict[str, Any], no: str = "NO") -> list[Table]:
    """Every table of the real-network runs, in the order they are shown."""
    tables = [loss_table(network, no), kill_table(network), flap_table(network, no), serf_table(network)]
    return [table for table in tables if table is not None]
