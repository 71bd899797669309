"""The weight_only import pass: a MatMul whose right operand is a DequantizeLinear of a constant
int8, int4 or uint4 weight, as a weight-only quantized model is exported (W8A16, W4A16: ONNX's
QDQ form, opset 21's blocked scales for a group size), becomes one matrix_mul_a16
(isa/ops/weight_only.py), whose lowering streams the stored bytes and dequantizes on chip, rather
than element-wise steps that write the float weight to DDR ahead of the product.

Rewritten when the DequantizeLinear's result is read by this MatMul alone, and
- its weight is a constant [K, N]: int8 with no zero point or zero ones (the op's 8-bit weights
  are symmetric), or int4 / uint4 (stored as the op's unsigned codes, two a byte: an int4 code q
  as q + 8, its zero term -(zero point + 8) x scale);
- its scale is one value, one per column (axis 1), one per row (axis 0: a group of 1 row; 8 bits
  only, the op's 4-bit groups being even) or blocked along K (axis 0, block_size dividing K);
- the MatMul's left operand (rank 2 or more: its leading dimensions are rows) and the dequantized
  weight are float16 or bfloat16, the op's activations.
Else it stays as it was. The weight, scales and zero terms the op takes are computed here, once.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from .. import dtypes, ops
from ..ops import weight_only
from .builder import node_attr
from .inference import static_shapes
from .registry import onnx_op

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from onnx import NodeProto

    from .builder import Builder, Output
    from .importer import Source
    from .passes import Graph

A16 = "WeightOnlyMatMul"
BITS = {"int8": 8, "int4": 4, "uint4": 4}
FLOATS: dict[int, str] = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


@onnx_op(A16)
def mapped(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    k, n = b.shape(1)[0] * weight_only.PER_BYTE[int(b.attr("bits"))], b.shape(1)[1]
    rows = b.reshape(x, (int(np.prod(x.shape[:-1])), k))
    zero = b.tensor(3) if b.has(3) else None
    y = ops.matrix_mul_a16(rows, b.tensor(1), b.tensor(2), zero, bits=int(b.attr("bits")), group=int(b.attr("group")))
    return [b.reshape(y, (*x.shape[:-1], n))]


def rewrite(source: Source, g: Graph) -> str:
    """Rewrite every such product of g (a passes.Graph of source); what changed, for the note."""
    shapes, elems = static_shapes(source)
    done = 0
    for node in list(g.nodes):
        if node.op_type != "MatMul" or not g.alive(node) or node.domain not in ("", "ai.onnx"):
            continue
        dq = g.producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx") or not g.private(node.input[1]):
            continue
        x_elem = elems.get(node.input[0])
        if x_elem not in FLOATS or elems.get(dq.output[0]) != x_elem or len(shapes.get(node.input[0], ())) < 2:
            continue
        found = _quantized(g, dq, x_elem)
        if found is None:
            continue
        name = node.name or node.output[0]
        inputs = [node.input[0]]
        for what, array in zip(("weight", "scale", "zero"), found[1]):
            source.weights[f"{name}.a16_{what}"] = array
            inputs.append(f"{name}.a16_{what}")
        g.replace([dq, node], [helper.make_node(A16, inputs, list(node.output), name=name, bits=found[0][0], group=found[0][1])])
        for old in dq.input:
            if old in source.weights and not g.readers[old] and old not in g.outputs:
                del source.weights[old]
        done += 1
    g.commit()
    return f"{done} MatMul(s) of a dequantized constant weight became matrix_mul_a16" if done else "nothing to rewrite"


def _quantized(g: Graph, dq: NodeProto, x_elem: int) -> tuple[tuple[int, int], list[NDArray]] | None:
    """((bits, group), [stored weight, scales, zero terms]) of the op for DequantizeLinear dq, or
    None where the pattern does not fit (the module docstring)."""
    values = [g.value(i) if i else None for i in dq.input] + [None] * (3 - len(dq.input))
    q, scale, zp = values[:3]
    if q is None or scale is None or (len(dq.input) > 2 and dq.input[2] and zp is None) or q.ndim != 2:
        return None
    bits = BITS.get(q.dtype.name)
    k, n = q.shape
    axis, block = int(node_attr(dq, "axis", 1)), int(node_attr(dq, "block_size", 0))
    found, zeros = _groups(scale, axis, block, k, n), _groups(zp, axis, block, k, n) if zp is not None else None
    if bits is None or found is None or (bits == 4 and found[0] % 2) or (zp is not None and zeros is None):
        return None
    group, scales = found
    dtype = dtypes.np_dtype(FLOATS[x_elem])
    if bits == 8:
        if zeros is not None and np.any(zeros[1]):
            return None
        return (8, group), [q.astype(np.int8), scales.astype(dtype)]
    shift = 8 if q.dtype.name == "int4" else 0
    codes = q.astype(np.int16) + shift
    offsets = (zeros[1] if zeros is not None else 0) + shift
    return (4, group), [weight_only.pack(codes), scales.astype(dtype), (-offsets * scales).astype(dtype)]


def _groups(t: NDArray, axis: int, block: int, k: int, n: int) -> tuple[int, NDArray[np.float32]] | None:
    """(group, t as a (K / group, N) table in float32) of a scale or zero point of DequantizeLinear
    for a [K, N] weight, or None where it is none of the forms the op takes."""
    t = np.asarray(t).astype(np.float32)
    axis = axis + 2 if axis < 0 else axis
    if t.size == 1:
        return k, np.full((1, n), t.reshape(-1)[0], np.float32)
    if not block and axis == 1 and t.shape == (n,):
        return k, t[None, :]
    if not block and axis == 0 and t.shape == (k,):
        return 1, np.repeat(t[:, None], n, axis=1)
    if block and axis == 0 and k % block == 0 and t.shape == (k // block, n):
        return block, t
    return None


__all__ = ["A16", "rewrite"]
