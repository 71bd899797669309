"""How fast the simulator runs, measured against SimPy's own floor.

The machine spends about one SimPy event per instruction (one for a run of compute
instructions no other engine waits on), so its speed is bounded by roughly the rate at which
SimPy hands items from one process to another. This script lowers
a long chain of element-wise ops over a tensor cut into thousands of tiles (the generic chip
with its local memory shrunk to 1 KiB per lane), times `sim.execute` in timing mode (best of
3), times a bare producer/consumer handoff through a `simpy.Store` of capacity 1 (best of 3),
and prints the ratio of the two rates; the target is at least 0.5. A second case is bound by
its DMA rather than its compute: add -> relu -> scale over two tensors of 2^24 float32 on bm1684
with its local memory cut to 2 KiB per lane, so each of its 2,048 tiles is two loads, three
vector ops, a store and two waits (16,384 instructions) and the GDMA is busy throughout; it is
timed the same way against the same handoff. It also times functional mode on the first
program and the demo model (examples/mlp.yaml on bm1684) end to end. Times are CPU seconds of
this process: wall time swings with whatever else the machine runs.

    python bench/sim_speed.py            # a graph of about 110,000 instructions, and the DMA-bound chain
    python bench/sim_speed.py --quick    # small graphs, as a smoke run
    python bench/sim_speed.py --profile  # also the DMA-bound chain's timing run under cProfile: its top functions
"""

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import numpy as np
import simpy

import chips
import isa
import isa.graphfile
import sim

TARGET = 0.5
WIDTH = 1024
DMA_LMEM = "2KiB"  # per lane: 2,048 tiles of the DMA-bound chain
PROFILE_TOP = 25
MLP = Path(__file__).resolve().parent.parent / "examples" / "mlp.yaml"


def chain(rows, depth):
    """x (rows x WIDTH) through `depth` element-wise ops, cycling through add/mul/max with a
    broadcast row b, adds, muls and relu, so every vector function the ops lower to appears."""
    g = isa.Graph("chain")
    x = g.input("x", (rows, WIDTH), "float32")
    b = g.input("b", (1, WIDTH), "float32")
    steps = [
        lambda t: isa.ops.add(t, b),
        lambda t: isa.ops.mul(t, b),
        lambda t: isa.ops.max(t, b),
        lambda t: isa.ops.adds(t, 1.0),
        lambda t: isa.ops.muls(t, 0.5),
        lambda t: isa.ops.active(t, "relu"),
    ]
    y = x
    for i in range(depth):
        y = steps[i % len(steps)](y)
    g.output(y, "y")
    return g


def dma_chain(elements):
    """x + y, relu, times 0.5 (add, active relu, muls) over two float32 tensors of `elements`:
    one layer group, each tile loading both operands and storing the result."""
    g = isa.Graph("dma_chain")
    shape = (elements // WIDTH, WIDTH)
    x, y = g.input("x", shape, "float32"), g.input("y", shape, "float32")
    g.output(isa.ops.muls(isa.ops.active(isa.ops.add(x, y), "relu"), 0.5), "z")
    return g


def timed(fn):
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def best_of(fn, runs=3):
    return min(timed(fn)[0] for _ in range(runs))


def handoff(n):
    """n items from a producer to a consumer through a Store of capacity 1."""
    env = simpy.Environment()
    store = simpy.Store(env, capacity=1)

    def producer():
        for i in range(n):
            yield store.put(i)

    def consumer():
        for _ in range(n):
            yield store.get()

    env.process(producer())
    env.process(consumer())
    env.run()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small graphs (about 7,000 and 1,000 instructions)")
    parser.add_argument("--profile", action="store_true", help="profile the DMA-bound chain's timing run: its top functions")
    args = parser.parse_args()
    rows, depth, items = (1024, 14, 20_000) if args.quick else (16384, 14, 200_000)
    elements = 2**20 if args.quick else 2**24

    chip = chips.load("generic", overrides={"memories.lmem.size": "1KiB"})
    graph = chain(rows, depth)
    lower_s, program = timed(lambda: isa.lower(graph, chip))
    n = len(program)

    timing_s = best_of(lambda: sim.execute(program, chip, mode="timing"))
    sim_rate = n / timing_s
    handoff_rate = items / best_of(lambda: handoff(items))
    ratio = sim_rate / handoff_rate

    bm1684_small = chips.load("bm1684", overrides={"memories.lmem.size": DMA_LMEM})
    dma_program = isa.lower(dma_chain(elements), bm1684_small)
    dma_s = best_of(lambda: sim.execute(dma_program, bm1684_small, mode="timing"))
    dma_rate = len(dma_program) / dma_s
    dma_ratio = dma_rate / handoff_rate

    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((rows, WIDTH), np.float32), "b": rng.standard_normal((1, WIDTH), np.float32)}
    functional_s, _ = timed(lambda: sim.execute(program, chip, inputs, mode="functional"))

    mlp = isa.graphfile.load(MLP)
    bm1684 = chips.load("bm1684")
    mlp_s = best_of(lambda: sim.execute(isa.lower(mlp.graph, bm1684), bm1684, mlp.defaults, mode="functional"))

    verdict = "met" if ratio >= TARGET else "NOT met"
    rows_out = [
        ("graph", f"chain of {depth} ops over {rows}x{WIDTH} float32, generic chip, lmem 1KiB/lane"),
        ("instructions", f"{n:,}"),
        ("lowering", f"{lower_s:.3f} s"),
        ("timing mode (best of 3)", f"{timing_s:.3f} s  {sim_rate:,.0f} instr/s"),
        ("simpy handoff (best of 3)", f"{handoff_rate:,.0f} items/s  ({items:,} items)"),
        ("ratio sim / handoff", f"{ratio:.3f}  (target >= {TARGET}: {verdict})"),
        ("dma-bound chain", f"add, relu, muls over 2x{elements:,} float32, bm1684, lmem {DMA_LMEM}/lane"),
        ("  instructions", f"{len(dma_program):,}"),
        ("  timing mode (best of 3)", f"{dma_s:.3f} s  {dma_rate:,.0f} instr/s"),
        ("  ratio sim / handoff", f"{dma_ratio:.3f}  (target >= {TARGET}: {'met' if dma_ratio >= TARGET else 'NOT met'})"),
        ("functional mode", f"{functional_s:.3f} s  {n / functional_s:,.0f} instr/s"),
        ("mlp.yaml on bm1684 (best of 3)", f"{mlp_s:.3f} s  (lower + execute functional)"),
    ]
    width = max(len(label) for label, _ in rows_out)
    for label, value in rows_out:
        print(f"{label:<{width}}  {value}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(sim.execute, dma_program, bm1684_small, mode="timing")
        print("\ndma-bound chain, timing mode under cProfile (slower than unprofiled), by cumulative time:")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(PROFILE_TOP)


if __name__ == "__main__":
    main()
