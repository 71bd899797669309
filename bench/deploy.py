"""Deployment precisions (isa/deploy/) measured: what a precision costs in time and in accuracy.

Time: a network written as ONNX (examples/onnx_models.py, float32, seeded random weights)
deployed in FP32, FP16 and INT8 on each chip, in timing mode, beside bench/resnet50.py's INT8 graph
built op by op (ResNet-50 only, with the deployed graph's difference from it). INT8 takes every
tensor's threshold from `--threshold`, and for ResNet-50 also from a calibration on `--samples`
random inputs at 32 x 32 (the same network and tensor names; the thresholds decide the residual
adds' shifts, hence a few instructions).

Accuracy: the same network at a small size, in functional mode, against the float32 model on
`generic`: cosine similarity and largest absolute error of the output, as TPU-MLIR's
model_deploy compares a deployed model with the float one; INT8 calibrated on `--samples` random
inputs through the simulator, checked on another.

    python bench/deploy.py                                  # ResNet-50 on bm1684 and bm1686
    python bench/deploy.py --model yolov5s --chip bm1686
    python bench/deploy.py --accuracy                       # the accuracy table (a few CPU-minutes)
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "bench")]

import chips  # noqa: E402 - after the sys.path line
import isa  # noqa: E402 - after the sys.path line
import sim  # noqa: E402 - after the sys.path line
from isa.lower.check import allows  # noqa: E402 - after the sys.path line

PRECISIONS = ("FP32", "F16", "INT8")


def timing(model, chip, precision, calibration=None):
    g = isa.from_onnx(model) if precision == "FP32" else isa.from_onnx(model, quantize=precision, chip=chip.name, calibration=calibration)
    return sim.execute(isa.lower(g, chip), chip, mode="timing").seconds * 1e3


def small_calibration(builder, samples):
    """The thresholds of builder's network measured on `samples` random 32 x 32 inputs: the same
    weights and tensor names at any input size, with short functional runs."""
    floating = isa.from_onnx(builder(size=32))
    return isa.deploy.measure(floating, isa.deploy.random_samples(floating, samples))


def versus(ms, hand):
    """ms against the hand-built graph's time, as a signed percentage (nothing without one)."""
    return f" ({ms / hand - 1:+.1%})" if hand else ""


def accuracy(model, samples):
    """{precision: (cosine, max abs error, largest |output|)} on one random input."""
    floating = isa.from_onnx(model)
    rng = np.random.default_rng(1234)
    name = floating.inputs[0]
    x = rng.standard_normal(floating.tensors[name].shape).astype(np.float32)
    onnx_name = next(k for k, v in floating.onnx_inputs.items() if v == name)
    out = next(iter(floating.outputs))
    want = sim.run(floating, chips.load("generic"), inputs={onnx_name: x}).outputs[out].astype(np.float64)
    table = isa.deploy.measure(floating, isa.deploy.random_samples(floating, samples))
    rows = {}
    for precision, chip in (("F16", "bm1686"), ("BF16", "generic"), ("INT8", "bm1684"), ("INT8", "bm1686")):
        g = isa.from_onnx(model, quantize=precision, chip=chip, calibration=table if precision == "INT8" else None)
        got = sim.run(g, chips.load(chip), inputs={onnx_name: x}).outputs[out].reshape(want.shape)
        rows[(precision, chip)] = (*isa.deploy.similarity(got, want), float(np.abs(want).max()))
    return rows


def main(argv=None):
    import onnx_models
    import resnet50

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a builder of examples/onnx_models.py (default: resnet50)")
    parser.add_argument("--chip", action="append", help="chips (default: bm1684 and bm1686)")
    parser.add_argument("--threshold", type=float, default=8.0, help="INT8's threshold for every tensor in timing (default: 8)")
    parser.add_argument("--accuracy", action="store_true", help="print the accuracy table instead (ResNet-50 at 32 x 32)")
    parser.add_argument("--samples", type=int, default=4, help="calibration samples (default: 4)")
    args = parser.parse_args(argv)
    if args.accuracy:
        start = time.process_time()
        rows = accuracy(onnx_models.resnet50(size=32), args.samples)
        print(f"ResNet-50 at 32 x 32 against float32, INT8 calibrated on {args.samples} random inputs:")
        print(f"  {'precision':<9} {'chip':<8} {'cosine':>8} {'max abs error':>14} {'max |float|':>12}")
        for (precision, chip), (cos, err, top) in rows.items():
            print(f"  {precision:<9} {chip:<8} {cos:8.5f} {err:14.4g} {top:12.4g}")
        print(f"({time.process_time() - start:.0f} CPU-s)")
        return 0
    model = getattr(onnx_models, args.model)()
    table = small_calibration(onnx_models.resnet50, args.samples) if args.model == "resnet50" else None
    for name in args.chip or ("bm1684", "bm1686"):
        chip = chips.load(name)
        hand = sim.execute(isa.lower(resnet50.resnet50("int8"), chip), chip, mode="timing").seconds * 1e3 if table else None
        cells = []
        for precision in PRECISIONS:
            if precision == "F16" and not allows(chip.support("conv"), ["float16"] * 2, "float16"):
                continue
            if precision != "INT8":
                cells.append(f"{precision} {timing(model, chip, precision):.3f} ms")
                continue
            ms = timing(model, chip, precision, isa.deploy.Table(default=args.threshold))
            cells.append(f"INT8 (every threshold {args.threshold:g}) {ms:.3f} ms{versus(ms, hand)}")
            if table:
                ms = timing(model, chip, precision, table)
                cells.append(f"INT8 calibrated {ms:.3f} ms{versus(ms, hand)}")
        if hand:
            cells.append(f"INT8 built op by op (bench/resnet50.py) {hand:.3f} ms")
        print(f"{args.model} on {name}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
