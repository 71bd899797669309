"""Matrix products: MatMul, Gemm, MatMulInteger, QLinearMatMul.

npusim's matrix_mul is one 2-D product (float, or int8 in the seed's quantized modes), and
matrix_mul_v2 the integer family with batches. A float MatMul whose right operand is 2-D is one
product of the left operand flattened to rows (a view); one with batched right operands is one
batched product, each batch element's matrices read where they lie (matrix_mul broadcasts batch
dimensions as numpy's matmul does); a constant right operand's batches are cut when the graph is
built, each its own 2-D product (a weight, which a deployment pass may quantize).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes, ops
from .builder import Rank0
from .conv import requantize, zero_point
from .registry import onnx_op

if TYPE_CHECKING:
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output


def matmul(b: Builder, a: Tensor, c: Tensor) -> Tensor | Rank0:
    """numpy's matmul of two float tensors (1-D operands promoted and the added axis dropped)."""
    a_vec, c_vec = len(a.shape) == 1, len(c.shape) == 1
    if a_vec:
        a = b.reshape(a, (1,) + a.shape)
    if c_vec:
        c = b.reshape(c, c.shape + (1,))
    (m, k), (k2, n) = a.shape[-2:], c.shape[-2:]
    if k != k2:
        raise b.error(f"operands {a.shape} and {c.shape} do not multiply (K {k} != {k2})")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], c.shape[:-2]))
    except ValueError:
        raise b.error(f"batch dimensions of {a.shape} and {c.shape} do not broadcast") from None
    if len(c.shape) == 2:
        rows = int(np.prod(a.shape[:-1], dtype=np.int64))
        y = b.reshape(ops.matrix_mul(b.reshape(a, (rows, k)), c), a.shape[:-1] + (n,))
    else:
        a = b.reshape(a, (1,) * (len(batch) - len(a.shape[:-2])) + a.shape)
        c = b.reshape(c, (1,) * (len(batch) - len(c.shape[:-2])) + c.shape)
        if c.name not in c.graph.constants:
            return _vectors(b, b.reshape(ops.matrix_mul(a, c), batch + (m, n)), a_vec, c_vec)
        parts = []
        for index in np.ndindex(*batch):
            left = _pick(b, a, index)
            right = _pick(b, c, index)
            parts.append(b.reshape(ops.matrix_mul(left, right), (1, m, n)))
        y = b.reshape(ops.concat(parts, 0) if len(parts) > 1 else parts[0], batch + (m, n))
    return _vectors(b, y, a_vec, c_vec)


def _vectors(b: Builder, y: Tensor, a_vec: bool, c_vec: bool) -> Tensor | Rank0:
    """y without the axes added to 1-D operands."""
    shape = y.shape
    if a_vec:
        shape = shape[:-2] + shape[-1:]
    if c_vec:
        shape = shape[:-1]
    return Rank0(b.reshape(y, (1,))) if shape == () else b.reshape(y, shape)


def _pick(b: Builder, t: Tensor, index: tuple[int, ...]) -> Tensor:
    """The 2-D matrix of t at batch index (broadcast dimensions read index 0)."""
    lead = len(t.shape) - 2
    at = [0 if t.shape[i] == 1 else index[i] for i in range(lead)]
    if all(d == 1 for d in t.shape[:lead]):
        return b.reshape(t, t.shape[-2:])
    if t.name in t.graph.constants:
        return b.const(np.asarray(t.graph.constants[t.name])[tuple(at)])
    start = at + [0, 0]
    end = [a + 1 for a in at] + list(t.shape[-2:])
    return b.reshape(ops.extract(t, start, end, [1] * len(t.shape)), t.shape[-2:])


@onnx_op("MatMul")
def matmul_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    a, c = b.tensor(0), b.tensor(1)
    if not dtypes.is_float(a.dtype):
        raise b.error(f"MatMul of {a.dtype} is not supported (npusim's matrix_mul is float, or int8 through MatMulInteger)")
    return [matmul(b, a, c)]


@onnx_op("Gemm")
def gemm(b: Builder, node: NodeProto) -> Sequence[Output]:
    a = b.tensor(0)
    if b.attr("transA", 0):
        a = ops.permute(a, [1, 0])
    c = transposed(b, 1) if b.attr("transB", 0) else b.tensor(1)
    alpha, beta = float(b.attr("alpha", 1.0)), float(b.attr("beta", 1.0))
    n = c.shape[1]
    bias = b.tensor(2) if b.has(2) and beta != 0.0 else None
    if bias is not None and alpha == 1.0 and beta == 1.0 and b.shape(2) in ((n,), (1, n)) and bias.dtype == a.dtype:
        return [ops.matrix_mul(a, c, b.reshape(bias, (1, n)))]
    y = ops.matrix_mul(a, c)
    if alpha != 1.0:
        y = ops.muls(y, alpha)
    if bias is not None:
        y = ops.add(*b.bcast(y, ops.muls(bias, beta) if beta != 1.0 else bias))
    return [y]


def transposed(b: Builder, i: int) -> Tensor:
    """Input i (2-D) transposed: a weight's layout is changed when the graph is built (as a
    compiler lays weights out), a tensor known only at run time is permuted on the machine."""
    known = b.known(i)
    if known is not None:
        return b.const(np.ascontiguousarray(known.T))
    return ops.permute(b.tensor(i), [1, 0])


def _zero_points(b: Builder, i_a: int, i_b: int) -> dict[str, Any]:
    """matrix_mul_v2's zero-point arguments from A's (one value) and B's (one, or one per column)."""
    a_one, a_val, _ = zero_point(b, i_a, "a_zero_point")
    if not a_one:
        raise b.error("a per-row a_zero_point is not supported (npusim's left zero point is one value, or one per K)")
    b_one, b_val, b_vec = zero_point(b, i_b, "b_zero_point")
    return {"is_lzp_const": True, "lzp_val": a_val, "is_rzp_const": b_one, "rzp_val": b_val, "rzp_vec": b_vec}


def integer_matmul(b: Builder, a: Tensor, c: Tensor, i_a: int, i_b: int) -> Tensor:
    a_vec, c_vec = len(a.shape) == 1, len(c.shape) == 1
    if a_vec:
        a = b.reshape(a, (1,) + a.shape)
    if c_vec:
        c = b.reshape(c, c.shape + (1,))
    y = ops.matrix_mul_v2(a, c, **_zero_points(b, i_a, i_b))
    shape = y.shape
    if a_vec:
        shape = shape[:-2] + shape[-1:]
    if c_vec:
        shape = shape[:-1]
    return b.reshape(y, shape)


@onnx_op("MatMulInteger", static=(2, 3))
def matmul_integer(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [integer_matmul(b, b.tensor(0), b.tensor(1), 2, 3)]


@onnx_op("QLinearMatMul", static=(1, 2, 4, 5, 6, 7))
def qlinear_matmul(b: Builder, node: NodeProto) -> Sequence[Output]:
    a, c = b.tensor(0), b.tensor(3)
    a_scale, b_scale, y_scale = (b.static(i, what) for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")))
    y_zp = b.static(7, "y_zero_point")
    acc = integer_matmul(b, a, c, 2, 5)
    multiplier = a_scale.reshape(-1)[0] * b_scale.reshape(-1) / y_scale.reshape(-1)[0]
    return [requantize(b, acc, multiplier.astype(np.float32), int(y_zp.reshape(-1)[0]), str(y_zp.dtype), len(acc.shape) - 1)]
