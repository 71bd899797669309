"""A decode step's distance from its floor: one decoder layer for one new token over a cache of
each length, simulated in timing mode on each chip, against the layer's weights and the cache it
reads streamed once at the DDR's bandwidth (bench/llm.py's decode_floor). Issue 22's fidelity goal
is within 1.5x on every chip: what the lowering adds to the streams (waits, tiles, layout changes)
shows here, the per-head products' reads of the caches most at long caches.

    python bench/llm_floor.py                                                  # llama2-7b, 576 and 4096 cached tokens
    python bench/llm_floor.py --model tinyllama-1.1b --lengths 256 2048 --chips generic:float32 bm1686:w4a16

A dtype is bench/llm.py's --dtype: float16 and the weight-only schemes (w8a16, w4a16: int8 or int4
weights, float16 activations) deployed for the chip as bench/llm.py deploys them, float32 as built.
"""

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import chips
from isa.errors import SimError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm  # examples/llm.py, imported before bench/llm.py puts bench/ first on the path

_spec = importlib.util.spec_from_file_location("bench_llm", Path(__file__).resolve().parent / "llm.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# each chip in the dtypes it runs a decoder layer in: bm1684 in float32 only; bm1686 in float16 and its
# weight-only schemes too (deployed: softmax, sqrt, sigmoid in float32 between casts), the one table
# with matrix_mul_a16 (on the Ascend chips the products keep float16 weights)
CHIPS = ("ascend910b:float16", "bm1686:float32", "bm1686:float16", "bm1686:w8a16", "bm1686:w4a16", "bm1684:float32",
         "generic:float32")


def rows(model, chip_dtypes, lengths):
    """One line per chip and cache length: simulated time, floor, their ratio, CPU seconds."""
    cfg = llm.config(model)
    for chip_dtype in chip_dtypes:
        name, _, dtype = chip_dtype.partition(":")
        chip = chips.load(name)
        for length in lengths:
            start = time.process_time()
            act, quantize = bench.activations(dtype), bench.deployed(dtype)
            step = bench.simulate(lambda n=length, dt=act: llm.decoder_layer(cfg, 1, 1, n, dt, 0), chip, top=0, quantize=quantize)
            floor_bytes, floor = bench.decode_floor(cfg, chip, dtype, 1, length)
            yield (f"{model} {name} {dtype} cache {length}: {step.seconds * 1e3:.3f} ms, floor {floor * 1e3:.3f} ms "
                   f"({floor_bytes / 1e6:.1f} MB over {bench.ddr_bandwidth(chip) / 1e9:.0f} GB/s), {step.seconds / floor:.2f}x the floor; "
                   f"{step.instructions:,} instructions, {time.process_time() - start:.1f} CPU s")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(llm.CONFIGS), default="llama2-7b")
    p.add_argument("--chips", nargs="+", default=list(CHIPS), help="chip:dtype pairs (default: %(default)s)")
    p.add_argument("--lengths", nargs="+", type=int, default=[576, 4096], help="cached tokens (default: 576 4096)")
    args = p.parse_args(argv)
    dtypes = sorted(set(bench.DTYPE_BYTES) | set(bench.WEIGHT_ONLY))
    if min(args.lengths) < 1 or any(c.count(":") != 1 or c.partition(":")[2] not in dtypes for c in args.chips):
        p.error(f"--lengths are at least 1; --chips are chip:dtype pairs, a dtype one of {', '.join(dtypes)}")
    try:
        for line in rows(args.model, args.chips, args.lengths):
            print(line, flush=True)
    except SimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
