"""The ONNX backend node tests of every op the importer maps, run on npusim's ONNX backend
(isa.onnx.backend): a table per op (cases passed, failed, total) and the closing line
`conformance: P passed, F failed of N`.

A case is of a mapped op when every node of its model has a mapping (isa.onnx.OPS); it runs in
functional mode (the `generic` chip by default: every op, every dtype) through the backend's
prepare and run, and passes when every output equals the expected one as onnx's backend test
runner judges it (tests/onnx_cases.py). A case npusim refuses (a dtype it lacks, an attribute
it cannot express) counts as failed.

    python bench/conformance.py                  # the table and the closing line
    python bench/conformance.py --failures       # and every failed case with its reason
    python bench/conformance.py --op Resize --failures
"""

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import chips  # first: tests/chips (test chip files) must not stand for the package
from isa import SimError

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
import onnx_cases


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chip", default="generic", help="chip to run the cases on (default: generic)")
    p.add_argument("--op", help="only the cases of this ONNX op type")
    p.add_argument("--failures", action="store_true", help="list every failed case and why")
    args = p.parse_args(argv)
    chip = chips.load(args.chip)
    start = time.process_time()
    rows = defaultdict(lambda: [0, 0])
    failures = []
    for case, op in onnx_cases.mapped_cases():
        if args.op and op != args.op:
            continue
        try:
            onnx_cases.check(case, chip)
            rows[op][0] += 1
        except (AssertionError, SimError) as exc:
            rows[op][1] += 1
            reason = str(exc).strip().splitlines()
            failures.append((case.name, op, f"{type(exc).__name__}: {' '.join(r.strip() for r in reason[:3])}"))
    table = [("op", "passed", "failed", "total")] + [(op, p, f, p + f) for op, (p, f) in sorted(rows.items())]
    widths = [max(len(str(r[i])) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    if args.failures:
        print()
        for name, op, reason in failures:
            print(f"{name} [{op}]: {reason[:300]}")
    passed, failed = sum(r[0] for r in rows.values()), sum(r[1] for r in rows.values())
    print(f"({len(rows)} ops on {chip.name}, {time.process_time() - start:.1f} CPU-s)")
    print(f"conformance: {passed} passed, {failed} failed of {passed + failed} ({100 * passed / max(passed + failed, 1):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
