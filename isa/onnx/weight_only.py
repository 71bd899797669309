"""The weight_only import pass: a MatMul whose right operand is a DequantizeLinear of a constant
int8, int4 or uint4 weight, as a weight-only quantized model is exported (W8A16, W4A16: ONNX's
QDQ form, opset 21's blocked scales for a group size), becomes one matrix_mul_a16
(isa/ops/weight_only.py), whose lowering streams the stored bytes and dequantizes on chip, rather
than element-wise steps that write the float weight to DDR ahead of the product.

Rewritten when the DequantizeLinear's result is read by this MatMul alone, and
- its weight is a constant [K, N]: int8 or uint8 (stored as int8: a uint8 code u as u - 128; a
  zero term (shift - zero point) x scale where the zero points, shifted so, are not all 0), or
  int4 / uint4 (stored as the op's unsigned codes, two a byte: an int4 code q as q + 8, its zero
  term -(zero point + 8) x scale);
- its scale is one value, one per column (axis 1), one per row (axis 0: a group of 1 row; 8 bits
  only, the op's 4-bit groups being even) or blocked along K (axis 0, block_size dividing K);
- the MatMul's left operand (rank 2 or more: its leading dimensions are rows) and the dequantized
  weight are float16 or bfloat16, the op's activations.
Else it stays as it was. The weight, scales and zero terms the op takes are computed here, once.

onnxruntime's contrib op com.microsoft.MatMulNBits (what its int4 quantizer and
onnxruntime-genai export: B [N, K / block, block x bits / 8] of codes packed low-first along K,
a scale per block, zero points packed or in A's dtype, 2^(bits - 1) when absent) maps to
matrix_mul_a16 by the same rules: codes with their zero terms (none for 8-bit ones whose zero
point is 128 everywhere: symmetric int8), float16 or bfloat16 activations, the block dividing K.
Another such product (float32 activations, a K the blocks do not divide) is a matrix_mul by its
weight dequantized at import, as onnxruntime computes it, and a note says why; g_idx (act-order
GPTQ) other than the blocks in order is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from .. import dtypes, ops
from ..errors import ShapeError
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
NBITS = "com.microsoft.MatMulNBits"
BITS = {"int8": 8, "uint8": 8, "int4": 4, "uint4": 4}
FLOATS: dict[int, str] = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


@onnx_op(A16)
def mapped(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    k, n = b.shape(1)[0] * weight_only.PER_BYTE[int(b.attr("bits"))], b.shape(1)[1]
    rows = b.reshape(x, (int(np.prod(x.shape[:-1])), k))
    zero = b.tensor(3) if b.has(3) else None
    y = ops.matrix_mul_a16(rows, b.tensor(1), b.tensor(2), zero, bits=int(b.attr("bits")), group=int(b.attr("group")))
    return [b.reshape(y, (*x.shape[:-1], n))]


@onnx_op(NBITS, static=(1, 2, 3, 4))
def matmul_nbits(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    k, n, bits, block = (int(b.attr(a, d)) for a, d in (("K", 0), ("N", 0), ("bits", 4), ("block_size", 0)))
    if bits not in BITS.values():
        raise b.reject("bits", bits, "matrix_mul_a16 takes 4- and 8-bit weights")
    if block < 16 or block & (block - 1):
        raise b.reject("block_size", block, "MatMulNBits' blocks are a power of two, 16 or more")
    if not x.shape or x.shape[-1] != k:
        raise b.error(f"A {x.shape} does not end in K = {k}", ShapeError)
    blocks = -(-k // block)
    packed = b.static(1, "packed weight")
    if packed.dtype != np.uint8 or packed.shape != (n, blocks, block * bits // 8):
        raise b.error(f"B is {packed.dtype} {packed.shape}; expected uint8 {(n, blocks, block * bits // 8)}", ShapeError)
    codes = (packed if bits == 8 else np.stack((packed & 15, packed >> 4), axis=-1)).reshape(n, blocks * block)[:, :k].T
    scale = _per_block(b, 2, "scales", n, blocks)
    zero = _nbits_zero_points(b, n, blocks, bits)
    if b.has(4) and not np.array_equal(b.static(4, "g_idx").reshape(-1), np.arange(k) // block):
        raise b.error("g_idx reorders K (act-order GPTQ); matrix_mul_a16 takes the blocks in order")
    rows = b.reshape(x, (int(np.prod(x.shape[:-1])), k))
    dtype = dtypes.np_dtype(x.dtype)
    refused = (f"{x.dtype} activations (the op's are float16 or bfloat16)" if x.dtype not in weight_only.FLOATS
               else f"K = {k} not a whole number of blocks of {block}" if k % block
               else None)
    if refused is None:
        weight, scales, *zeros = (b.const(a) for a in stored(codes, 128 if bits == 8 else 0, zero, scale, dtype, bits))
        y = ops.matrix_mul_a16(rows, weight, scales, zeros[0] if zeros else None, bits=bits, group=block)
    else:
        b.g.notes.append(f"{b.where()}: {bits}-bit weights dequantized at import, not a matrix_mul_a16: {refused}")
        b.check_size((k, n), np.float32, "the dequantized weight")
        w = (codes - np.repeat(zero, block, axis=0)[:k]) * np.repeat(scale, block, axis=0)[:k]
        y = ops.matrix_mul(rows, b.const(w.astype(dtype)))
    if b.has(5):
        y = ops.add(*b.bcast(y, b.tensor(5)))
    return [b.reshape(y, (*x.shape[:-1], n))]


def _per_block(b: Builder, i: int, what: str, n: int, blocks: int) -> NDArray[np.float32]:
    """A per-block table of MatMulNBits ([N x blocks] or [N, blocks]) as [blocks, N] in float32."""
    t = b.static(i, what)
    if t.size != n * blocks:
        raise b.error(f"{what} has {t.size} values; expected N x blocks = {n * blocks}", ShapeError)
    return t.astype(np.float32).reshape(n, blocks).T


def _nbits_zero_points(b: Builder, n: int, blocks: int, bits: int) -> NDArray[np.float32]:
    """MatMulNBits' zero points as [blocks, N] in float32: uint8 packed low-first per row of N,
    or in A's dtype; 2^(bits - 1) when absent."""
    if not b.has(3):
        return np.full((blocks, n), 2 ** (bits - 1), np.float32)
    z = b.static(3, "zero_points")
    if z.dtype != np.uint8:
        return _per_block(b, 3, "zero_points", n, blocks)
    per_row = -(-blocks * bits // 8)
    if z.size != n * per_row:
        raise b.error(f"zero_points has {z.size} bytes; expected N x {per_row} = {n * per_row}", ShapeError)
    z = z.reshape(n, per_row)
    unpacked = z if bits == 8 else np.stack((z & 15, z >> 4), axis=-1).reshape(n, 2 * per_row)
    return unpacked[:, :blocks].astype(np.float32).T


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
        g.replace([dq, node], [a16_node(source, node, *found[0], found[1])])
        for old in dq.input:
            if old in source.weights and not g.readers[old] and old not in g.outputs:
                del source.weights[old]
        done += 1
    g.commit()
    return f"{done} MatMul(s) of a dequantized constant weight became matrix_mul_a16" if done else "nothing to rewrite"


def a16_node(source: Source, matmul: NodeProto, bits: int, group: int, arrays: Sequence[NDArray]) -> NodeProto:
    """The WeightOnlyMatMul taking MatMul matmul's place, with the op's constants `arrays`
    ([stored weight, scales (, zero terms)], as `stored` makes them) added to the source's weights."""
    name = matmul.name or matmul.output[0]
    inputs = [matmul.input[0]]
    for what, array in zip(("weight", "scale", "zero"), arrays):
        source.weights[f"{name}.a16_{what}"] = array
        inputs.append(f"{name}.a16_{what}")
    return helper.make_node(A16, inputs, list(matmul.output), name=name, bits=bits, group=group)


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
    zero = zeros[1] if zeros is not None else np.zeros_like(scales)
    if bits == 8:
        shift = 128 if q.dtype.name == "uint8" else 0
        return (8, group), stored(q, shift, zero, scales, dtypes.np_dtype(FLOATS[x_elem]), 8)
    shift = 8 if q.dtype.name == "int4" else 0
    return (4, group), stored(q.astype(np.int16) + shift, 0, zero + shift, scales, dtypes.np_dtype(FLOATS[x_elem]), 4)


def stored(codes: NDArray, shift: int, zero: NDArray, scale: NDArray, dtype: np.dtype, bits: int) -> list[NDArray]:
    """[stored weight, scales (, zero terms)] of matrix_mul_a16 for w = (codes - zero) x scale
    (codes [K, N], zero and scale [K / group, N]): 8-bit codes stored as int8 codes - shift, with
    the zero terms (shift - zero) x scale unless they are all 0; 4-bit ones packed, with theirs."""
    if bits == 8:
        terms = (shift - zero) * scale
        return [(codes.astype(np.int16) - shift).astype(np.int8), scale.astype(dtype)] + ([terms.astype(dtype)] if np.any(terms) else [])
    return [weight_only.pack(codes), scale.astype(dtype), (-zero * scale).astype(dtype)]


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


__all__ = ["A16", "NBITS", "a16_node", "rewrite", "stored"]
