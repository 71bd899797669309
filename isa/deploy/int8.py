"""INT8 deployment: symmetric scales (zero point 0) from a calibration Table, as TPU-MLIR's
`model_deploy --quantize INT8 --calibration_table` deploys a model on the Sophgo chips.

A float32 tensor x stands as int8 q = round(x / s), s = threshold / 127. Each node goes the
first way that the op and the chip's op table take:

- conv, deconv, conv3d and matrix_mul of a constant weight: int8 x int8 accumulated exactly, finished
  by the seed's quantized modes (isa/ops/quantized.py) into int8. Requantization scale
  S = s_x * s_w / s_y, s_x the scale the input has: an int8 input is read as it is (a residual
  add's result, at a power of two times an operand's scale, needs no requantization before the
  next block's products, which would be an op outside their layer groups). When S <= 1 the
  weight's scale is widened so that S is a power of two (2^-r: the weight keeps 64 to 127
  levels), and the op runs in LowPrecisionSymmetric with an
  int16 bias, its finish one rounding shift, as BM1684's int8 convolutions shift (TPU-MLIR
  gives BM1684 a right shift without multiplier); a bias beyond int16, or S > 1, takes
  HighPrecisionSymmetric with an int32 bias. The output's threshold is that of the ReLU after it
  when a ReLU is its only reader (the negative half would be cut anyway).
  Per channel (conv and matrix_mul, where the chip requantizes per channel, the seed's
  requant_int32 mode 2, and has mul_shift of int16 by int8): the weight's scale is one per output
  channel, as TPU-MLIR's for BM1684X. BM1684, without a per-channel requantization, keeps one
  scale per op: TPU-MLIR lowers its int8 convolutions with one right shift for the whole filter
  (OnlyShift, multiplier 1, an int16 bias: lib/Conversion/TopToTpu/BM1684/Conv.cpp @ ca0304ab),
  its depthwise ones included. The seed's modes take one scale per op, so the
  product runs in HighPrecisionSymmetric with a scale of 2^-r into int16 (a bias at each channel's
  scale s_x * s_w[c], int16 where it fits), and a `mul_shift` by a per-channel int8 multiplier m[c] and one
  shift R, on the vector unit in the product's layer group, makes the int8 result:
  y = (t * m[c]) >> R. Each channel's weight scale is widened so that m[c] / 2^R is its exact
  requantization (m[c] is rounded up: the weight loses at most 1/m[c] of its 127 levels); r is the
  least that keeps every channel's int16 t within range, so t holds about 8 more bits than y.
- conv3d (groups 1) where the chip's conv3d takes no int8 but it has the integer family: conv3d_v2
  into int32, then requant_int32 by per-channel multipliers and shifts into int8 (BM1684X's way);
- ops that keep the scale (relu, leaky relu, pooling, mean and max reductions, reshapes,
  permutes, slices, split, nearest upsampling, concat): in int8, the output taking the input's
  scale (concat's inputs requantized to the largest of their scales by `muls_shift`);
- a chain of element-wise ops that is a function of one int8 tensor (SiLU's x * sigmoid(x),
  Mish, a sigmoid, a scaling): one `lut` of 256 entries, computed when the graph is built from
  the ops' definitions, as TPU-MLIR lowers int8 activations to lookup tables;
- add and sub of two int8 tensors: (a * m_a + b * m_b) >> r with `muls_shift` into int16 and
  `add_shift` (`sub_shift`) into int8; mul: `mul_shift` into int16, `muls_shift` into int8;
- anything else runs in float32 on dequantized operands (cast to float32, times s) and its
  result is quantized again (times 1 / s, cast to int8) where an int8 reader needs it.

The graph's inputs and outputs stay float32, quantized and dequantized at the edges.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes, ops
from ..graph import Graph
from ..ops import REGISTRY
from ..ops.elementwise import Elementwise
from .rebuild import Rebuild

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from chips.schema import Chip

    from ..graph import Node, Tensor
    from .calibration import Table

# find_chains: a chain's result -> (its root tensor, its nodes in graph order)
Chains = dict[str, "tuple[str, list[Node]]"]

F32, I8, I16, I32 = "float32", "int8", "int16", "int32"
QMAX = 127
SHIFTED_BITS = 8  # an int8 times 2^8 still fits int16
I16_MAX = 32767
SPREAD = 8  # a channel's weight scale is at least 1/SPREAD of the largest (its multiplier then keeps >= 3 bits)
KEEP_SCALE = {"pool", "reshape", "reshape_v2", "permute", "extract", "split", "upsample", "squeeze", "expand_dims", "copy", "tile",
              "broadcast", "concat"}
KEEP_SCALE_KEYS = {"active.relu", "active_param.leaky_relu"}
KEEP_SCALE_REDUCTIONS = {"REDUCE_MEAN", "REDUCE_MAX", "REDUCE_MIN"}
PRODUCTS = {"conv", "deconv", "conv3d", "matrix_mul"}
I32_MAX = 2**31 - 1
NOT_IN_TABLES = {"cast", "copy", "lut", "requant_fp32_to_int", "requant_int32", "dequant_int_to_fp32"}


def rewrite(source: Graph, target: Graph, chip: Chip, table: Table) -> Graph:
    return Int8(source, target, chip, table).run()


class Int8:
    def __init__(self, source: Graph, target: Graph, chip: Chip, table: Table) -> None:
        self.src, self.rb, self.table = source, Rebuild(source, target, chip), table
        self.scale: dict[str, float] = {}  # target int8 tensor name -> its scale
        self.floats: dict[str, Tensor] = {}  # source tensor name -> target float32 tensor (dequantized)
        self.ints: dict[tuple[str, float], Tensor] = {}  # (source tensor name, scale) -> target int8 tensor
        self.done = Counter[str]()  # how each node went
        self.in_float = Counter[str]()  # support keys of the nodes left in float32
        lut = self.rb.supported("lut", {}, [I8, I8], I8)
        self.heads: Chains
        self.members: set[str]
        self.heads, self.members = find_chains(source) if lut else ({}, set())

    # ---- scales and representations -------------------------------------------------------

    def threshold(self, name: str) -> float:
        """A source tensor's threshold, or that of its lone reader when that reader keeps the scale
        and the tensor is not a graph output: a ReLU's (the negative half would be cut anyway) or
        a concat's (its inputs then need no requantization)."""
        readers = self.src.consumers(name)
        if len(readers) == 1 and name not in self.src.outputs.values():
            r = readers[0]
            if (r.op == "active" and r.params["active_type"] == "relu") or r.op == "concat":
                return self.threshold(r.outputs[0])
        return self.table.threshold(name)

    def out_scale(self, name: str) -> float:
        """The scale a node making source tensor `name` gives its int8 result: threshold / 127,
        widened to 2^j times the other operand's scale when its lone reader is an add or sub whose
        other operand is int8 already, so that the add needs no requantization of that operand
        (which would be an op outside the producer's layer group)."""
        scale = self.threshold(name) / QMAX
        readers = self.src.consumers(name)
        if len(readers) != 1 or name in self.src.outputs.values() or readers[0].op not in ("add", "sub"):
            return scale
        others = [n for n in readers[0].inputs if n != name]
        if len(others) != 1 or others[0] not in self.rb.map or self.rb.map[others[0]].dtype != I8:
            return scale
        other = self.scale[self.rb.map[others[0]].name]
        j = max(0, math.ceil(math.log2(scale / other) - 1e-9))
        return other * 2.0**j if j <= SHIFTED_BITS else scale

    def float_of(self, name: str) -> Tensor:
        """The target float32 tensor standing for source tensor `name`."""
        t = self.rb.tensor(name)
        if t.dtype != I8 or self.src.tensors[name].dtype != F32:
            return t
        if name not in self.floats:
            wide = self.rb.as_dtype(t, F32)
            self.floats[name] = ops.muls(wide, self.scale[t.name], name=self.rb.fresh(f"{name}/dequant"))
        return self.floats[name]

    def int8_of(self, name: str, scale: float | None = None) -> Tensor:
        """The target int8 tensor standing for source tensor `name`, at `scale` (its own when None)."""
        if self.rb.is_constant(name):
            array = np.asarray(self.src.constants[name], np.float32)
            scale = scale or max(float(np.abs(array).max()), 1e-12) / QMAX
            key = (name, scale)
            if key not in self.ints:
                t = self.rb.constant(name, np.clip(np.rint(array / scale), -QMAX, QMAX), I8)
                self.scale[t.name] = scale
                self.ints[key] = t
            return self.ints[key]
        t = self.rb.tensor(name)
        if t.dtype == I8 and (scale is None or math.isclose(scale, self.scale[t.name], rel_tol=1e-6)):
            return t
        scale = scale or self.threshold(name) / QMAX
        key = (name, scale)
        if key not in self.ints:
            if t.dtype == I8:
                q = self.requant(t, scale, name)
            else:
                scaled = ops.muls(t, 1.0 / scale, name=self.rb.fresh(f"{name}/quant"))
                q = self.rb.as_dtype(scaled, I8)
            self.scale[q.name] = scale
            self.ints[key] = q
        return self.ints[key]

    def requant(self, t: Tensor, scale: float, name: str) -> Tensor:
        """int8 t at another scale: muls_shift by m / 2^r ~ s_t / scale, or through float32."""
        ratio = self.scale[t.name] / scale
        m, r = multiplier(ratio, QMAX)
        if m is not None and self.rb.supported("muls_shift", {}, [I8], I8):
            return ops.muls_shift(t, m, r, out_dtype=I8, name=self.rb.fresh(f"{name}/requant"))
        wide = ops.muls(self.rb.as_dtype(t, F32), ratio, name=self.rb.fresh(f"{name}/requant"))
        return self.rb.as_dtype(wide, I8)

    def is_float(self, name: str) -> bool:
        return self.src.tensors[name].dtype == F32

    # ---- the walk ------------------------------------------------------------------------------

    def run(self) -> Graph:
        for node in self.src.nodes:
            if not any(self.is_float(n) for n in node.inputs + node.outputs):
                self.rb.copy(node)
                self.done["untouched"] += 1
            elif node.outputs[0] in self.members:
                self.done["in a lookup table"] += 1  # computed by its chain's lut, if anything reads it
            elif not (self.product(node) or self.product_int32(node) or self.lookup(node) or self.keep_scale(node)
                      or self.arith(node)):
                self.in_float32(node)
        self.rb.finish(self.float_of)
        chip, g = self.rb.chip, self.rb.g
        ways = ", ".join(f"{n} {what}" for what, n in self.done.items())
        listed = ", ".join(f"{k} x{n}" for k, n in sorted(self.in_float.items(), key=lambda kv: (-kv[1], kv[0])))
        g.notes.append(f"quantize int8 on {chip.name}: {ways}; {self.rb.casts} cast(s) added"
                       + (f"; in float32: {listed}" if listed else ""))
        return g

    def in_float32(self, node: Node) -> None:
        self.rb.copy(node, operands=[self.float_of(n) if self.is_float(n) else self.rb.tensor(n) for n in node.inputs])
        self.in_float[REGISTRY[node.op].support_key(node.params)] += 1
        self.done["in float32"] += 1

    def product(self, node: Node) -> bool:
        """conv, deconv, matrix_mul of a constant weight (and bias) in int8."""
        if node.op not in PRODUCTS or len(node.inputs) < 2:
            return False
        x, w, *bias = node.inputs
        if self.rb.is_constant(x) or not self.rb.is_constant(w) or (bias and not self.rb.is_constant(bias[0])):
            return False
        if not self.is_float(x) or node.params.get("mode") != "LowPrecisionSymmetric":
            return False
        weight = np.asarray(self.src.constants[w], np.float32)
        b = np.asarray(self.src.constants[bias[0]], np.float32) if bias else None
        s_x, s_y = self.scale_of(x), self.out_scale(node.outputs[0])  # x as it is: the requantization absorbs its scale
        if self.per_channel(node, weight, b, s_x, s_y):
            return True
        s_w = max(float(np.abs(weight).max()), 1e-12) / QMAX
        scale = s_x * s_w / s_y
        mode, bias_dtype = "HighPrecisionSymmetric", I32
        if scale <= 1:
            r = math.floor(math.log2(1 / scale))
            scale = 2.0**-r
            s_w = scale * s_y / s_x
            if b is None or np.abs(np.rint(b / (s_x * s_w))).max() <= dtypes.int_range(I16)[1]:
                mode, bias_dtype = "LowPrecisionSymmetric", I16
        if node.op == "deconv" and mode != "LowPrecisionSymmetric":
            return False
        params = dict(node.params, scale=scale, mode=mode, out_dtype=I8)
        if self.rb.fits(node, [I8, I8] + ([bias_dtype] if bias else []), params) != [I8]:
            return False
        operands = [self.int8_of(x, s_x), self.rb.constant(w, np.clip(np.rint(weight / s_w), -QMAX, QMAX), I8)]
        if b is not None:  # the bias's values
            operands.append(self.rb.constant(bias[0], np.rint(b / (s_x * s_w)), bias_dtype))
        (y,) = self.rb.copy(node, params, operands)
        self.scale[y.name] = s_y
        self.done[f"{node.op} in int8"] += 1
        return True

    def per_channel(self, node: Node, weight: NDArray[Any], b: NDArray[Any] | None, s_x: float, s_y: float) -> bool:
        """conv or matrix_mul with one weight scale per output channel: the product into int16 at
        2^-r, then mul_shift by the channels' multipliers (see the module's docstring)."""
        if node.op not in ("conv", "matrix_mul") or not (self.rb.supported("mul_shift", {}, [I16, I8], I8)
                                                          and self.rb.supported("requant_int32", {"mode": 2}, [I32], I8)):
            return False
        axis = 0 if node.op == "conv" else weight.ndim - 1  # the weight's output-channel axis
        others = tuple(k for k in range(weight.ndim) if k != axis)
        top = np.abs(weight).max(axis=others).astype(np.float64)
        s_w = np.maximum(np.maximum(top, top.max() / SPREAD), 1e-12) / QMAX
        ratio = s_x * s_w / s_y  # each channel's accumulator scale over the output's
        r = max(0, math.ceil(math.log2(QMAX / (I16_MAX * ratio.min())) - 1e-9))
        ratio = ratio * 2.0**r  # t's scale over y's: |t| <= 127 / ratio <= 32767
        if ratio.max() > QMAX:
            return False
        shift = min(31, math.floor(math.log2(QMAX / ratio.max())))
        m = np.minimum(QMAX, np.ceil(ratio * 2.0**shift - 1e-9))
        s_w = m / 2.0**shift * s_y / (s_x * 2.0**r)  # widened: m / 2^shift is each channel's exact requantization
        keep = [1] * weight.ndim
        keep[axis] = -1
        channels = (1, -1, 1, 1) if node.op == "conv" else (1, -1)
        b_q = None if b is None else np.rint(b.reshape(channels) / (s_x * s_w.reshape(channels)))
        # an int16 bias is added to the accumulator before the shift (one vector step fewer than int32's)
        bias_dtype = I16 if b_q is not None and np.abs(b_q).max() <= dtypes.int_range(I16)[1] else I32
        params = dict(node.params, scale=2.0**-r, mode="HighPrecisionSymmetric", out_dtype=I16)
        if self.rb.fits(node, [I8, I8] + ([bias_dtype] if b is not None else []), params) != [I16]:
            return False
        x, w, *bias = node.inputs
        operands = [self.int8_of(x, s_x), self.rb.constant(w, np.clip(np.rint(weight / s_w.reshape(keep)), -QMAX, QMAX), I8)]
        if b_q is not None:  # the bias's, quantized
            operands.append(self.rb.constant(bias[0], b_q, bias_dtype))
        (t,) = self.rb.emit(node, operands, params, name=self.rb.fresh(f"{node.name}/int16"))
        factors = self.rb.constant(f"{node.name}/multipliers", m.reshape(channels), I8)
        y = ops.mul_shift(t, factors, shift, out_dtype=I8, name=node.name)
        self.rb.map[node.outputs[0]] = y
        self.scale[y.name] = s_y
        self.done[f"{node.op} in int8 per channel"] += 1
        return True

    def product_int32(self, node: Node) -> bool:
        """A 3-d convolution of a constant weight where the chip's conv3d has no quantized mode but
        its integer family does: conv3d_v2 of int8 operands into int32 (a bias in int32), then
        requant_int32 (mode 2: times a per-channel multiplier, a per-channel right shift) into
        int8, as TPU-MLIR lowers a 3-d convolution to INT8 for BM1684X ("to int32, and then
        requant to int8": sophgo/tpu-mlir 00b7154c, lib/Conversion/TopToTpu/BM1684X/Conv.cpp)."""
        if node.op != "conv3d" or len(node.inputs) < 2 or node.params.get("groups") != 1:
            return False
        x, w, *bias = node.inputs
        if self.rb.is_constant(x) or not self.rb.is_constant(w) or (bias and not self.rb.is_constant(bias[0])) or not self.is_float(x):
            return False
        if not (self.rb.supported("conv3d_v2", {"depthwise": False}, [I8, I8] + [I32] * len(bias), I32)
                and self.rb.supported("requant_int32", {"mode": 2}, [I32], I8)):
            return False
        weight = np.asarray(self.src.constants[w], np.float32)
        s_x, s_y = self.threshold(x) / QMAX, self.out_scale(node.outputs[0])
        s_w = np.maximum(np.abs(weight).reshape(len(weight), -1).max(axis=1).astype(np.float64), 1e-12) / QMAX
        shifts = [(m, r) for m, r in (multiplier(ratio, I32_MAX) for ratio in s_x * s_w / s_y) if m is not None and r is not None]
        if len(shifts) != len(s_w):
            return False
        p = node.params
        (db, da), (hb, ha), (wb, wa) = p["pads"]
        operands = [self.int8_of(x, s_x), self.rb.constant(w, np.clip(np.rint(weight / s_w.reshape(-1, 1, 1, 1, 1)), -QMAX, QMAX), I8)]
        if bias:
            b = np.asarray(self.src.constants[bias[0]], np.float32).reshape(-1)
            operands.append(self.rb.constant(bias[0], np.rint(b / (s_x * s_w)), I32))
        acc = ops.conv3d_v2(*operands, *p["dilations"], db, da, hb, ha, wb, wa, *p["strides"], out_dtype=I32,
                            name=self.rb.fresh(f"{node.name}/int32"))
        y = ops.requant_int32(acc, True, multiplier_vec=[m for m, _ in shifts], scale_vec=[-r for _, r in shifts], mode=2,
                              out_dtype=I8, name=node.name)
        self.rb.map[node.outputs[0]] = y
        self.scale[y.name] = s_y
        self.done[f"{node.op} in int8 through int32"] += 1
        return True

    def keep_scale(self, node: Node) -> bool:
        """An op whose int8 result has its input's scale (concat: the largest of its inputs')."""
        key = REGISTRY[node.op].support_key(node.params)
        reduction = node.op == "reduce" and node.params.get("method") in KEEP_SCALE_REDUCTIONS
        if node.op not in KEEP_SCALE and key not in KEEP_SCALE_KEYS and not reduction:
            return False
        if not all(self.is_float(n) for n in node.inputs + node.outputs) or all(self.rb.is_constant(n) for n in node.inputs):
            return False
        if self.rb.fits(node, [I8] * len(node.inputs), node.params) != [I8] * len(node.outputs):
            return False
        scales = [self.threshold(n) / QMAX if self.rb.tensor(n).dtype != I8 else self.scale[self.rb.tensor(n).name]
                  for n in node.inputs if not self.rb.is_constant(n)]
        scale = self.threshold(node.outputs[0]) / QMAX if node.op == "concat" else max(scales)
        outs = self.rb.copy(node, operands=[self.int8_of(n, scale) for n in node.inputs])
        for t in outs:
            self.scale[t.name] = scale
        self.done["kept in int8"] += 1
        return True

    def lookup(self, node: Node) -> bool:
        """The head of a one-tensor element-wise chain: one lut from its root's int8 values."""
        if node.outputs[0] not in self.heads:
            return False
        root, chain = self.heads[node.outputs[0]]
        if len(chain) == 1 and REGISTRY[chain[0].op].support_key(chain[0].params) in KEEP_SCALE_KEYS:
            return False  # a lone relu keeps its scale instead
        q = self.int8_of(root)
        s_in, s_out = self.scale[q.name], self.out_scale(node.outputs[0])
        codes = np.arange(256, dtype=np.uint8).view(np.int8)
        values = {root: codes.astype(np.float32) * np.float32(s_in)}
        for member in chain:
            arrays = [values[n] if n in values else np.asarray(self.src.constants[n]).reshape(1) for n in member.inputs]
            values[member.outputs[0]] = REGISTRY[member.op].reference(arrays, member.params)[0].reshape(-1)
        result = values[node.outputs[0]].astype(np.float64) / s_out
        table = self.rb.constant(f"{node.name}/table", np.clip(np.rint(np.nan_to_num(result)), -QMAX, QMAX), I8)
        y = ops.lut(q, table, name=node.name)
        self.rb.map[node.outputs[0]] = y
        self.scale[y.name] = s_out
        self.done["element-wise chain(s) as lut"] += 1
        return True

    def scale_of(self, name: str) -> float:
        """The scale int8_of(name) gives, without adding anything to the graph."""
        if self.rb.is_constant(name):
            return max(float(np.abs(np.asarray(self.src.constants[name], np.float32)).max()), 1e-12) / QMAX
        t = self.rb.tensor(name)
        return self.scale[t.name] if t.dtype == I8 else self.threshold(name) / QMAX

    def arith(self, node: Node) -> bool:
        """add, sub, mul of two tensors in int8, through int16 with rounding shifts. The plan is
        made and checked against the chip's table before any node is added."""
        if node.op not in ("add", "sub", "mul") or len(node.inputs) != 2 or not all(self.is_float(n) for n in node.inputs):
            return False
        a, b = node.inputs
        if all(self.rb.is_constant(n) for n in (a, b)):
            return False
        s_a, s_b = self.scale_of(a), self.scale_of(b)
        if node.op == "mul":
            s_y = self.out_scale(node.outputs[0])
            m, r = multiplier(s_a * s_b / s_y, QMAX)
            if m is None or not (self.rb.supported("mul_shift", {}, [I8, I8], I16) and self.rb.supported("muls_shift", {}, [I16], I8)):
                return False
            wide = ops.mul_shift(self.int8_of(a), self.int8_of(b), 0, out_dtype=I16, name=self.rb.fresh(f"{node.name}/product"))
            y = ops.muls_shift(wide, m, r, out_dtype=I8, name=node.name)
        else:
            plan = self.add_sub_plan(node, s_a, s_b)
            if plan is None:
                return False
            factors, r, s_y = plan
            operands = [self.int8_of(n) if factors[k] == 1 else
                        ops.muls_shift(self.int8_of(n), factors[k], 0, out_dtype=I16, name=self.rb.fresh(f"{node.name}/{'ab'[k]}"))
                        for k, n in enumerate((a, b))]
            y = {"add": ops.add_shift, "sub": ops.sub_shift}[node.op](*operands, r, out_dtype=I8, name=node.name)
        self.rb.map[node.outputs[0]] = y
        self.scale[y.name] = s_y
        self.done[f"{node.op} in int8"] += 1
        return True

    def add_sub_plan(self, node: Node, s_a: float, s_b: float) -> tuple[tuple[int, ...], int, float] | None:
        """(a +- b) >> r in int8 at scale s_y: ((factor of a, factor of b), r, s_y), or None where the
        chip lacks the ops. When one operand's scale is 2^j times the other's, that operand alone is
        widened (muls_shift by 2^j into int16, none when j = 0) and s_y is the smaller scale times
        2^r; otherwise both are (by m_a, m_b) and s_y is the output's own."""
        low = min(s_a, s_b)
        j = [math.log2(s / low) for s in (s_a, s_b)]
        if all(abs(v - round(v)) < 1e-6 and round(v) <= SHIFTED_BITS for v in j):
            r = max(0, math.ceil(math.log2(self.threshold(node.outputs[0]) / QMAX / low) - 1e-9))
            s_y, factors = low * 2.0**r, tuple(2 ** round(v) for v in j)
        else:
            s_y = self.threshold(node.outputs[0]) / QMAX
            r = min(31, math.floor(math.log2(255 / (max(s_a, s_b) / s_y))))
            if r < 0:
                return None
            factors = tuple(max(1, round(s / s_y * 2**r)) for s in (s_a, s_b))
        widened = [I8 if f == 1 else I16 for f in factors]
        if I16 in widened and not self.rb.supported("muls_shift", {}, [I8], I16):
            return None
        if not self.rb.supported(f"{node.op}_shift", {}, widened, I8):
            return None
        return factors, r, s_y


def multiplier(ratio: float, top: int) -> tuple[int, int] | tuple[None, None]:
    """(m, r) with m / 2^r ~ ratio, m at most `top` and as large as a shift of 0 to 31 allows;
    (None, None) when the ratio is too large or not positive."""
    if not ratio > 0 or ratio > top:
        return None, None
    r = min(31, math.floor(math.log2(top / ratio)))
    return max(1, min(top, round(ratio * 2**r))), r


def find_chains(source: Graph) -> tuple[Chains, set[str]]:
    """Element-wise chains that compute a function of one tensor: (heads, members). heads maps a
    chain's result read outside it (or a graph output) to (root, the chain's nodes in order);
    members holds every result of a chain that is not a head (computed inside its head's lut)."""
    root: dict[str, str] = {}
    node_of: dict[str, Node] = {}
    for node in source.nodes:
        opdef = REGISTRY[node.op]
        out = node.outputs[0]
        if (not isinstance(opdef, Elementwise) or node.op in NOT_IN_TABLES or len(node.outputs) != 1
                or source.tensors[out].dtype != F32 or source.tensors[out].bounded):
            continue
        tensors = [n for n in node.inputs if not (n in source.constants and source.tensors[n].size == 1)]
        if not tensors or any(n in source.constants or source.tensors[n].dtype != F32
                              or source.tensors[n].shape != source.tensors[out].shape
                              for n in tensors):
            continue
        roots = {root.get(n, n) for n in tensors}
        if len(roots) == 1:
            root[out], node_of[out] = roots.pop(), node
    outputs = set(source.outputs.values())
    heads, members = {}, set()
    for out, r in root.items():
        readers = source.consumers(out)
        if out in outputs or any(c.outputs[0] not in root or root[c.outputs[0]] != r for c in readers):
            chain, stack, seen = [], [out], set()
            while stack:
                t = stack.pop()
                if t in seen or t not in root:
                    continue
                seen.add(t)
                chain.append(node_of[t])
                stack.extend(node_of[t].inputs)
            order = {id(n): k for k, n in enumerate(source.nodes)}
            heads[out] = (r, sorted(chain, key=lambda n: order[id(n)]))
        else:
            members.add(out)
    return heads, members


__all__ = ["multiplier", "rewrite"]
