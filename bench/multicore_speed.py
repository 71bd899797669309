"""How fast the machine simulates a many-core chip: ResNet-50 float16 on the 24-core ascend910b in
timing mode, beside the same network on a one-core ascend910b (`cores=1`).

Lowering ResNet-50 for ascend910b takes far longer than simulating it, so each chip's lowered
program is kept as text (`Program.to_text`) under out/multicore_speed/ and read back with
`Program.from_text` on later runs. The file's name carries a digest of the sources that decide
the program (isa/, chips/, bench/resnet50.py), so a change to the lowering lowers again.
The script prints, per chip, the simulated cycles, the wall and CPU seconds of `sim.execute` in
timing mode (each the best of --runs) and the instructions simulated per CPU second; the target
for ascend910b is at most 5 CPU-seconds.

    python bench/multicore_speed.py
    python bench/multicore_speed.py --runs 1 --profile 25   # with the cProfile of one 910B run
"""

import argparse
import cProfile
import hashlib
import pstats
import time
from pathlib import Path

from resnet50 import resnet50  # bench/resnet50.py, beside this script

import chips
import isa
import sim

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "out" / "multicore_speed"
TARGET = 5.0  # seconds to simulate ResNet-50 float16 on ascend910b in timing mode
CHIPS = {"ascend910b": {}, "ascend910b cores=1": {"cores": 1}}  # label -> overrides of ascend910b
DTYPE = "float16"


def sources_digest():
    """A digest of every file the lowered program depends on."""
    h = hashlib.sha256()
    files = sorted([*(ROOT / "isa").rglob("*.py"), *(ROOT / "chips").rglob("*.py"), *(ROOT / "chips").glob("*.yaml"),
                    ROOT / "bench" / "resnet50.py"])
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def lowered(chip, label):
    """ResNet-50 float16 lowered for chip, from the cache when its sources have not changed:
    (program, seconds spent lowering now or None when read from the cache)."""
    stem = f"resnet50_{DTYPE}_{label.replace(' ', '_').replace('=', '')}_"
    path = CACHE / f"{stem}{sources_digest()}.txt"
    if path.exists():
        return isa.Program.from_text(path.read_text()), None
    start = time.process_time()
    program = isa.lower(resnet50(DTYPE), chip)
    spent = time.process_time() - start
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{stem}*.txt"):  # lowered from sources since changed
        old.unlink()
    path.write_text(program.to_text())
    return program, spent


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="timing-mode runs per chip; the best is shown")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile one ascend910b run and list its N costliest functions")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    for label, overrides in CHIPS.items():
        chip = chips.load("ascend910b", overrides=overrides)
        program, lower_s = lowered(chip, label)
        runs = [timed(lambda program=program, chip=chip: sim.execute(program, chip, mode="timing")) for _ in range(args.runs)]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        res = runs[0][2]
        n = len(program)
        source = "read from out/multicore_speed" if lower_s is None else f"lowered in {lower_s:.1f} CPU-s"
        print(f"ResNet-50 {DTYPE} on {label} ({chip.cores} cores): {n:,} instructions ({source}), {res.cycles:,} cycles")
        print(f"  timing mode, best of {args.runs}: wall {wall:.2f} s, CPU {cpu:.2f} s, {n / cpu:,.0f} instructions per CPU-second")
        if not overrides:
            print(f"  target: at most {TARGET:.0f} CPU-s: {'met' if cpu <= TARGET else 'NOT met'}")
            if args.profile:
                profile = cProfile.Profile()
                profile.runcall(sim.execute, program, chip, mode="timing")
                pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
