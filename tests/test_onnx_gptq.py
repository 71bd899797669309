"""The gptq import pass (isa/onnx/gptq.py): a GPTQ-style export that unpacks int32 words of 4- or
8-bit codes in the graph (BitShift, BitwiseAnd, Cast, Sub of the zero points, Mul by the scales
expanded per group) ahead of a MatMul imports as one matrix_mul_a16 and computes what
onnxruntime computes; a pattern that deviates imports as before."""

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import chips
import isa
import sim
from isa.errors import UnsupportedError

ELEM = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}


def pack(codes, bits, axis):
    """int32 words holding codes (0..2^bits - 1) packed low-first along `axis`, as GPTQ packs
    qweight along K (axis 0) and qzeros along N (axis 1)."""
    per = 32 // bits
    c = np.moveaxis(codes.astype(np.uint32), axis, 0)
    c = c.reshape(c.shape[0] // per, per, *c.shape[1:])
    words = np.zeros(c[:, 0].shape, np.uint32)
    for i in range(per):
        words |= c[:, i] << np.uint32(bits * i)
    return np.moveaxis(words.view(np.int32), 0, axis)


class Export:
    """An ONNX graph built as a GPTQ export writes one layer: its nodes, its initializers."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value):
        self.count += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value), f"c{self.count}"))
        return f"c{self.count}"

    def op(self, kind, *inputs, **attrs):
        self.count += 1
        self.nodes.append(helper.make_node(kind, list(inputs), [f"t{self.count}"], **attrs))
        return f"t{self.count}"

    def unpack(self, words, bits, axis, shift=None, mask=None):
        """The codes of int32 words [A, B] packed along `axis`: Cast to uint32 (BitShift takes
        unsigned words), Unsqueeze, BitShift RIGHT by [0, bits, ..., 32 - bits], BitwiseAnd by
        2^bits - 1, Reshape to the unpacked [A x 32 / bits, B] or [A, B x 32 / bits]."""
        per = 32 // bits
        shifts = np.arange(0, 32, bits, dtype=np.uint32) if shift is None else np.asarray(shift, np.uint32)
        shape = [1, 1, 1]
        shape[axis + 1] = per
        u = self.op("Cast", self.const(words), to=TensorProto.UINT32)
        u = self.op("Unsqueeze", u, self.const(np.array([axis + 1])))
        s = self.op("BitShift", u, self.const(shifts.reshape(shape)), direction="RIGHT")
        c = self.op("BitwiseAnd", s, self.const(np.uint32(2 ** bits - 1 if mask is None else mask)))
        out = list(words.shape)
        out[axis] *= per
        return self.op("Reshape", c, self.const(np.array(out)))

    def per_row(self, table, k, group, how):
        """A [K / group, N] table expanded to [K, N]: Unsqueeze, Expand (or Tile), Reshape; or a
        Gather by g_idx (arange(K) // group unless `how` is an array)."""
        n = table.shape[1] if not isinstance(table, str) else None
        t = self.const(table) if not isinstance(table, str) else table
        if isinstance(how, np.ndarray) or how == "gather":
            g_idx = np.arange(k) // group if isinstance(how, str) else how
            return self.op("Gather", t, self.const(g_idx.astype(np.int32)), axis=0)
        u = self.op("Unsqueeze", t, self.const(np.array([1])))
        if how == "expand":
            u = self.op("Expand", u, self.const(np.array([k // group, group, 1])))
        else:
            u = self.op("Tile", u, self.const(np.array([1, group, 1])))
        return self.op("Reshape", u, self.const(np.array([k, -1 if n is None else n])))

    def model(self, x, y, k, n, dtype, rows):
        graph = helper.make_graph(self.nodes, "gptq", [helper.make_tensor_value_info(x, ELEM[dtype], [1, rows, k])],
                                  [helper.make_tensor_value_info(y, ELEM[dtype], [1, rows, n])], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def gptq_model(bits=4, group=64, k=256, n=96, zeros="packed", how="expand", dtype="float16", rows=3, shift=None, mask=None,
               seed=0):
    """x (1, rows, K) @ the weight a GPTQ export unpacks in the graph: qweight int32 [K x bits / 32,
    N] packed along K, scales [K / group, N], zero points packed along N in qzeros [K / group,
    N x bits / 32] and stored minus 1 ("packed": old GPTQ's + 1 in the graph), or one zero point
    2^(bits - 1) for every code ("symmetric"); the group expansion written as `how`."""
    rng = np.random.default_rng(seed)
    e = Export()
    codes = rng.integers(0, 2 ** bits, (k, n))
    c = e.op("Cast", e.unpack(pack(codes, bits, 0), bits, 0, shift, mask), to=ELEM[dtype])
    if zeros == "packed":
        z = rng.integers(1, 2 ** bits, (k // group, n)) - 1
        zt = e.op("Add", e.unpack(pack(z, bits, 1), bits, 1), e.const(np.uint32(1)))
        zt = e.per_row(e.op("Cast", zt, to=ELEM[dtype]), k, group, how)
        c = e.op("Sub", c, zt)
    else:
        c = e.op("Sub", c, e.const(np.array(2 ** (bits - 1), dtype)))
    scales = (rng.random((k // group, n)) * 0.02 + 1e-3).astype(dtype)
    w = e.op("Mul", e.per_row(scales, k, group, how), c)
    y = e.op("MatMul", "x", w)
    return e.model("x", y, k, n, dtype, rows)


def against_onnxruntime(model, chip, dtype="float16", seed=5):
    g = isa.from_onnx(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load(chip), inputs={"x": x}).outputs[model.graph.output[0].name].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    return g
