"""Compile and run the SPIN model of the failure detector (``spin_model/membership.pml``).

    python spin_model/spin_check.py --n 4                          # safety, the suite's bounds for N=4
    python spin_model/spin_check.py --n 4 --ltl liveness           # both liveness properties
    python spin_model/spin_check.py --n 5 --loss 1 --faults 1      # any bounds
    python spin_model/spin_check.py --n 3 -D MUTANT_BLIND_WRITE    # a mutant: expect a counterexample
    python spin_model/spin_check.py --n 3 --lease                  # the lease and the takeover wait
    python spin_model/spin_check.py --n 3 --lease -D MUTANT_NO_TAKEOVER_WAIT
    python spin_model/spin_check.py --n 3 --peers                  # ... and the lease through peers
    python spin_model/spin_check.py --n 3 --peers -D MUTANT_VOUCH_MAJORITY
    python spin_model/spin_check.py --n 3 --joins                  # ... and a silo that joins
    python spin_model/spin_check.py --n 3 --joins -D MUTANT_JOIN_PING_SILENT

Each check runs ``spin -a`` on a copy of the model in a temporary directory, compiles
``pan.c`` with gcc and runs ``./pan``; the verdict says how many errors pan found, which
property failed, how many states it stored and how long it took. A counterexample's trail
is kept (``--keep``) and can be replayed with ``spin -t -p`` and the same ``-D`` flags.
The test suite (``tests/spin_model/test_spin_model.py``) runs the same checks.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).resolve().with_name("membership.pml")
SPIN_PACKAGES = {"spin": "spin", "gcc": "gcc"}


@dataclass(frozen=True)
class Bounds:
    """How much the environment may do (see the model's header)."""

    n: int
    loss: int
    """Lost link-rounds: every message between two silos during one probe round."""
    faults: int
    """Crashes and hangs, in all."""
    outages: int
    """Table outages (one round each)."""
    leaves: int = 0
    """Graceful leaves, in all (lease runs only)."""
    delays: int = 0
    """Reads whose answer arrives rounds after they were sent, in all (lease runs only)."""
    unsure: int = 0
    """Writes that commit while their writer sees them fail, in all (runs with the lease through peers)."""

    def defines(self) -> list[str]:
        flags = [f"N={self.n}", f"LOSS={self.loss}", f"FAULTS={self.faults}", f"OUTAGES={self.outages}"]
        flags += [f"LEAVES={self.leaves}"] if self.leaves else []
        flags += [f"UNSURE={self.unsure}"] if self.unsure else []
        return flags + ([f"DELAYS={self.delays}"] if self.delays else [])

    def __str__(self) -> str:
        return " ".join(self.defines())


SAFETY_LTL = frozenset({"dead_terminal"})
"""ltl blocks that are safety properties: checked without cycle detection or fairness."""

CHECKED = {3: Bounds(3, loss=3, faults=2, outages=1), 4: Bounds(4, loss=3, faults=1, outages=1)}
"""The bounds the test suite proves the model under, per N (docs/protocol.md, "The model")."""

LEASE_CHECKED = Bounds(3, loss=1, faults=1, outages=1, leaves=1, delays=1)
"""The bounds the test suite proves the lease and the takeover wait under (``-DLEASE``)."""

PEERS_CHECKED = Bounds(3, loss=1, faults=1, outages=2, unsure=1)
"""The bounds the test suite proves the lease through peers under (``-DLEASE -DPEERS``): two
table outages, and one write whose writer does not learn that it committed."""

PEERS_MUTANT_BOUNDS = Bounds(3, loss=1, faults=1, outages=1, unsure=1)
"""Smaller bounds for the lease-through-peers mutants and witness: their counterexamples need one outage."""

JOINS_CHECKED = Bounds(3, loss=1, faults=1, outages=1)
"""The bounds the test suite proves joins under (``-DLEASE -DPEERS -DJOINS``): silo 0 joins; one
table outage (no graceful leave, no delayed read, no write of unknown outcome)."""

JOINS_MUTANT_BOUNDS = Bounds(3, loss=0, faults=0, outages=1)
"""Smaller bounds for the join mutants: a join and one outage, nothing else, give their counterexamples."""


@dataclass(frozen=True)
class Verdict:
    """What pan said."""

    errors: int
    states: int
    seconds: float
    """pan's own search time."""
    wall: float
    """spin + gcc + pan."""
    complete: bool
    """False when the search stopped early (memory limit): a pass then proves nothing."""
    violation: str | None
    """The failed assertion's name, ``acceptance cycle``, or None."""
    output: str
    workdir: Path | None

    @property
    def proved(self) -> bool:
        return self.errors == 0 and self.complete

    def summary(self) -> str:
        outcome = "no errors" if self.errors == 0 else f"{self.errors} error(s): {self.violation}"
        partial = "" if self.complete or self.errors else " (search NOT complete: memory limit)"
        return f"{outcome}{partial}; {self.states} states stored; pan {self.seconds:.1f} s, total {self.wall:.1f} s"


def missing_tools() -> list[str]:
    return [tool for tool in SPIN_PACKAGES if shutil.which(tool) is None]


def ensure_tools() -> str | None:
    """Install Debian's spin (and gcc) when missing and running as root; None if usable, else why not."""
    missing = missing_tools()
    if not missing:
        return None
    if os.geteuid() != 0:
        return f"{', '.join(missing)} not installed and not root: apt-get install -y {' '.join(missing)}"
    packages = [SPIN_PACKAGES[tool] for tool in missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    result = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        result = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    still = missing_tools()
    if still:
        return f"could not install {', '.join(still)}: {result.stderr.strip()[-500:]}"
    return None


def _parse(output: str) -> tuple[int, int, float, bool, str | None]:
    errors = re.search(r"errors: (\d+)", output)
    states = re.search(r"(\d+) states, stored", output)
    elapsed = re.search(r"pan: elapsed time ([\d.e+]+) seconds", output)
    assertion = re.search(r"assertion violated\s+(.+?) \(at depth", output)
    violation: str | None = None
    if assertion:
        violation = assertion.group(1).strip()
    elif "acceptance cycle" in output:
        violation = "acceptance cycle"
    complete = "Search not completed" not in output and "reached -DMEMLIM bound" not in output
    return (
        int(errors.group(1)) if errors else -1,
        int(states.group(1)) if states else 0,
        float(elapsed.group(1)) if elapsed else 0.0,
        complete and errors is not None,
        violation,
    )


def verify(
    bounds: Bounds,
    *,
    ltl: str | None = None,
    defines: Sequence[str] = (),
    lease: bool = False,
    peers: bool = False,
    joins: bool = False,
    symmetry: bool = True,
    ignore_assertions: bool = False,
    optimize: bool = True,
    hash_bits: int = 24,
    memory_mb: int = 4096,
    bitstate: bool = False,
    timeout: float = 600.0,
    keep: Path | None = None,
) -> Verdict:
    """Run one check: the assertions (``ltl`` None) or one ltl block (under weak fairness
    unless it is a safety property).

    ``lease`` adds the membership lease, the key and the takeover wait (``-DLEASE``: its
    assertion ``one_server_per_key``; assertions only, without the symmetry reduction, which
    the key's order of the silos breaks); ``peers`` adds to it the lease through peers during a
    table outage (``-DPEERS``), and ``joins`` a silo that joins (``-DJOINS``). ``symmetry`` reduces
    assertion runs by renaming the
    silos (never for ltl blocks, which name silo 0); ``ignore_assertions`` makes a liveness
    run report the ltl property only (a safety ltl block is itself an assertion of the never
    claim: use ``NO_ASSERTIONS``). ``optimize`` False compiles pan with ``gcc -O0`` (about 1 s
    instead of 4): for a search that ends within ~100,000 states. ``bitstate`` trades
    exhaustiveness for memory (supertrace, 2^hash_bits bits, 3 hashes): a pass then covers
    most, not all, of the states.
    """
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="spin-", dir=keep)) if keep else Path(tempfile.mkdtemp(prefix="spin-"))
    try:
        shutil.copy(MODEL, workdir / MODEL.name)
        peers = peers or joins
        lease = lease or peers
        flags = [*bounds.defines(), *(["LEASE"] if lease else []), *(["PEERS"] if peers else [])]
        flags += [*(["JOINS"] if joins else []), *defines]
        if ltl is None and symmetry and not lease:
            flags.append("SYMMETRY")
        liveness = ltl is not None and ltl not in SAFETY_LTL
        if liveness:
            flags.append("LIVENESS")
        spin = ["spin", "-a", *(f"-D{flag}" for flag in flags), MODEL.name]
        _run(spin, workdir, timeout)
        (workdir / "flags").write_text(" ".join(f"-D{flag}" for flag in flags) + "\n")
        store = "-DBITSTATE" if bitstate else "-DCOLLAPSE"
        gcc = ["gcc", "-O2" if optimize else "-O0", "-w", "-o", "pan", "pan.c", store, "-DVECTORSZ=1024"]
        gcc.append(f"-DMEMLIM={memory_mb}")
        gcc += ["-DNFAIR=3"] if liveness else ["-DSAFETY"] if ltl else ["-DSAFETY", "-DNOCLAIM"]
        _run(gcc, workdir, timeout)
        pan = ["./pan", "-m200000", f"-w{hash_bits}", *(["-k3"] if bitstate else [])]
        if ltl is not None:
            pan += ["-a", "-f", "-N", ltl] if liveness else ["-N", ltl]
        if ignore_assertions:
            pan.append("-A")
        output = _run(pan, workdir, timeout, check=False)
        errors, states, seconds, complete, violation = _parse(output)
        return Verdict(
            errors, states, seconds, time.monotonic() - started, complete, violation, output, workdir if keep else None
        )
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(argv: list[str], cwd: Path, timeout: float, *, check: bool = True) -> str:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout + result.stderr


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4, choices=(3, 4, 5))
    parser.add_argument("--loss", type=int, help="lost link-rounds (default: the suite's bound for N, else 1)")
    parser.add_argument("--faults", type=int, help="crashes and hangs (default: the suite's bound for N, else 1)")
    parser.add_argument("--outages", type=int, help="table outages (default: the suite's bound for N, else 1)")
    parser.add_argument("--lease", action="store_true", help="add the lease and the takeover wait (-DLEASE)")
    parser.add_argument("--peers", action="store_true", help="the lease through peers too (-DLEASE -DPEERS)")
    parser.add_argument("--joins", action="store_true", help="a silo that joins too (-DLEASE -DPEERS -DJOINS)")
    parser.add_argument("--unsure", type=int, help="writes of unknown outcome, with --peers (default: 1)")
    parser.add_argument("--leaves", type=int, help="graceful leaves, with --lease (default: 1)")
    parser.add_argument("--delays", type=int, help="reads answered rounds later, with --lease (default: 1)")
    parser.add_argument("--ltl", help="check this ltl block (dead_stops, crash_detected, liveness, dead_terminal)")
    parser.add_argument("-D", dest="defines", action="append", default=[], help="a switch, e.g. MUTANT_BLIND_WRITE")
    parser.add_argument("--no-symmetry", action="store_true", help="safety runs without the symmetry reduction")
    parser.add_argument("-w", dest="hash_bits", type=int, default=26, help="pan -w (hash table of 2^w slots)")
    parser.add_argument("--memory-mb", type=int, default=6000)
    parser.add_argument("--bitstate", action="store_true", help="supertrace: approximate, 2^w bits of memory")
    parser.add_argument("--keep", type=Path, help="keep the work directory (pan, trail) under this directory")
    args = parser.parse_args(argv)
    reason = ensure_tools()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    if (args.lease or args.peers or args.joins) and args.ltl:
        parser.error("--lease, --peers and --joins check assertions only")
    if args.joins:
        default = JOINS_CHECKED if args.n == JOINS_CHECKED.n else Bounds(args.n, 1, 1, 1)
    elif args.peers:
        default = PEERS_CHECKED if args.n == PEERS_CHECKED.n else Bounds(args.n, 1, 1, 2, unsure=1)
    elif args.lease:
        default = LEASE_CHECKED if args.n == LEASE_CHECKED.n else Bounds(args.n, 1, 1, 1, leaves=1, delays=1)
    else:
        default = CHECKED.get(args.n, Bounds(args.n, 1, 1, 1))
    bounds = Bounds(
        args.n,
        default.loss if args.loss is None else args.loss,
        default.faults if args.faults is None else args.faults,
        default.outages if args.outages is None else args.outages,
        default.leaves if args.leaves is None else args.leaves,
        default.delays if args.delays is None else args.delays,
        default.unsure if args.unsure is None else args.unsure,
    )
    verdict = verify(
        bounds,
        ltl=args.ltl,
        defines=args.defines,
        lease=args.lease,
        peers=args.peers,
        joins=args.joins,
        symmetry=not args.no_symmetry,
        hash_bits=args.hash_bits,
        memory_mb=args.memory_mb,
        bitstate=args.bitstate,
        keep=args.keep,
    )
    lease = " with the lease through peers" if args.peers else " with the lease" if args.lease else ""
    lease = " with the lease through peers and a join" if args.joins else lease
    what = f"ltl {args.ltl}" if args.ltl else "assertions" + lease
    what += " (bitstate)" if args.bitstate else ""
    print(f"{bounds} {' '.join('-D' + d for d in args.defines)} {what}: {verdict.summary()}")
    if verdict.workdir is not None:
        print(f"work directory: {verdict.workdir}")
    return 0 if verdict.proved else 1


if __name__ == "__main__":
    sys.exit(main())
