"""The import passes' effect on a network exported the way Paddle2ONNX writes it: simulated
cycles of examples/onnx_models.py's `pp_lcnet` (a PP-LCNet-style classifier) exported Paddle-style
(every weight a Constant node, BatchNormalization nodes, hardswish as Add -> Clip -> Mul -> Div,
scalar Mul/Add after each convolution) against its twin built op by op (initializers,
BatchNormalization folded, HardSwish nodes), imported with every pass, with none, and with all
but one (isa.from_onnx(..., passes=...)), on each chip, in timing mode.

    python bench/onnx_passes.py                          # bm1684, bm1686 and generic
    python bench/onnx_passes.py --chip bm1684 --size 224
"""

import argparse
import sys
from pathlib import Path

import chips
import isa
import sim
from isa.onnx import PASSES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import onnx_models


def cycles(model, chip, passes=None):
    return sim.run(isa.from_onnx(model, passes=passes), chip, mode="timing").cycles


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chip", action="append", help="chip (repeatable; default: bm1684, bm1686, generic)")
    p.add_argument("--size", type=int, default=64, help="input height and width (default: 64)")
    p.add_argument("--batch", type=int, default=1)
    args = p.parse_args(argv)
    paddle = onnx_models.pp_lcnet("paddle", batch=args.batch, size=args.size)
    twin = onnx_models.pp_lcnet("twin", batch=args.batch, size=args.size)
    for name in args.chip or ("bm1684", "bm1686", "generic"):
        chip = chips.load(name)
        base = cycles(twin, chip)
        rows = [("twin (op by op)", base), ("paddle-style, every pass", cycles(paddle, chip)),
                ("paddle-style, no pass", cycles(paddle, chip, ()))]
        rows += [(f"paddle-style, without {off}", cycles(paddle, chip, [q for q in PASSES if q != off])) for off in PASSES]
        print(f"pp_lcnet {args.batch}x3x{args.size}x{args.size} on {chip.name} (timing mode):")
        for label, n in rows:
            print(f"  {label:36s} {n:>10,} cycles  {n / base:6.3f}x the twin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
