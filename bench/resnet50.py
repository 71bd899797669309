"""ResNet-50 (224 x 224, batch 1 by default) on a shipped chip: simulated time, per-layer
cycles and the wall time of the simulation in both modes.

The network is built from the seed's ops with seeded random weights: conv (+ bias) and relu,
a 3x3/2 max pool, bottleneck blocks whose shortcut is an add, a global average pool, a reshape
of the pooled features (a view: no instruction) and the fully connected classifier (matrix_mul
with a bias). float32 and float16 use weights, biases and image of that dtype. In int8 every
convolution and the classifier are LowPrecisionSymmetric with a scale of 1/2^m (exact on
BM1684, the seed says) and an int16 bias.

    python bench/resnet50.py                       # bm1684, float32 and int8
    python bench/resnet50.py --chip bm1686 --dtype float16 --batch 4 --top 15
"""

import argparse
import time

import numpy as np

import chips
import isa
import sim

O = isa.ops
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)


class Builder:
    """Adds conv / relu / add layers to a graph with seeded random weights, float32, float16 or
    int8."""

    def __init__(self, dtype, seed=0):
        self.g = isa.Graph(f"resnet50_{dtype}")
        self.dtype, self.int8 = dtype, dtype == "int8"
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def weight(self, shape, fan_in):
        self.count += 1
        if self.int8:
            return self.g.constant(f"w{self.count}", self.rng.integers(-8, 8, shape, endpoint=True).astype(np.int8))
        return self.g.constant(f"w{self.count}", (self.rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(self.dtype))

    def bias(self, shape):
        if self.int8:
            return self.g.constant(f"b{self.count}", self.rng.integers(-64, 64, shape).astype(np.int16))
        return self.g.constant(f"b{self.count}", (self.rng.standard_normal(shape) * 0.01).astype(self.dtype))

    @property
    def quant(self):
        return {"scale": 1 / 64} if self.int8 else {}

    def conv(self, x, oc, k, stride=1, relu=True, name=None):
        ic = x.shape[1]
        pad = k // 2
        y = O.conv(x, self.weight((oc, ic, k, k), ic * k * k), self.bias((1, oc, 1, 1)), pad_h_t=pad, pad_h_b=pad, pad_w_l=pad,
                   pad_w_r=pad, stride_h=stride, stride_w=stride, name=name, **self.quant)
        return O.active(y, "relu") if relu else y

    def classifier(self, x, classes, name):
        features = O.reshape(x, [x.shape[0], -1], name=f"{name}_flatten")
        k = features.shape[1]
        return O.matrix_mul(features, self.weight((k, classes), k), self.bias((1, classes)), name=name, **self.quant)

    def bottleneck(self, x, width, stride, name):
        out = width * 4
        y = self.conv(x, width, 1, name=f"{name}_a")
        y = self.conv(y, width, 3, stride, name=f"{name}_b")
        y = self.conv(y, out, 1, relu=False, name=f"{name}_c")
        shortcut = x if x.shape[1] == out and stride == 1 else self.conv(x, out, 1, stride, relu=False, name=f"{name}_proj")
        return O.active(O.add(y, shortcut), "relu")


    def stage(self, x, s, blocks=None):
        """Stage s (2 to 5, "res{s}") on x: its first `blocks` bottleneck blocks (all by default)."""
        width, count, stride = STAGES[s - 2]
        for i in range(count if blocks is None else blocks):
            x = self.bottleneck(x, width, stride if i == 0 else 1, f"res{s}{chr(97 + i)}")
        return x


def resnet50(dtype, size=224, batch=1):
    """The graph: input "image" (batch, 3, size, size) of dtype, output "logits" (batch, 1000)."""
    b = Builder(dtype)
    x = b.g.input("image", (batch, 3, size, size), dtype)
    y = b.conv(x, 64, 7, 2, name="conv1")
    y = O.pool(y, 2, 2, 3, 3, pad_h=1, pad_w=1, name="pool1")
    for s in range(2, 2 + len(STAGES)):
        y = b.stage(y, s)
    y = O.pool(y, pooling_type="AVE", is_global_pooling=True, name="pool5")
    b.g.output(b.classifier(y, 1000, "fc"), "logits")
    return b.g


def resnet50_stage(dtype, s, blocks=None, size=224, batch=1):
    """Stage s of resnet50(dtype, size, batch) alone: input "x" the stage's input, output "y"."""
    b = Builder(dtype)
    side = size // 4 // 2 ** max(s - 3, 0)  # pool1 leaves size / 4; stages 3 to 5 halve it on entry
    channels = 64 if s == 2 else STAGES[s - 3][0] * 4
    x = b.g.input("x", (batch, channels, side, side), dtype)
    b.g.output(b.stage(x, s, blocks), "y")
    return b.g


def image(dtype, size=224, batch=1, seed=1):
    """A seeded random input for resnet50(dtype, size, batch): integers in [-64, 64) for int8,
    standard normal values otherwise."""
    rng = np.random.default_rng(seed)
    shape = (batch, 3, size, size)
    return (rng.integers(-64, 64, shape) if dtype == "int8" else rng.standard_normal(shape)).astype(dtype)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", default="bm1684")
    parser.add_argument("--dtype", choices=("float32", "float16", "int8", "both"), default="both", help="both: float32 and int8")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=10, help="layers to list, slowest first")
    parser.add_argument("--size", type=int, default=224, help="input height and width")
    args = parser.parse_args()
    chip = chips.load(args.chip)
    for dtype in ("float32", "int8") if args.dtype == "both" else (args.dtype,):
        graph = resnet50(dtype, args.size, args.batch)
        lower_s, program = timed(lambda: isa.lower(graph, chip))  # noqa: B023 - called within this iteration
        timing_s, res = timed(lambda: sim.execute(program, chip, mode="timing"))  # noqa: B023 - called within this iteration
        functional_s, fres = timed(lambda: sim.execute(program, chip, {"image": image(dtype, args.size, args.batch)}))  # noqa: B023
        assert fres.cycles == res.cycles
        print(f"ResNet-50 {dtype} batch {args.batch} on {chip.name}: {res.seconds * 1e3:.3f} ms simulated "
              f"({res.seconds * 1e3 / args.batch:.3f} ms per image, {res.cycles:,} cycles), {len(program):,} instructions")
        print(f"  wall: lowering {lower_s:.2f} s, timing mode {timing_s:.2f} s, functional mode {functional_s:.2f} s")
        busy = ", ".join(f"{e} {u:.0%}" for e, u in res.stats.utilization.items())
        print(f"  engines busy: {busy}; DDR read {res.stats.ddr_read_bytes / 2**20:.1f} "
              f"MiB, written {res.stats.ddr_write_bytes / 2**20:.1f} MiB")
        print(f"  slowest layers (of {len(res.stats.ops)}):")
        for op in res.stats.slowest(args.top):
            print(f"    {op.name:<16} {op.cycles:>12,.0f} cycles  {op.cycles / res.cycles:6.1%}")


if __name__ == "__main__":
    main()
