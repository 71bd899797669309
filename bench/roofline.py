"""Each shipped chip against its roofline: matrix products and convolutions from memory-bound to
compute-bound, simulated in timing mode, next to min(peak, DDR bandwidth x intensity).

    python bench/roofline.py                              # every shipped chip; plot in out/roofline/
    python bench/roofline.py --chip bm1684 --chip tpu_v1 --out /tmp/roof
    python bench/roofline.py --chip generic --set memories.ddr.bandwidth=32GB/s --set policy.pipeline_steps=8

For each chip and each matrix dtype it has a published peak for (int8, float16, float32 where its
matrix unit runs them), three families of shapes:
  batch   x (M x D) @ w (D x D), M = 1, 4, 16, ... : the weights stream from DDR once per row
          block, so the intensity grows with M, from a matrix-vector product (M = 1) up;
  square  M = N = K: the large square products;
  conv    3x3 convolutions of an S x S image (unpadded), C input and C output channels; S is the
          smallest of CONV_SIDES at which the largest convolution's own intensity is PAST_RIDGE
          times the chip's ridge, or the largest (conv_side): compute-bound by a margin that
          leaves its one-time costs (the first input block in, the last output tile out) a small
          part of its run.
D is the smallest power of two (at least 1024) whose D x D weights are 8 times the memories the
matrix units work in (every core's), so they stream through in many steps and the one step
nothing overlaps (the first load, the last product) is a small part of the run.

Per point: intensity = the matrix unit's ops (2 per multiply-accumulate, counted by the machine)
per DDR byte the run moved (Result.stats); roof = min(peak, bandwidth x intensity); sim = ops per
simulated second; ratio = sim / roof. Why a point misses its roof shows in measured fractions of
the run: ddr = DDR bytes / (bandwidth x time), mxu = the matrix engines' busy time (their mean),
eff = their ops / (peak x busy time) (below 1: partly filled folds, per-fold fill and drain,
issue latency), and the busiest engine. At a compute-bound end that is a matrix product the
fastest of a few tilings (policy.max_tile) is printed too: what the lowering's tile choice costs.
The knee is where the measured points' two asymptotes meet: the highest measured
throughput divided by the effective bandwidth of the lowest-intensity point; it sits at the
ridge (peak / bandwidth) exactly when both ends are equally close to their roofs.

A chip whose op table has no matrix_mul or conv row for a dtype its matrix unit runs (ascend310b:
the ATB seeds give only gather and fill) gets the row as an override, said in the output: the
bench measures the hardware model, the op table is the software stack's. Why a chip misses its
roof is in docs/roofline.md.
"""

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import chips
import isa
import sim
from sim.peaks import peak_ops
from sim.run import configure
from traces.plots.figure import LABEL_SIZE, SMALL_SIZE, TITLE_SIZE, new_figure, save
from traces.text import table

DTYPES = ("int8", "float16", "float32")  # the dtypes vendors publish matrix peaks for
BATCHES = (1, 4, 16, 64, 256, 1024, 4096)
CONV_CHANNELS = (16, 64, 256, 1024)
CONV_SIDES = (34, 66, 130, 258)  # unpadded (an AI core's cube reads L0A, where no padding is filled): outputs of 32 x 32
#                                 and up, 1,024 rows and up, a whole number of every matrix unit's row blocks (16 to 256),
#                                 so the conv points measure the chip, not fold waste
PAST_RIDGE = 3.5  # at 3.2 x the ridge (BM1684X's 34 x 34) a 1,024-channel convolution's start and end are still 3%
#                   of its run, 1% at 8.4 x (66 x 66). The TPU v1's tends to 3.4 x (9 x 1,024 ops per byte of input
#                   and output) however large the image: it takes the largest side, 258 (3.2 x; 2.6 x at 130 x 130,
#                   where its start and end across PCIe are 3% of the run, 1% at 258)
MEMORY_END, COMPUTE_END = "memory-bound end", "compute-bound end"
TARGET = 0.05  # the issue's: within 5% of the roof at both ends
TILE_LIMITS = (256, 512, 1024, 2048)  # policy.max_tile candidates for a product's M ("n") and N ("c")


def roof(peak, bandwidth, intensity):
    """The roofline: attainable ops per second at an intensity (ops per DDR byte)."""
    return min(peak, bandwidth * intensity)


@dataclass(frozen=True)
class Point:
    family: str  # "batch", "square" or "conv"
    shape: str  # e.g. "64x8192x8192" (M x K x N) or "c=256" (conv channels)
    ops: int  # the matrix unit's arithmetic (2 per multiply-accumulate), from the trace
    ddr_bytes: int  # read and written, from Result.stats
    seconds: float  # simulated
    mxu_seconds: float  # the matrix engines' busy time, their mean on a chip of several
    peak: float  # ops per second of the matrix unit in this dtype
    bandwidth: float  # DDR bytes per second
    busiest: tuple  # (engine, busy fraction of the run) of the busiest engine
    least_bytes: int = 0  # the graph's inputs, constants and outputs, each once: what the shape itself must move

    @property
    def shape_intensity(self):
        """ops over least_bytes: the shape's own intensity, which no lowering changes (the
        measured `intensity` also counts what the lowering's tiles re-read)."""
        return self.ops / (self.least_bytes or self.ddr_bytes)

    @property
    def intensity(self):
        return self.ops / self.ddr_bytes

    @property
    def roof(self):
        return roof(self.peak, self.bandwidth, self.intensity)

    @property
    def achieved(self):
        return self.ops / self.seconds

    @property
    def ratio(self):
        return self.achieved / self.roof

    @property
    def memory_bound(self):
        return self.bandwidth * self.intensity < self.peak

    @property
    def ddr_use(self):
        return self.ddr_bytes / (self.bandwidth * self.seconds)

    @property
    def mxu_busy(self):
        return self.mxu_seconds / self.seconds

    @property
    def mxu_efficiency(self):
        return self.ops / (self.peak * self.mxu_seconds)


def measure(family, shape, graph, chip, dtype, policy=None):
    """Simulate `graph` in timing mode and read its Point off the result."""
    res = sim.run(graph, chip, mode="timing", policy=policy)
    matrix = [e for e in res.trace.events if e.kind == "matrix"]
    units = len(chip.engines_of("matrix"))
    use = res.stats.utilization
    return Point(
        family, shape,
        ops=sum(e.ops for e in matrix),
        ddr_bytes=res.stats.ddr_read_bytes + res.stats.ddr_write_bytes,
        seconds=res.seconds,
        mxu_seconds=chip.seconds(sum(e.end - e.start for e in matrix) / units),
        peak=peak(chip, dtype),
        bandwidth=bandwidth(chip),
        busiest=max(use.items(), key=lambda item: item[1]),
        least_bytes=least_bytes(graph),
    )


def least_bytes(graph):
    """The graph's inputs, constants and outputs, each once."""
    return sum(graph.tensors[t].nbytes for t in [*graph.inputs, *graph.constants, *graph.outputs.values()])


def peak(chip, dtype):
    """The matrix units' ops per second in `dtype`, over every matrix engine (sim/peaks.py)."""
    return peak_ops(chip)["matrix"][dtype] * chip.clock_hz


def bandwidth(chip):
    return chip.memories["ddr"].bandwidth * chip.clock_hz


def knee(points):
    """Intensity where the measured asymptotes meet: the highest throughput measured over the
    effective bandwidth (achieved / intensity) of the lowest-intensity point."""
    low = min(points, key=lambda p: p.intensity)
    return max(p.achieved for p in points) / (low.achieved / low.intensity)


def ends(points):
    """{MEMORY_END: the point of the lowest shape intensity, COMPUTE_END: of the highest}. The
    shapes rank the ends, not the measured intensities, so that a lowering that re-reads more on
    a small shape cannot make it the sweep's compute-bound end."""
    return {MEMORY_END: min(points, key=lambda p: p.shape_intensity), COMPUTE_END: max(points, key=lambda p: p.shape_intensity)}


# ---- the shapes -----------------------------------------------------------------------------

def side(chip, dtype):
    """D: the smallest power of two >= 1024 whose D x D weights are 8 x the memories the matrix
    units read and write (every core's)."""
    local = sum(chip.memories[m].capacity for m in {e.operand_memory(r) for e in chip.engines_of("matrix") for r in "abc"})
    d = 1024
    while d * d * isa.dtypes.itemsize(dtype) < 8 * local:
        d *= 2
    return d


def _weights(g, shape, dtype, constant):
    """The weights: an input, or a constant (its values do not matter in timing mode)."""
    return g.constant("w", np.zeros(shape, isa.dtypes.np_dtype(dtype))) if constant else g.input("w", shape, dtype)


def matmul_graph(m, k, n, dtype, constant_weights=False):
    g = isa.Graph(f"matmul_{m}x{k}x{n}")
    x = g.input("x", (m, k), dtype)
    w = _weights(g, (k, n), dtype, constant_weights)
    g.output(isa.ops.matrix_mul(x, w), "y")
    return g


def conv_graph(channels, dtype, constant_weights=False, side=CONV_SIDES[0]):
    g = isa.Graph(f"conv3x3_c{channels}")
    x = g.input("x", (1, channels, side, side), dtype)
    w = _weights(g, (channels, channels, 3, 3), dtype, constant_weights)
    quant = {"scale": 1 / 64} if dtype == "int8" else {}  # LowPrecisionSymmetric: an int8 result
    g.output(isa.ops.conv(x, w, **quant), "y")
    return g


def shapes(chip, dtype):
    """(family, shape label, graph) of the sweep, from memory-bound to compute-bound. On a chip
    whose graph data lives in a host's memory (the TPU v1), the weights are constants, in its own
    DDR (the weight memory), and the activations cross the host link."""
    d = side(chip, dtype)
    const = chip.data_memory != "ddr"
    found = [("batch", f"{m}x{d}x{d}", matmul_graph(m, d, d, dtype, const)) for m in BATCHES if m < d]
    found += [("square", f"{s}x{s}x{s}", matmul_graph(s, s, s, dtype, const)) for s in (d // 4, d // 2)]
    s = conv_side(chip, dtype)
    found += [("conv", f"c={c}" + (f" {s}x{s}" if s != CONV_SIDES[0] else ""), conv_graph(c, dtype, const, s)) for c in CONV_CHANNELS]
    return found


def conv_side(chip, dtype):
    """The image side of the conv points: the first of CONV_SIDES at which the largest
    convolution's shape intensity (its ops over its input, weights and output, each once) is
    PAST_RIDGE times the ridge, or the last."""
    ridge = peak(chip, dtype) / bandwidth(chip)
    c = max(CONV_CHANNELS)
    for s in CONV_SIDES:
        g = conv_graph(c, dtype, side=s)
        ops = 2 * 9 * c * math.prod(g.tensors[g.outputs["y"]].shape)  # a multiply-accumulate per output, kernel position and input channel
        if ops / least_bytes(g) >= PAST_RIDGE * ridge:
            break
    return s


# ---- chips ----------------------------------------------------------------------------------

def dtypes_of(chip):
    """The DTYPES its matrix unit runs."""
    unit_dtypes = {d for e in chip.engines_of("matrix") for d in e.matrix.block_cycles}
    return [d for d in DTYPES if d in unit_dtypes]


def missing_rows(chip, dtype):
    """Op-table rows the sweep needs and `chip` lacks, as overrides {"ops.conv": {...}}."""
    missing = {}
    for op in ("matrix_mul", "conv"):
        row = chip.support(op)
        if row is None or (row.dtypes is not None and dtype not in row.dtypes):
            missing[f"ops.{op}"] = {"dtypes": sorted((row.dtypes or set()) | {dtype}) if row else [dtype]}
    return missing


@dataclass(frozen=True)
class Sweep:
    chip_config: object  # the chips.Chip the sweep ran on (overrides included)
    dtype: str
    peak: float
    bandwidth: float
    points: tuple
    added: tuple  # op rows the bench added
    tuned: tuple = None  # (Point, policy.max_tile) of the best tiling of a compute-bound product at the compute end

    @property
    def chip(self):
        return self.chip_config.name

    @property
    def ridge(self):
        return self.peak / self.bandwidth


def sweep(name, dtype, point=None):
    """The Sweep of one chip in one dtype; `point`: `--set` overrides (chip fields and policy.)."""
    point = dict(point or {})
    added = missing_rows(configure(name, point)[0], dtype)
    point.update(added)
    chip, policy = configure(name, point)
    cases = shapes(chip, dtype)
    points = tuple(measure(family, label, g, chip, dtype, policy) for family, label, g in cases)
    end = ends(points)[COMPUTE_END]
    tuned = None
    if end.family != "conv" and not end.memory_bound:
        tuned = best_tiling(name, dtype, point, next(g for _, label, g in cases if label == end.shape), end)
    return Sweep(chip, dtype, peak(chip, dtype), bandwidth(chip), points, tuple(added), tuned)


def best_tiling(name, dtype, point, graph, default):
    """(Point, policy.max_tile) of the fastest of the TILE_LIMITS tilings of a product, `default`
    (the lowering's own choice, "") among them: how much of a miss is the tile's."""
    found = [(default, "")]
    for rows in TILE_LIMITS:
        for cols in TILE_LIMITS:
            tile = f"n={rows},c={cols}"
            chip, policy = configure(name, {**point, "policy.max_tile": tile})
            found.append((measure(default.family, default.shape, graph, chip, dtype, policy), tile))
    return max(found, key=lambda found: found[0].achieved)


# ---- report ---------------------------------------------------------------------------------

def report(s):
    """Lines: the sweep's table, its ends against the target and its knee against its ridge."""
    lines = [f"{s.chip} {s.dtype}: peak {s.peak / 1e12:.2f} TOPS, DDR {s.bandwidth / 1e9:.1f} GB/s, ridge {s.ridge:,.0f} ops/byte"]
    if s.added:
        lines.append(f"  (the chip's op table has no {s.dtype} row for {', '.join(k[4:] for k in s.added)}: added for the bench)")
    rows = [["family", "shape", "ops/byte", "bound", "roof TOPS", "sim TOPS", "ratio", "ddr", "mxu", "eff", "busiest"]]
    for p in s.points:
        rows.append([p.family, p.shape, f"{p.intensity:,.1f}", "memory" if p.memory_bound else "compute", f"{p.roof / 1e12:.3f}",
                     f"{p.achieved / 1e12:.3f}", f"{p.ratio:.3f}", f"{p.ddr_use:.0%}", f"{p.mxu_busy:.0%}", f"{p.mxu_efficiency:.0%}",
                     f"{p.busiest[0]} {p.busiest[1]:.0%}"])
    lines += table(rows, left=(0, 1, 3, 10))
    matrix_engines = {e.name for e in s.chip_config.engines_of("matrix")}
    for what, p in ends(s.points).items():
        verdict = "within" if p.ratio >= 1 - TARGET else "MISSES"
        lines.append(f"  {what}: {p.family} {p.shape}, {p.ratio:.1%} of its roof ({'memory' if p.memory_bound else 'compute'}-bound), "
                     f"{verdict} the {TARGET:.0%} target")
        if p.memory_bound and p.busiest[0] in matrix_engines:
            lines.append("    the matrix engine, not DDR, is the busiest "
                         f"({p.busiest[1]:.0%}): at this shape it fills {p.mxu_efficiency:.0%} "
                         f"of the array, which then does less than DDR could feed")
    high = ends(s.points)[COMPUTE_END]
    if high.memory_bound:
        lines.append("    no point reaches the ridge: the lowering's tiles and "
                     f"reloads cap the intensity at {high.intensity:,.0f} ops/byte")
    if s.tuned and s.tuned[1]:
        best, tile = s.tuned
        lines.append(f"    the fastest of {len(TILE_LIMITS) ** 2} tilings, policy.max_tile={tile}: {best.intensity:,.0f} ops/byte, "
                     f"{best.achieved / 1e12:.3f} TOPS, {best.ratio:.1%} of its roof (eff {best.mxu_efficiency:.0%}): "
                     f"the lowering's own tile choice costs the difference")
    elif s.tuned:
        lines.append(f"    no tiling of {len(TILE_LIMITS) ** 2} tried does better than the lowering's own")
    at = knee(s.points)
    lines.append(f"  knee at {at:,.0f} ops/byte, {at / s.ridge:.2f} x the ridge ({s.ridge:,.0f})")
    if s.tuned and s.tuned[1]:
        at = knee(s.points + (s.tuned[0],))
        lines.append(f"    with the best tiling at the compute-bound end: {at:,.0f} ops/byte, {at / s.ridge:.2f} x the ridge")
    return lines


_COLOURS = {"int8": "#4c72b0", "float16": "#55a868", "float32": "#dd8452"}
_MARKERS = {"batch": "o", "square": "s", "conv": "^"}


def plot(sweeps, path):
    """One log-log panel per chip: each dtype's roof and its simulated points."""
    by_chip = {}
    for s in sweeps:
        by_chip.setdefault(s.chip, []).append(s)
    cols = min(3, len(by_chip))
    rows = math.ceil(len(by_chip) / cols)
    fig = new_figure(4.2 * rows)
    for i, (chip, mine) in enumerate(by_chip.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = [p.intensity for s in mine for p in s.points] + [s.ridge for s in mine]
        x = np.geomspace(min(xs) / 3, max(xs) * 3, 200)
        for s in mine:
            colour = _COLOURS[s.dtype]
            ax.plot(x, np.minimum(s.peak, s.bandwidth * x) / 1e12, color=colour, linewidth=1.5,
                    label=f"{s.dtype} roof (ridge {s.ridge:,.0f})")
            for family, marker in _MARKERS.items():
                pts = [p for p in s.points if p.family == family]
                ax.scatter([p.intensity for p in pts], [p.achieved / 1e12 for p in pts], color=colour, marker=marker,
                           s=22, zorder=3, edgecolor="white", linewidth=0.5)
            if s.tuned and s.tuned[1]:
                best = s.tuned[0]
                ax.scatter([best.intensity], [best.achieved / 1e12], color=colour, marker="*", s=70, zorder=4, edgecolor="black",
                           linewidth=0.4)
        for family, marker in {**_MARKERS, "best tiling": "*"}.items():
            ax.scatter([], [], color="0.4", marker=marker, s=22, label=family)
        ax.set_title(chip, fontsize=TITLE_SIZE)
        ax.set_xlabel("ops per DDR byte", fontsize=LABEL_SIZE)
        ax.set_ylabel("TOPS", fontsize=LABEL_SIZE)
        ax.tick_params(labelsize=SMALL_SIZE)
        ax.grid(which="both", color="0.93", linewidth=0.5)
        ax.set_axisbelow(True)
        ax.legend(loc="lower right", fontsize=SMALL_SIZE - 1, framealpha=0.9)
    fig.tight_layout()
    save(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chip", action="append", help="a shipped chip or a chip YAML (repeat; default: every shipped chip)")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="only these dtypes (repeat)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a chip field or policy.KEY for every run")
    p.add_argument("--out", default="out/roofline", help="folder for roofline.png (default: out/roofline)")
    args = p.parse_args(argv)
    point = dict(item.split("=", 1) for item in args.set)
    sweeps = []
    for name in args.chip or chips.available():
        for dtype in dtypes_of(chips.load(name)):
            if args.dtype and dtype not in args.dtype:
                continue
            s = sweep(name, dtype, point)
            print("\n".join(report(s)), end="\n\n", flush=True)
            sweeps.append(s)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / "roofline.png"
    plot(sweeps, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
