"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, as element-wise
steps on the machine, per tensor, per axis or per block:

    QuantizeLinear     y = saturate(round_half_even(x / scale) + zero_point)
    DequantizeLinear   y = (x - zero_point) * scale

For an integer output (8- and 16-bit, int4, uint4, int2, uint2) the quotient is rounded as the
vector unit stores a float into an int32 (halves to even), then the zero point is added
exactly and the sum saturates into the output type. For a float output (the float8 types,
float4_e2m1fn) x / scale + zero_point is computed in float32 and converted as Cast converts
it: to the nearest value, a float8 saturating to its largest magnitude unless the node says
saturate=0 (float4_e2m1fn always saturates). The zero point of those is usually 0, but the
formula stays the same, as ONNX says.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import dtypes, ops
from .builder import Rank0, dtype_of
from .registry import onnx_op
from .shape import axis_of

if TYPE_CHECKING:
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output


def along(b: Builder, t: Tensor, x_shape: tuple[int, ...], axis: int, block: int) -> Tensor:
    """A scale or zero point shaped to broadcast against x: one value, one per index of `axis`
    (1-D), or one per block of `block` indices along `axis` (x's rank)."""
    rank = len(x_shape)
    if t.size == 1:
        return b.reshape(t, (1,) * rank)
    if block:
        if len(t.shape) != rank:
            raise b.error(f"a blocked scale must have x's rank {rank}, got shape {t.shape}")
        wide_shape = t.shape[: axis + 1] + (1,) + t.shape[axis + 1:]
        tiled = ops.tile(b.reshape(t, wide_shape), [block if i == axis + 1 else 1 for i in range(rank + 1)])
        shape = list(t.shape)
        shape[axis] *= block
        out = b.reshape(tiled, shape)
        if shape[axis] != x_shape[axis]:
            out = ops.extract(out, [0] * rank, list(x_shape), [1] * rank)
        return out
    if len(t.shape) != 1 or t.shape[0] != x_shape[axis]:
        raise b.error(f"a per-axis scale must have {x_shape[axis]} values (axis {axis} of {x_shape}), got shape {t.shape}")
    return b.reshape(t, [t.shape[0] if i == axis else 1 for i in range(rank)])


def quant_axis(b: Builder, x: Tensor) -> tuple[int, int]:
    """(axis, block size): the axis matters only for a scale of more than one value."""
    if b.tensor(1).size == 1:
        return 0, 0
    return axis_of(b, b.attr("axis", 1), len(x.shape)), b.attr("block_size", 0)


@onnx_op("QuantizeLinear")
def quantize(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    axis, block = quant_axis(b, x)
    if b.has(2):
        out_dtype = b.dtype(2)
    else:
        out_dtype = dtype_of(b.attr("output_dtype", 0) or 2, f"{b.where()}: attribute output_dtype")
    scale = along(b, b.tensor(1), x.shape, axis, block)
    quotient = "float32" if dtypes.is_float(out_dtype) else "int32"
    q = ops.div(x, scale, out_dtype=quotient) if scale.dtype == x.dtype else ops.div(
        ops.cast(x, out_dtype="float32"), scale, out_dtype=quotient)
    if dtypes.is_float(out_dtype):
        if b.has(2):
            q = ops.add(q, along(b, b.tensor(2), x.shape, axis, block), out_dtype="float32")
        y = b.cast(q, out_dtype, bool(b.attr("saturate", 1)))
    elif b.has(2):
        y = ops.add(q, along(b, b.tensor(2), x.shape, axis, block), out_dtype=out_dtype)
    else:
        y = ops.cast(q, out_dtype=out_dtype)
    return [Rank0(y) if b.rank(0) == 0 else y]


@onnx_op("DequantizeLinear")
def dequantize(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    axis, block = quant_axis(b, x)
    scale = along(b, b.tensor(1), x.shape, axis, block)
    exact = "float32" if dtypes.is_float(x.dtype) else "int32"  # x - zero_point
    shifted = ops.sub(x, along(b, b.tensor(2), x.shape, axis, block), out_dtype=exact) if b.has(2) else x
    out_dtype = scale.dtype
    if b.attr("output_dtype", 0):
        out_dtype = dtype_of(b.attr("output_dtype"), f"{b.where()}: attribute output_dtype")
    y = ops.mul(shifted, scale, out_dtype=out_dtype)
    return [Rank0(y) if b.rank(0) == 0 else y]


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize(b: Builder, node: NodeProto) -> Sequence[Output]:
    """uint8 with scale = (max(x, 0) - min(x, 0)) / 255 and zero point round(-min / scale)."""
    x = b.tensor(0)
    axes = list(range(len(x.shape)))
    low = ops.mins(ops.reduce(x, "REDUCE_MIN", axes, keep_dims=False), 0.0)
    high = ops.maxs(ops.reduce(x, "REDUCE_MAX", axes, keep_dims=False), 0.0)
    scale = ops.divs(ops.sub(high, low), 255.0)
    zp = ops.rsubs(scalar=0.0, tensor_i=ops.div(low, scale), out_dtype="uint8")
    q = ops.div(x, b.reshape(scale, (1,) * len(x.shape)), out_dtype="int32")
    y = ops.add(q, b.reshape(zp, (1,) * len(x.shape)), out_dtype="uint8")
    return [y, Rank0(scale), Rank0(zp)]

