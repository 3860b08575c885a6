"""The cells and lines ``benchmarks.scale`` prints and docs/benchmarks.md shows for one size: where
a join stopped, and the versions each removal took (kept apart from ``benchmarks.scale``, which
starts servers)."""

from __future__ import annotations

from typing import Any

REMOVAL_HEADERS = [
    "silos",
    "single kills: versions",
    "versions in span",
    "killed at once",
    "all Dead s",
    "versions each",
    "versions touching them",
    "versions with Dead rows",
    "versions in span",
    "reads caused",
]
"""The columns of ``removal_rows``: a kill to each victim's Dead row (its votes and the Dead write)."""


def join_figure(entry: dict[str, Any]) -> object:
    """The "all Active s" cell: the seconds, how many were Active when the join stopped
    (``1514@300s``), "failed", or None when the size did not get that far."""
    if "all_active_s" in entry:
        return entry["all_active_s"]
    if stopped := entry.get("join_stopped"):
        return f"{stopped['active']}@{stopped['after_s']:.0f}s"
    return "failed" if "error" in entry else None


def caused_counted(entry: dict[str, Any]) -> bool:
    """Whether the statements "caused" by a size's kills are a measure: not once its join stopped.

    A kill's statements are those of the window after it less those of the same window one
    timer period earlier (``scale.caused_by``), which subtracts the silos' periodic reads and
    heartbeats. Silos still joining (and giving up) write and read on no period, so there the
    difference is noise: a 2,000-silo run with 777 silos Joining counted -81 versioned writes
    "caused" by one death and 1,253 reads by another.
    """
    return "join_stopped" not in entry


def caused_figure(value: float | None) -> float | None:
    """A count "caused" by kills as the report shows it: None ("-") when negative. The difference of
    two windows of periodic traffic swings by hundreds of reads at 500 silos and more (one 500-silo
    run counted -10, -209 and -29 reads "caused" by three deaths), so a negative one says only that
    the background's swing exceeded what the kill caused."""
    return None if value is None or value < 0 else value


def join_stopped_line(size: str, entry: dict[str, Any]) -> str | None:
    """Where the join of ``size`` stopped and what limits it (``scale.stall_limit``); None if it finished."""
    stopped = entry.get("join_stopped")
    if not stopped:
        return None
    limit = (
        f"; the Active count stood still for {stopped['active_unchanged_s']:.0f}s while the silo hosts used "
        f"{stopped['host_cores_busy']:.2f} of {stopped['cores']:.0f} cores"
        if "host_cores_busy" in stopped
        else ""
    )
    uncounted = "; statements caused by the kills not counted (the joiners' own are not periodic)"
    return (
        f"{size} silos: {stopped['active']} Active when the join stopped after {stopped['after_s']:.0f}s{limit}"
        f"{uncounted if 'removals' in entry else ''}"
    )


def removal_rows(results: dict[str, Any]) -> list[list[object]]:
    """One row per size with kill trials (``REMOVAL_HEADERS``)."""
    rows: list[list[object]] = []
    for size, entry in results["sizes"].items():
        if "removals" not in entry:
            continue
        mass = entry.get("mass_kill") or {}
        together = mass.get("removals", {})
        reads_caused = caused_figure(mass.get("caused", {}).get("all_reads")) if caused_counted(entry) else None
        rows.append([
            size,
            " ".join(str(removal["versions"]) for removal in entry["removals"]),
            " ".join(str(removal["span_versions"]) for removal in entry["removals"]),
            victims_cell(mass), "-" if mass.get("all_dead_s") is None else mass["all_dead_s"],
            " ".join(str(versions) for versions in together.get("versions_per_removal", [])) or "-",
            together.get("victim_versions", "-"), together.get("dead_write_versions", "-"),
            together.get("span_versions", "-"),
            "-" if reads_caused is None else reads_caused,
        ])  # fmt: skip
    return rows


def victims_cell(mass: dict[str, Any]) -> object:
    """The "killed at once" cell: the victims, and how many of them never stopped (a hosted silo
    whose host's loop did not get to its crash while the trial waited: ``mass_kill.not_stopped``)."""
    victims = mass.get("victims", "-")
    never = len(mass.get("not_stopped", []))
    return f"{victims} ({never} never crashed)" if never else victims
