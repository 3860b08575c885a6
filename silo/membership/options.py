"""``SiloOptions``: every tuning knob of the membership protocol in one frozen object.

Durations are float seconds. ``SiloOptions.production()`` is the defaults;
``SiloOptions.local()`` derives sub-second timings from it for tests and demos.
Overrides given as strings (``"500ms"``, ``"false"``, ``"7"``) are parsed per field type by
``with_overrides``; every error names the field and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from silo.errors import OptionsError
from silo.membership.lease import takeover_wait

__all__ = ["PRESETS", "OptionsError", "SiloOptions", "parse_duration"]

_DURATION_RE = re.compile(r"^\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_HOUR = 3600.0
_DAY = 24 * _HOUR


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``"500ms"``, ``"2s"``, ``"5m"``, ``"1h"``, ``"7d"`` or a bare ``"1.5"`` (seconds)."""
    match = _DURATION_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise OptionsError(f"cannot parse duration {text!r}: use a number with ms, s, m, h or d, e.g. '500ms' or '2s'")
    return float(match.group("number")) * _UNIT_SECONDS[match.group("unit")]


@dataclass(frozen=True)
class SiloOptions:
    """Timings and thresholds of the membership protocol (defaults = production preset)."""

    probe_timeout: float = 5.0
    """Seconds each probe waits for its answer. Shorter detects failures sooner but mistakes
    slow (GC-pausing, overloaded) silos for dead ones."""

    probe_interval: float = 2.0
    """Seconds between probes of one target, counted from the previous send, so probes overlap
    (capped at ``probe_timeout``: see ``effective_probe_interval``). Shorter confirms a live
    target more often, so a silence is measured more precisely and a hang is found nearer the
    detection time, at more probe traffic."""

    num_missed_probes_limit: int = 3
    """How long a target may stay silent, in probe timeouts, before this silo suspects it:
    the detection time is ``num_missed_probes_limit * probe_timeout`` of silence (lengthened
    while this silo's own health is poor). Higher tolerates longer loss bursts and pauses."""

    num_indirect_probes: int = 3
    """Intermediaries asked, in parallel, to ping a silent target before we vote; any that
    reaches it vetoes the suspicion. More vetoes protect better against one bad link, at one
    RPC each per suspicion."""

    num_probed_silos: int = 10
    """Silos each silo probes (one successor on each of this many hash rings). More probers
    catch failures faster and survive correlated prober failures, at more probe traffic."""

    num_votes_for_death_declaration: int = 2
    """Fresh votes needed to declare a silo Dead (capped at a majority of the Active
    non-stale silos). More votes resist one confused silo, but need more healthy probers."""

    death_vote_expiration: float = 120.0
    """Seconds a suspicion vote stays fresh. Must exceed the detection time so votes from
    different probers can meet (a prober renews its vote once per detection time while the
    silence lasts, so twice the detection time is enough); longer lets old, unrelated
    suspicions add up, e.g. under packet loss."""

    i_am_alive_table_publish_timeout: float = 30.0
    """Seconds between IAmAlive heartbeats written to the table. Heartbeats only feed
    staleness (who is probed extra, who counts for the quorum); probes decide death."""

    num_missed_table_i_am_alive_limit: int = 3
    """A silo whose heartbeat is older than this many publish periods is stale: probed by
    everyone and not counted for the quorum."""

    table_refresh_timeout: float = 60.0
    """Seconds between periodic refreshes of the table, whether or not gossip arrived. The
    bound on how long a missed gossip leaves a silo with an old view."""

    full_refresh_every: int = 3
    """Periodic refreshes per full re-read of the table (a count of ``table_refresh_timeout``
    periods). The others read only the table version and re-read in full only when it moved.
    Heartbeats do not move the version, so peers' IAmAlive changes are seen only on full
    reads: higher saves table reads (N silos cost N/k full reads per period, not N), but a
    crashed silo goes stale later (``freshness_limit`` grows by one period per step). 1 reads
    in full every period, without version reads."""

    max_join_attempt_time: float = 300.0
    """Seconds a starting silo keeps trying to reach the table and every Active silo before
    giving up (exit code 4 or 5)."""

    use_liveness_gossip: bool = True
    """After each table write, send the write (a delta) to every live silo. Off: changes spread
    only by periodic refresh (slower, but fewer RPCs)."""

    gossip_fanout: int = 16
    """The most silos one silo sends one gossip message to itself, and the most sends it has
    in flight. With more targets, it sends to that many and each passes the message on to its
    share of the rest (a relay tree of depth log_fanout N), so no writer opens N channels.
    Lower: fewer channels and sends per silo, one more hop (a round trip) per power of it."""

    enable_indirect_probes: bool = True
    """Before voting, ask ``num_indirect_probes`` other silos to probe the target (SWIM);
    any answer vetoes the vote. Off: a silo votes on its own silence alone."""

    align_probes: bool = True
    """Probe on a grid: every monitor of every silo on this machine sends its probes at the same
    instants (multiples of ``effective_probe_interval`` on the monotonic clock), not each at its
    own phase. A ping wakes the event loops of both silos, and a wake-up costs more CPU than the
    ping itself; probes sent together, and answered together, share their wake-ups. At 500
    silos on two cores a silo used 2.5 x less CPU. A silo with two quorums of ring targets or more
    probes every other quorum half an interval after the grid (``targets.RingTargets.phase``).
    Off: each monitor keeps the phase it started with (probes spread evenly over the interval, no
    bursts)."""

    lease_timeout: float = 10.0
    """Seconds a silo may go without the table confirming it Active (a read of its own row, or a
    write of it) before it *fences* itself: no work, not leader, no votes, health NOT_SERVING,
    until the table confirms it again. It renews every quarter of this. The new owners of a
    silo declared Dead wait ``takeover_wait`` (about this long) before they serve its keys,
    unless it provably cannot serve (its port refuses connections). Shorter than the
    detection time, a silo cut off from the table fences before the others declare it Dead;
    shorter still costs a table read per silo more often."""

    max_outage_vouch: float = 600.0
    """Seconds a silo may go on serving through a table outage on its peers' word alone (every
    member says it cannot reach the table either, at the same view) after the table last
    confirmed it. Longer outages fence every silo until the table is back. The bound is what
    lets a silo that joined without reaching some member (silent, its heartbeat standing still)
    know when that member stops serving: it holds the keys it took for ``outage_takeover_wait``."""

    max_clock_drift: float = 0.01
    """The most any silo's clock may run faster or slower than real time, as a fraction (0.01:
    1%, twenty times what NTP tolerates). Only clock *rates* matter, never offsets: the takeover
    wait is ``lease_timeout * (1 + d) / (1 - d) ** 2``."""

    defunct_silo_expiration: float = 7 * _DAY
    """Dead rows older than this (seconds since their last activity) are removed. Long enough
    for people to inspect what died; short enough to keep the table small."""

    defunct_silo_cleanup_period: float = _HOUR
    """Seconds between cleanups of defunct rows (done by the oldest Active silo only)."""

    max_join_validation_pings: int = 1000
    """Active silos a joining silo must reach before it turns Active: every one it sees at its
    first validation round while there are at most this many, else this many: the silos it will
    probe, those it will send its gossip to (their channels stay open for later), then others
    chosen at random.
    Validating against all of N silos costs N pings per joining silo, N^2 / 2 in a cluster that
    starts at once; a random sample still catches a silo that cannot reach a share of them."""

    def __post_init__(self) -> None:
        self._check_types()
        self._check_ranges()

    @classmethod
    def production(cls) -> SiloOptions:
        """The defaults: tolerant timings for real networks."""
        return cls()

    @classmethod
    def local(cls) -> SiloOptions:
        """Sub-second probes for tests and demos on one machine (built from ``production``)."""
        return dataclasses.replace(
            cls.production(),
            probe_timeout=0.5,
            probe_interval=0.25,
            death_vote_expiration=3.0,
            i_am_alive_table_publish_timeout=1.0,
            table_refresh_timeout=2.0,
            full_refresh_every=1,
            max_join_attempt_time=10.0,
            lease_timeout=1.0,
            defunct_silo_expiration=60.0,
            defunct_silo_cleanup_period=10.0,
        )

    @property
    def detection_time(self) -> float:
        """Seconds of silence before a suspicion: ``num_missed_probes_limit * probe_timeout``."""
        return self.num_missed_probes_limit * self.probe_timeout

    @property
    def effective_probe_interval(self) -> float:
        """``probe_interval``, but never longer than ``probe_timeout`` (e.g. after overriding only the timeout)."""
        return min(self.probe_interval, self.probe_timeout)

    @property
    def missed_probe_silence(self) -> float:
        """The least silence that shows a probe went unanswered: a probe interval (from an answered
        probe's send, where the silence starts, to the next send) and half a probe timeout for that
        probe's answer. The early steps on a silence (pings on new connections from a probe timeout
        of it, an indirect round from a third of the suspicion time) wait for it at least: with
        probes as far apart as their timeout (Orleans' 5 s and 5 s), a target answering every probe
        is a probe timeout silent before each one, and each of them opened a new connection and
        asked three intermediaries: three quarters of an idle silo's CPU."""
        return self.effective_probe_interval + self.probe_timeout / 2

    @property
    def full_refresh_interval(self) -> float:
        """Seconds between periodic full reads: ``full_refresh_every * table_refresh_timeout``."""
        return self.full_refresh_every * self.table_refresh_timeout

    @property
    def lease_renew_interval(self) -> float:
        """Seconds between renewals of the membership lease: a quarter of ``lease_timeout``."""
        return self.lease_timeout / 4

    @property
    def takeover_wait(self) -> float:
        """Seconds a new owner waits after learning of a death before it serves the dead silo's
        keys (``silo.membership.lease``): by then the dead silo has fenced itself."""
        return takeover_wait(self.lease_timeout, self.max_clock_drift)

    @property
    def outage_takeover_wait(self) -> float:
        """Seconds a silo that joined without reaching some member holds the keys it took: by
        then that member, if it vouched for an outage without hearing of our join, is fenced
        (``max_outage_vouch`` and a lease, with the drift margins of ``takeover_wait``)."""
        return takeover_wait(self.max_outage_vouch + self.lease_timeout, self.max_clock_drift)

    @property
    def stale_after(self) -> float:
        """Seconds without a heartbeat after which a silo counts as stale."""
        return self.num_missed_table_i_am_alive_limit * self.i_am_alive_table_publish_timeout

    def with_overrides(self, overrides: Mapping[str, object]) -> SiloOptions:
        """A copy with ``overrides`` applied; string values are parsed per field type."""
        fields = {field.name: field for field in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, value in overrides.items():
            if name not in fields:
                close = difflib.get_close_matches(name, fields, n=3)
                hint = f"did you mean {', '.join(close)}?" if close else f"known options: {', '.join(fields)}"
                raise OptionsError(f"unknown option {name!r}; {hint}")
            changes[name] = _convert(name, _field_kind(name), value)
        return dataclasses.replace(self, **changes)

    def _check_types(self) -> None:
        for field in dataclasses.fields(self):
            kind = _field_kind(field.name)
            value = getattr(self, field.name)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, field.name, float(value))
            elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise OptionsError(
                    f"option {field.name} must be a {kind.__name__}, got {type(value).__name__} {value!r}"
                )

    def _check_ranges(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if _field_kind(field.name) in (int, float) and not (math.isfinite(value) and value > 0):
                raise OptionsError(f"option {field.name} must be positive and finite, got {value!r}")
        if self.num_votes_for_death_declaration > self.num_probed_silos:
            raise OptionsError(
                f"num_votes_for_death_declaration ({self.num_votes_for_death_declaration}) exceeds "
                f"num_probed_silos ({self.num_probed_silos}): a silo could never collect enough votes; "
                "lower the votes or raise num_probed_silos"
            )
        if not self.max_clock_drift < 0.5:
            raise OptionsError(
                f"option max_clock_drift is a fraction of real time below 0.5, got {self.max_clock_drift!r}; "
                "0.01 (1%) is already far more than any NTP-synchronized clock drifts"
            )
        if self.death_vote_expiration <= self.detection_time:
            raise OptionsError(
                f"death_vote_expiration ({self.death_vote_expiration}s) must be longer than the detection time "
                f"num_missed_probes_limit * probe_timeout ({self.detection_time}s), or votes expire before "
                "a second prober can add its own; raise death_vote_expiration"
            )


def _field_kind(name: str) -> type:
    """The runtime type of a field, from its default (annotations are strings here)."""
    return type(getattr(SiloOptions, name))


def _convert(name: str, kind: type, value: object) -> object:
    if not isinstance(value, str):
        return value  # typed values are checked by __post_init__
    try:
        if kind is bool:
            lowered = value.strip().lower()
            if lowered in _TRUE | _FALSE:
                return lowered in _TRUE
            raise OptionsError(f"expected true or false, got {value!r}")
        if kind is int:
            return int(value.strip())
        return parse_duration(value)
    except (OptionsError, ValueError) as exc:
        raise OptionsError(f"bad value for option {name}: {exc}") from exc


PRESETS: dict[str, Callable[[], SiloOptions]] = {
    "production": SiloOptions.production,
    "local": SiloOptions.local,
}
"""Named presets (the CLI's ``--preset``)."""
