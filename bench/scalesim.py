"""npusim beside SCALE-Sim 3.0 on SCALE-Sim's own ResNet-50 topology: 54 layers, each the GEMM
SCALE-Sim builds, on a 32 x 32 output-stationary systolic array.

SCALE-Sim turns a convolution row (ifmap H x W, filter R x S, C channels, F filters, stride) into
M = output pixels without padding ((H - R) // stride + 1 rows, the same across), N = F,
K = R x S x C (scalesim/topology_utils.py: topo_calc_hyperparams, get_transformed_mnk_dimensions),
and runs it in ceil(M/32) x ceil(N/32) folds of K + 32 - 1 + 32 - 1 cycles each
(scalesim/compute/systolic_compute_os.py); it reports the last cycle's index, counted from 0
(scalesim/memory/double_buffered_scratchpad_mem.py: total_cycles = max(ofmap_serviced_cycles)),
so its figure is ceil(M/32) * ceil(N/32) * (K + 62) - 1, and an equal count of cycles is that
plus one.

This script derives the 54 layers from ResNet-50's architecture, checks them against SCALE-Sim's
topology rows, lowers each GEMM as an npusim matrix_mul (float32, one word) for
bench/scalesim_os32.yaml and runs it in timing mode. It prints per layer the matrix
engine's busy cycles beside SCALE-Sim's count, and the wall and CPU time of lowering and
simulating all 54 layers.

    python bench/scalesim.py
    python bench/scalesim.py --set memories.lmem.size=64KiB   # a smaller local memory cuts the deepest K
"""

import argparse
import math
import time
from pathlib import Path

import chips
import isa
import sim

CHIP = Path(__file__).resolve().parent / "scalesim_os32.yaml"  # beside the script: a bench/chips/ folder would hide the chips package
ARRAY = (32, 32)  # rows, columns: configs/scale.cfg ArrayHeight, ArrayWidth
SCALESIM_SECONDS = 645.0  # SCALE-Sim 3.0 on this topology and array (os dataflow), wall time on the 2-core development machine
TARGET = 100  # times faster than SCALE-Sim, end to end

# ResNet-50 as SCALE-Sim's topology has it (He et al., "Deep Residual Learning for Image
# Recognition", 2015, Table 1, in its original form with the stride on a block's first 1x1
# convolution): a 7x7/2 stem of 64 filters on 224 x 224 x 3, a 3x3/2 max pool, four stages of
# bottleneck blocks (width w: 1x1 to w, 3x3 to w, 1x1 to 4w; the first block of each stage has a
# 1x1 projection shortcut, "s"), and the 2048 -> 1000 classifier.
IMAGE, STEM = 224, (7, 2, 3, 64)  # size; kernel, stride, padding, filters
POOL = (3, 2, 1)  # kernel, stride, padding
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
CLASSES = 1000

# SCALE-Sim's rows: topologies/conv_nets/Resnet50.csv of github.com/scalesim-project/scale-sim-v3
# at commit fab89b777d7363550b7560ff615a11f888db46b9 (name, ifmap height, ifmap width, filter
# height, filter width, channels, filters, stride). Layer dimensions, copied as facts.
SCALESIM_ROWS = """
Conv1,224,224,7,7,3,64,2
CB2a_1,56,56,1,1,64,64,1
CB2a_2,56,56,3,3,64,64,1
CB2a_3,56,56,1,1,64,256,1
CB2s,56,56,1,1,64,256,1
IB2b_1,56,56,1,1,256,64,1
IB2b_2,56,56,3,3,64,64,1
IB2b_3,56,56,1,1,64,256,1
IB2c_1,56,56,1,1,256,64,1
IB2c_2,56,56,3,3,64,64,1
IB2c_3,56,56,1,1,64,256,1
CB3a_1,56,56,1,1,256,128,2
CB3a_2,28,28,3,3,128,128,1
CB3a_3,28,28,1,1,128,512,1
CB3s,56,56,1,1,256,512,2
IB3b_1,28,28,1,1,512,128,1
IB3b_2,28,28,3,3,128,128,1
IB3b_3,28,28,1,1,128,512,1
IB3c_1,28,28,1,1,512,128,1
IB3c_2,28,28,3,3,128,128,1
IB3c_3,28,28,1,1,128,512,1
IB3d_1,28,28,1,1,512,128,1
IB3d_2,28,28,3,3,128,128,1
IB3d_3,28,28,1,1,128,512,1
CB4a_1,28,28,1,1,512,256,2
CB4a_2,14,14,3,3,256,256,1
CB4a_3,14,14,1,1,256,1024,1
CB4s,28,28,1,1,512,1024,2
IB4b_1,14,14,1,1,1024,256,1
IB4b_2,14,14,3,3,256,256,1
IB4b_3,14,14,1,1,256,1024,1
IB4c_1,14,14,1,1,1024,256,1
IB4c_2,14,14,3,3,256,256,1
IB4c_3,14,14,1,1,256,1024,1
IB4d_1,14,14,1,1,1024,256,1
IB4d_2,14,14,3,3,256,256,1
IB4d_3,14,14,1,1,256,1024,1
IB4e_1,14,14,1,1,1024,256,1
IB4e_2,14,14,3,3,256,256,1
IB4e_3,14,14,1,1,256,1024,1
IB4f_1,14,14,1,1,1024,256,1
IB4f_2,14,14,3,3,256,256,1
IB4f_3,14,14,1,1,256,1024,1
CB5a_1,14,14,1,1,1024,512,2
CB5a_2,7,7,3,3,512,512,1
CB5a_3,7,7,1,1,512,2048,1
CB5s,14,14,1,1,1024,2048,2
IB5b_1,7,7,1,1,2048,512,1
IB5b_2,7,7,3,3,512,512,1
IB5b_3,7,7,1,1,512,2048,1
IB5c_1,7,7,1,1,2048,512,1
IB5c_2,7,7,3,3,512,512,1
IB5c_3,7,7,1,1,512,2048,1
FC6,1,1,1,1,2048,1000,1
"""


def out_size(size, kernel, stride, pad=0):
    return (size + 2 * pad - kernel) // stride + 1


def layers():
    """ResNet-50's convolutions and classifier in SCALE-Sim's order and naming: (name, ifmap
    height, ifmap width, filter height, filter width, channels, filters, stride), the ifmap as the
    layer receives it, before padding."""
    kernel, stride, pad, filters = STEM
    rows = [("Conv1", IMAGE, IMAGE, kernel, kernel, 3, filters, stride)]
    size = out_size(out_size(IMAGE, kernel, stride, pad), *POOL)
    channels = filters
    for s, (width, blocks, first_stride) in enumerate(STAGES, start=2):
        for b in range(blocks):
            stride = first_stride if b == 0 else 1
            inner = out_size(size, 1, stride)
            name = f"CB{s}a" if b == 0 else f"IB{s}{chr(ord('a') + b)}"
            rows += [
                (f"{name}_1", size, size, 1, 1, channels, width, stride),
                (f"{name}_2", inner, inner, 3, 3, width, width, 1),
                (f"{name}_3", inner, inner, 1, 1, width, 4 * width, 1),
            ]
            if b == 0:
                rows.append((f"CB{s}s", size, size, 1, 1, channels, 4 * width, stride))
            size, channels = inner, 4 * width
    rows.append(("FC6", 1, 1, 1, 1, channels, CLASSES, 1))
    return rows


def scalesim_rows():
    return [(name, *map(int, dims)) for name, *dims in (line.split(",") for line in SCALESIM_ROWS.split())]


def gemm(row):
    """SCALE-Sim's GEMM of a topology row: (M, N, K), no padding."""
    _, h, w, fh, fw, channels, filters, stride = row
    return out_size(h, fh, stride) * out_size(w, fw, stride), filters, fh * fw * channels


def scalesim_cycles(m, n, k):
    rows, cols = ARRAY
    return math.ceil(m / rows) * math.ceil(n / cols) * (k + rows - 1 + cols - 1) - 1


def product(name, m, n, k):
    g = isa.Graph(name)
    g.output(isa.ops.matrix_mul(g.input("a", (m, k), "float32"), g.input("b", (k, n), "float32"), name=name), "c")
    return g


def clocks():
    return time.perf_counter(), time.process_time()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field of the chip")
    pairs = parser.parse_args().set
    if any("=" not in item for item in pairs):
        parser.error(f"--set {next(item for item in pairs if '=' not in item)!r}: expected KEY=VALUE")
    overrides = dict(item.split("=", 1) for item in pairs)

    derived, listed = layers(), scalesim_rows()
    if derived != listed:
        wrong = next((d, s) for d, s in zip(derived, listed) if d != s) if len(derived) == len(listed) else (len(derived), len(listed))
        raise SystemExit(f"the derived layers differ from SCALE-Sim's topology: {wrong}")
    chip = chips.load(CHIP, overrides)
    engine = next(name for name, e in chip.engines.items() if e.matrix is not None)

    print(f"{len(derived)} layers of SCALE-Sim's Resnet50.csv (equal to ResNet-50's, derived), {ARRAY[0]}x{ARRAY[1]} os array, "
          f"chip {CHIP.name}{''.join(f' {k}={v}' for k, v in overrides.items())}")
    header = f"{'layer':<8} {'M':>6} {'N':>5} {'K':>5} {'npusim':>10} {'SCALE-Sim':>10} {'equal':>5} {'lower s':>8} {'sim s':>6}"
    print(header)
    lower_s = lower_cpu = sim_s = sim_cpu = 0.0
    equal = 0
    npusim_total = scalesim_total = 0
    for row in derived:
        m, n, k = gemm(row)
        t0 = clocks()
        program = isa.lower(product(row[0], m, n, k), chip)
        t1 = clocks()
        result = sim.execute(program, chip, mode="timing")
        t2 = clocks()
        cycles, reference = result.stats.busy[engine], scalesim_cycles(m, n, k)
        same = cycles == reference + 1  # SCALE-Sim reports the last cycle's index, counted from 0
        equal += same
        npusim_total += cycles
        scalesim_total += reference
        lower_s, lower_cpu = lower_s + t1[0] - t0[0], lower_cpu + t1[1] - t0[1]
        sim_s, sim_cpu = sim_s + t2[0] - t1[0], sim_cpu + t2[1] - t1[1]
        print(f"{row[0]:<8} {m:>6} {n:>5} {k:>5} {cycles:>10,} {reference:>10,} {'yes' if same else 'NO':>5} "
              f"{t1[0] - t0[0]:>8.3f} {t2[0] - t1[0]:>6.3f}")
    total, cpu = lower_s + sim_s, lower_cpu + sim_cpu
    print(f"{'total':<8} {'':>6} {'':>5} {'':>5} {npusim_total:>10,} {scalesim_total:>10,} {equal:>2}/{len(derived)}")
    print(f"equal: npusim's matrix engine busy cycles = SCALE-Sim's cycles + 1 (its figure is the last cycle's index) on {equal} of "
          f"{len(derived)} layers")
    print(f"wall time: lowering {lower_s:.2f} s + simulation {sim_s:.2f} s = {total:.2f} s "
          f"(CPU {lower_cpu:.2f} + {sim_cpu:.2f} = {cpu:.2f} s)")
    goal = SCALESIM_SECONDS / TARGET
    print(f"against SCALE-Sim's {SCALESIM_SECONDS:.0f} s: end to end {SCALESIM_SECONDS / total:.0f}x faster in wall time, "
          f"{SCALESIM_SECONDS / cpu:.0f}x in CPU time; the simulation alone {SCALESIM_SECONDS / sim_cpu:.0f}x in CPU time")
    print(f"target: {TARGET}x, under {goal:.2f} s end to end: {'met' if cpu < goal else 'not met'} in CPU time, "
          f"{'met' if total < goal else 'not met'} in wall time")


if __name__ == "__main__":
    main()
