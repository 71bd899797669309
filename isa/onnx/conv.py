"""Convolutions and pooling: Conv, ConvTranspose, ConvInteger, QLinearConv, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool.

2-D ops map onto npusim's conv, deconv, conv_v2 and pool; 1-D ones are the 2-D op with H = 1
(views). A 3-D Conv is conv3d, a 3-D ConvInteger conv3d_v2; a 3-D pooling is two 2-D poolings
(H and W, then D: max and average windows are separable, an average's count of real inputs
too). ConvTranspose's output_padding and output_shape crop or zero-extend deconv's result. A
pooling with dilations, MaxPool's Indices output, a float 3-D ConvTranspose are not supported.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from ..errors import ShapeError
from .registry import onnx_op

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output


def window_pads(b: Builder, in_sizes: tuple[int, ...], kernel: list[int], strides: list[int],
                dilations: list[int]) -> list[tuple[int, int]]:
    """[(begin, end)] per spatial axis from pads or auto_pad."""
    n = len(in_sizes)
    auto = b.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out: list[tuple[int, int]] = []
        for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            out.append((small, large) if auto == "SAME_UPPER" else (large, small))
        return out
    if auto == "VALID":
        return [(0, 0)] * n
    if auto != "NOTSET":
        raise b.reject("auto_pad", auto)
    pads = b.attr("pads") or [0] * (2 * n)
    if len(pads) != 2 * n:
        raise b.error(f"pads {list(pads)}: must be {2 * n} integers, a begin and an end per spatial axis", ShapeError)
    return [(pads[i], pads[i + n]) for i in range(n)]


def window(b: Builder, x_shape: tuple[int, ...], kernel: tuple[int, ...] = ()) -> tuple[list[int], list[int], list[int],
           list[tuple[int, int]]]:
    n = len(x_shape) - 2
    kernel_shape = list(b.attr("kernel_shape") or kernel)
    strides = list(b.attr("strides") or [1] * n)
    dilations = list(b.attr("dilations") or [1] * n)
    for what, values in (("kernel_shape", kernel_shape), ("strides", strides), ("dilations", dilations)):
        if len(values) != n or any(v < 1 for v in values):
            raise b.error(f"{what} {values}: must be {n} integers >= 1, one per spatial axis", ShapeError)
    return kernel_shape, strides, dilations, window_pads(b, x_shape[2:], kernel_shape, strides, dilations)


def as_2d(b: Builder, t: Tensor) -> Tensor:
    """A 1-D (N, C, L) tensor as (N, C, 1, L)."""
    return b.reshape(t, t.shape[:2] + (1,) + t.shape[2:])


@onnx_op("Conv")
def conv(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, w = b.tensor(0), b.tensor(1)
    bias = b.tensor(2) if b.has(2) else None
    kernel, strides, dilations, pads = window(b, x.shape, w.shape[2:])
    groups = b.attr("group", 1)
    spatial = len(x.shape) - 2
    if spatial == 3:
        pad = [p for pair in pads for p in pair[::-1]]
        return [ops.conv3d(x, w, bias, groups, dilations, pad, strides)]  # type: ignore[arg-type]  # isa/ops asks tuples; lists do
    if spatial not in (1, 2):
        raise b.error(f"a {spatial}-d convolution is not supported (1-d, 2-d and 3-d are)")
    one = spatial == 1
    if one:
        x, w = as_2d(b, x), as_2d(b, w)
        kernel, strides, dilations, pads = [1] + kernel, [1] + strides, [1] + dilations, [(0, 0)] + pads
    y = ops.conv(x, w, bias, dilations[0], dilations[1], pads[0][0], pads[0][1], pads[1][0], pads[1][1], strides[0], strides[1], groups)
    return [b.reshape(y, y.shape[:2] + y.shape[3:]) if one else y]


@onnx_op("ConvTranspose")
def conv_transpose(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, w = b.tensor(0), b.tensor(1)
    spatial = len(x.shape) - 2
    if spatial not in (1, 2):
        raise b.error(f"a {spatial}-d ConvTranspose of {x.dtype} is not supported (npusim's deconv is 2-d; deconv3d_v2 is integer only)")
    kernel = list(b.attr("kernel_shape") or w.shape[2:])
    strides = list(b.attr("strides") or [1] * spatial)
    dilations = list(b.attr("dilations") or [1] * spatial)
    out_pad = list(b.attr("output_padding") or [0] * spatial)
    output_shape = b.attr("output_shape")
    full = [s * (n - 1) + (k - 1) * d + 1 for n, s, k, d in zip(x.shape[2:], strides, kernel, dilations)]
    auto = b.attr("auto_pad", "NOTSET")
    pads = b.attr("pads")
    if pads is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = list(output_shape) if output_shape else [n * s for n, s in zip(x.shape[2:], strides)]
        total = [f + p - o for f, p, o in zip(full, out_pad, sizes)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        pads = pads or [0] * (2 * spatial)
        begin = list(pads[:spatial])
        sizes = list(output_shape)[-spatial:] if output_shape else [
            f + p - pads[i] - pads[i + spatial] for i, (f, p) in enumerate(zip(full, out_pad))]
    bias = b.tensor(2) if b.has(2) else None
    one = spatial == 1
    if one:
        x, w = as_2d(b, x), as_2d(b, w)
        full, strides, dilations, begin, sizes = [1] + full, [1] + strides, [1] + dilations, [0] + begin, [1] + sizes
    # the output is the full transposed convolution from `begin` on, `sizes` long, zero past its ends
    crop = [(max(p, 0), max(f - p - n, 0)) for p, f, n in zip(begin, full, sizes)]
    extend = [(max(-p, 0), max(p + n - f, 0)) for p, f, n in zip(begin, full, sizes)]
    padded = any(sum(e) for e in extend)
    y = ops.deconv(x, w, None if padded else bias, dilations[0], dilations[1], crop[0][0], crop[0][1], crop[1][0], crop[1][1],
                   strides[0], strides[1], b.attr("group", 1))
    if padded:
        y = ops.pad(y, 0.0, [0, 0, 0, 0] + [p for pair in extend for p in pair])  # type: ignore[arg-type]  # isa/ops annotates a float pad value as int
        if bias is not None:
            y = ops.add(y, b.reshape(bias, (1, bias.shape[0], 1, 1)))
    return [b.reshape(y, y.shape[:2] + y.shape[3:]) if one else y]


# A zero point: (one value for all channels, that value, else the per-channel values)
ZeroPoint = tuple[bool, int, "list[int] | None"]


def zero_point(b: Builder, i: int, what: str) -> ZeroPoint:
    """A zero point input as (is a single value, value, per-channel list)."""
    if not b.has(i):
        return True, 0, None
    z = b.static(i, what).reshape(-1)
    if z.size == 1 or np.all(z == z[0]):
        return True, int(z[0]), None
    return False, 0, [int(v) for v in z]


@onnx_op("ConvInteger", static=(2, 3))
def conv_integer(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, w = b.tensor(0), b.tensor(1)
    return [integer_conv(b, x, w, zero_point(b, 2, "x_zero_point"), zero_point(b, 3, "w_zero_point"))]


def integer_conv(b: Builder, x: Tensor, w: Tensor, xzp: ZeroPoint, wzp: ZeroPoint, bias: Tensor | None = None) -> Tensor:
    _, strides, dilations, pads = window(b, x.shape, w.shape[2:])
    if not xzp[0]:
        raise b.error("a per-channel x_zero_point is not supported (ONNX allows one value)")
    groups = b.attr("group", 1)
    spatial = len(x.shape) - 2
    zp = {"is_izp_const": True, "izp_val": xzp[1], "is_kzp_const": wzp[0], "kzp_val": wzp[1], "kzp_vec": wzp[2]}
    if spatial == 3:
        (td, tb), (hd, hb), (wd, wb) = pads
        return ops.conv3d_v2(x, w, bias, dilations[0], dilations[1], dilations[2], td, tb, hd, hb, wd, wb, strides[0], strides[1],
                             strides[2], groups, **zp)
    one = spatial == 1
    if one:
        x, w = as_2d(b, x), as_2d(b, w)
        strides, dilations, pads = [1] + strides, [1] + dilations, [(0, 0)] + pads
    y = ops.conv_v2(x, w, bias, dilations[0], dilations[1], pads[0][0], pads[0][1], pads[1][0], pads[1][1], strides[0], strides[1],
                    groups, **zp)
    return b.reshape(y, y.shape[:2] + y.shape[3:]) if one else y


def requantize(b: Builder, acc: Tensor, multiplier: NDArray[Any], y_zp: int, out_dtype: str, channel_axis: int | None = None) -> Tensor:
    """saturate(round_half_even(acc * multiplier + y_zp)) into out_dtype: acc (int32) times the
    float32 multiplier (one, or one per channel along channel_axis), then the zero point added
    and the sum rounded to the nearest integer as it is stored."""
    m = np.asarray(multiplier, np.float32).reshape(-1)
    shape = [m.size if i == channel_axis and m.size > 1 else 1 for i in range(len(acc.shape))]
    scaled = ops.mul(acc, b.const(m.reshape(shape)), out_dtype="float32")
    return ops.adds(scaled, float(y_zp), out_dtype=out_dtype)


@onnx_op("QLinearConv", static=(1, 2, 4, 5, 6, 7))
def qlinear_conv(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, w = b.tensor(0), b.tensor(3)
    x_scale, w_scale, y_scale = (b.static(i, what).astype(np.float32) for i, what in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")))
    y_zp = b.static(7, "y_zero_point") if b.has(7) else np.zeros(1, dtype_np(x.dtype))
    bias = b.tensor(8) if b.has(8) else None
    acc = integer_conv(b, x, w, zero_point(b, 2, "x_zero_point"), zero_point(b, 5, "w_zero_point"), bias)
    multiplier = (x_scale.reshape(-1)[0] * w_scale.reshape(-1) / y_scale.reshape(-1)[0]).astype(np.float32)
    return [requantize(b, acc, multiplier, int(y_zp.reshape(-1)[0]), str(y_zp.dtype), channel_axis=1)]


def dtype_np(name: str) -> np.dtype:
    return dtypes.np_dtype(name)


# ---- pooling -------------------------------------------------------------------------------------

def pool2d(b: Builder, x: Tensor, method: str, kernel: list[int], strides: list[int], pads: list[tuple[int, int]], ceil: bool,
           count_pad: bool) -> Tensor:
    (pt, pb), (pl, pr) = pads
    return ops.pool(x, strides[0], strides[1], kernel[0], kernel[1], pt, pl, pb - pt, pr - pl, method, is_ceil_mode=ceil,
                    is_ave_count_zero_pad=count_pad, ensure_pool_image=ceil)


@onnx_op("LpPool")
def lp_pool(b: Builder, node: NodeProto) -> Sequence[Output]:
    """(sum over the window of |x|^p)^(1/p), padding counting as 0: the |x|^p tensor, a sum
    pooling of it (pool_views), and the root."""
    x0 = b.tensor(0)
    x = x0 if x0.dtype == "float32" else ops.cast(x0, out_dtype="float32")
    p = float(b.attr("p", 2))
    if not p > 0 or math.isinf(p):
        raise b.error(f"p {p} must be a finite number > 0", ShapeError)
    kernel, strides, dilations, pads = window(b, x.shape)
    a = ops.active(x, "absval")
    powered = ops.active(ops.muls(ops.active(a, "ln"), p), "exp") if p not in (1.0, 2.0) else (a if p == 1.0 else ops.mul(a, a))
    total = pool_views(b, powered, "SUM", kernel, strides, dilations, pads, bool(b.attr("ceil_mode", 0)), False, False, 0)[0]
    root = total if p == 1.0 else ops.active(total, "sqrt") if p == 2.0 else ops.active(ops.muls(ops.active(total, "ln"), 1 / p), "exp")
    return [root if root.dtype == x0.dtype else ops.cast(root, out_dtype=x0.dtype)]


@onnx_op("LRN")
def lrn(b: Builder, node: NodeProto) -> Sequence[Output]:
    """x / (bias + alpha / size * sum of x^2 over size neighbouring channels)^beta: the squares
    padded with zeros along C, `size` shifted slices added, the power through exp and ln."""
    x0 = b.tensor(0)
    x = x0 if x0.dtype == "float32" else ops.cast(x0, out_dtype="float32")
    size = b.attr("size")
    alpha, beta, bias = float(b.attr("alpha", 1e-4)), float(b.attr("beta", 0.75)), float(b.attr("bias", 1.0))
    rank, c = len(x.shape), x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = ops.pad(ops.mul(x, x), 0.0, [0, 0, before, after] + [0, 0] * (rank - 2))  # type: ignore[arg-type]  # isa/ops annotates a float pad value as int
    total = None
    for k in range(size):
        part = ops.extract(squares, [0, k] + [0] * (rank - 2), [x.shape[0], k + c] + list(x.shape[2:]), [1] * rank)
        total = part if total is None else ops.add(total, part)
    base = ops.adds(ops.muls(total, alpha / size), bias)
    y = ops.div(x, ops.active(ops.muls(ops.active(base, "ln"), beta), "exp"))
    return [y if y.dtype == x0.dtype else ops.cast(y, out_dtype=x0.dtype)]


@onnx_op("MaxPool", "AveragePool")
def pool(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    kernel, strides, dilations, pads = window(b, x.shape)
    method = "MAX" if node.op_type == "MaxPool" else "AVE"
    ceil = bool(b.attr("ceil_mode", 0))
    count_pad = bool(b.attr("count_include_pad", 0))
    indices = len(node.output) > 1 and node.output[1] != ""
    if indices or any(d != 1 for d in dilations):
        return pool_views(b, x, method, kernel, strides, dilations, pads, ceil, count_pad, indices, b.attr("storage_order", 0))
    spatial = len(x.shape) - 2
    if spatial == 1:
        y = pool2d(b, as_2d(b, x), method, [1] + kernel, [1] + strides, [(0, 0)] + pads, ceil, count_pad)
        return [b.reshape(y, y.shape[:2] + y.shape[3:])]
    if spatial == 2:
        return [pool2d(b, x, method, kernel, strides, pads, ceil, count_pad)]
    if spatial == 3:
        n, c, d, h, w = x.shape
        hw = pool2d(b, b.reshape(x, (n, c * d, h, w)), method, kernel[1:], strides[1:], pads[1:], ceil, count_pad)
        h2, w2 = hw.shape[2:]
        y = pool2d(b, b.reshape(hw, (n, c, d, h2 * w2)), method, [kernel[0], 1], [strides[0], 1], [pads[0], (0, 0)], ceil, count_pad)
        return [b.reshape(y, (n, c, y.shape[2], h2, w2))]
    raise b.error(f"a {spatial}-d pooling is not supported (1-d, 2-d and 3-d are)")


def pool_views(b: Builder, x: Tensor, method: str, kernel: list[int], strides: list[int], dilations: list[int],
               pads: list[tuple[int, int]], ceil: bool, count_pad: bool, indices: bool, storage_order: int) -> list[Tensor]:
    """A pooling npusim's pool cannot express (dilated windows, MaxPool's Indices) as one
    strided view of the padded input per kernel offset (extracts), combined element-wise: a
    max (and, for Indices, the flat input index of the first maximum, from index tables known
    from the shapes), or a sum divided by each window's count (known from the shapes)."""
    sizes = x.shape[2:]
    out = []
    for n, k, s, d, (pb, pe) in zip(sizes, kernel, strides, dilations, pads):
        span = (n + pb + pe - d * (k - 1) - 1) / s + 1
        o = math.ceil(span) if ceil else math.floor(span)
        if ceil and (o - 1) * s >= n + pb:
            o -= 1
        out.append(o)
    if min(out) < 1:
        raise b.error(f"the window {kernel} (dilations {dilations}) is larger than the padded input {sizes}")
    ends = [max((o - 1) * s + d * (k - 1) + 1 - n - pb, 0) for n, o, k, s, d, (pb, _) in zip(sizes, out, kernel, strides, dilations, pads)]
    if method == "MAX":
        np_dtype = dtype_np(x.dtype)
        fill = -math.inf if x.dtype in ("float32", "float16", "bfloat16") else np_dtype.type(np.iinfo(np_dtype).min).item()
    else:
        fill = 0.0
    padded = ops.pad(x, fill, [0, 0, 0, 0] + [v for (pb, _), e in zip(pads, ends) for v in (pb, e)])  # type: ignore[arg-type]  # isa/ops annotates a float pad value as int
    acc: Tensor | None = None
    best: Tensor | None = None
    for offset in np.ndindex(*kernel):
        start = [0, 0] + [j * d for j, d in zip(offset, dilations)]
        end = list(x.shape[:2]) + [st + (o - 1) * s + 1 for st, o, s in zip(start[2:], out, strides)]
        view = ops.extract(padded, start, end, [1, 1] + list(strides))
        if acc is None:
            acc = view
            if indices:
                best = b.const(_flat_index(x.shape, out, strides, dilations, pads, offset, storage_order))
            continue
        if method == "MAX":
            if indices:
                best = ops.condition_select(ops.gt(view, acc, out_dtype="bool"), b.const(
                    _flat_index(x.shape, out, strides, dilations, pads, offset, storage_order)), best)
            acc = ops.max(acc, view)
        else:
            acc = ops.add(acc, view)
    assert acc is not None and (best is not None or not indices), "a window has at least one position"
    if method == "AVE":  # SUM stays the sum
        counts = np.ones((1, 1), np.float64)
        for n, o, k, s, d, (pb, pe) in zip(sizes, out, kernel, strides, dilations, pads):
            pos = np.arange(o)[:, None] * s - pb + np.arange(k)[None, :] * d
            inside = (pos >= -pb) & (pos < n + pe) if count_pad else (pos >= 0) & (pos < n)
            counts = np.multiply.outer(counts, inside.sum(axis=1)).reshape(counts.shape + (o,))
        acc = ops.div(acc, b.const(counts.reshape((1, 1) + tuple(out)).astype(dtype_np(acc.dtype))))
    return [acc, best] if best is not None else [acc]


def _flat_index(shape: tuple[int, ...], out: list[int], strides: list[int], dilations: list[int], pads: list[tuple[int, int]],
                offset: tuple[int, ...], storage_order: int) -> NDArray[Any]:
    """int64 (N, C, *out): the flat input index each output position's window reads at `offset`
    (row-major over N, C and the spatial axes; column-major over the spatial axes with
    storage_order 1)."""
    n, c = shape[:2]
    sizes = shape[2:]
    coords = [np.arange(o) * s - pb + j * d for o, s, (pb, _), j, d in zip(out, strides, pads, offset, dilations)]
    grids = np.meshgrid(*coords, indexing="ij")
    steps = [int(np.prod(sizes[i + 1:])) for i in range(len(sizes))] if not storage_order else [
        int(np.prod(sizes[:i])) for i in range(len(sizes))]
    spatial = sum((g * st for g, st in zip(grids, steps)), np.zeros((), np.int64))
    plane = int(np.prod(sizes))
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    return (base.reshape(n, c, *([1] * len(sizes))) + spatial[None, None]).astype(np.int64)


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    method = "REDUCE_MEAN" if node.op_type == "GlobalAveragePool" else "REDUCE_MAX"
    return [ops.reduce(x, method, list(range(2, len(x.shape))), keep_dims=True)]

