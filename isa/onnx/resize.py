"""Resize and Upsample, one axis at a time (resizing is separable).

Along an axis, every output element is a weighted sum of input elements whose positions and
weights follow from the sizes and the attributes alone (mode, coordinate_transformation_mode,
nearest_mode, cubic_coeff_a, exclude_outside, antialias): the importer works them out as ONNX
defines them (a coordinate per output index, its neighbours clamped to the input, their
coefficients) into a matrix, as npusim's interpolate makes its interpolation matrices when
lowering. On the machine:
- nearest: a gather along the axis (each output copies one input element, exactly), or for
  whole-number scales of H and W of an NCHW tensor npusim's upsample (one DMA, no compute);
- linear and cubic: the axis moved last (a permute), a matrix product with the weight matrix
  (float32, or float64 for float64 data), moved back; tf_crop_and_resize's points outside the
  input then take extrapolation_value (a select with a known mask).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from .elementwise import narrow
from .registry import onnx_op
from .shape import axis_of, gather_axis

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output

    # A resampling kernel: (a source position's fraction, the scale) -> its taps (resize_op's modes)
    Coeffs = Callable[[float, float], NDArray[Any]]


def _nearest(mode: str) -> Coeffs:
    def coeffs(ratio: float, scale: float) -> NDArray[Any]:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], float)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], float)
        if mode == "floor":
            return np.array([1.0, 0.0])
        return np.array([0.0, 1.0])

    return coeffs


def _linear(antialias: int) -> Coeffs:
    def coeffs(ratio: float, scale: float) -> NDArray[Any]:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()

    return coeffs


def _cubic(a: float, antialias: int) -> Coeffs:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a if x < 2 else 0.0

    def coeffs(ratio: float, scale: float) -> NDArray[Any]:
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        c = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()

    return coeffs


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float,
                       roi: tuple[float, float] | None) -> tuple[NDArray[np.float64], NDArray[np.bool_] | None]:
    """(x_ori per output index, mask of the ones outside the input or None)."""
    y = np.arange(out_size, dtype=np.float64)
    out_w = scale * in_size
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_size) if out_w == 1 else y * (in_size - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        if roi is None:  # resize_op gives it in this mode
            raise ValueError("tf_crop_and_resize without roi")
        lo, hi = roi
        x = np.full(out_size, (hi - lo) * (in_size - 1) / 2) if out_w == 1 else y * (hi - lo) * (in_size - 1) / (out_w - 1)
        x = x + lo * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(mode)
    return x, outside


def axis_weights(in_size: int, out_size: int, scale: float, coeffs: Coeffs, ctm: str, exclude_outside: int,
                 roi: tuple[float, float] | None) -> tuple[NDArray[np.float64], NDArray[np.bool_] | None]:
    """The (out_size, in_size) matrix of one axis, and the outside mask (tf_crop_and_resize)."""
    x, outside = source_coordinates(ctm, out_size, in_size, scale, roi)
    base = np.floor(x).astype(np.int64)
    ratios = np.where(x == base, 1.0, x - base)
    taps = np.array([coeffs(float(r), scale) for r in ratios], np.float64)
    n = taps.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        taps = np.where((idx < 0) | (idx >= in_size), 0.0, taps)
        total = taps.sum(axis=1, keepdims=True)
        taps = taps / np.where(total == 0, 1.0, total)
    w = np.zeros((out_size, in_size))
    np.add.at(w, (np.repeat(np.arange(out_size), n), np.clip(idx, 0, in_size - 1).reshape(-1)), taps.reshape(-1))
    return w, outside


def resize(b: Builder, x: Tensor, sizes: list[int], scales: list[float], mode: str, ctm: str, nearest_mode: str, a: float, exclude: int,
           antialias: int, roi: list[float] | None, extrapolation: float) -> Tensor:
    """x resized to `sizes` (with `scales` per axis) along every axis that changes."""
    rank = len(x.shape)
    if mode == "nearest":
        coeffs = _nearest(nearest_mode)
        if antialias:
            raise b.reject("antialias", antialias, "not with mode nearest")
    elif mode == "linear":
        coeffs = _linear(antialias)
    elif mode == "cubic":
        coeffs = _cubic(a, antialias)
    else:
        raise b.reject("mode", mode, "nearest, linear or cubic")
    if ctm not in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"):
        raise b.reject("coordinate_transformation_mode", ctm)
    plans = []
    for axis in range(rank):
        axis_roi = None if roi is None else (roi[axis], roi[axis + rank])
        if (math.isclose(scales[axis], 1.0) and sizes[axis] == x.shape[axis]
                and (axis_roi is None or (math.isclose(axis_roi[0], 0) and math.isclose(axis_roi[1], 1)))):
            continue
        if sizes[axis] < 1:
            raise b.error(f"the output would be empty along axis {axis}")
        b.check_size((sizes[axis], x.shape[axis]), np.float64, f"the weights of axis {axis}")
        plans.append((axis, *axis_weights(x.shape[axis], sizes[axis], scales[axis], coeffs, ctm, exclude, axis_roi)))
    if mode == "nearest" and _repeats(x.shape, plans):
        return ops.upsample(x, sizes[2] // x.shape[2])
    float_x = dtypes.is_float(x.dtype)
    y = x if mode == "nearest" or x.dtype in ("float32", "float64") else ops.cast(x, out_dtype="float32")
    for axis, w, outside in plans:
        if mode == "nearest":
            y = gather_axis(b, y, w.argmax(axis=1), axis)
        else:
            y = _apply(b, y, w, axis)
        if outside is not None and outside.any():
            mask = b.const(outside.reshape([-1 if i == axis else 1 for i in range(rank)]))
            fill = b.full(extrapolation, y.dtype, rank)
            y = ops.condition_select(mask, fill, y)
    if mode != "nearest" and y.dtype != x.dtype:
        y = narrow(y, x.dtype) if float_x else b.cast(ops.clamp(y, *dtypes.int_range(x.dtype)), x.dtype)
    return y


def _apply(b: Builder, y: Tensor, w: NDArray[Any], axis: int) -> Tensor:
    """y times w along axis: the axis moved last, a matrix product, moved back."""
    rank = len(y.shape)
    order = [d for d in range(rank) if d != axis] + [axis]
    moved = ops.permute(y, order) if axis != rank - 1 else y
    rows = int(np.prod(moved.shape[:-1], dtype=np.int64))
    out = ops.matrix_mul(b.reshape(moved, (rows, moved.shape[-1])), b.const(w.T.astype(dtypes.np_dtype(y.dtype))))
    out = b.reshape(out, moved.shape[:-1] + (w.shape[0],))
    return ops.permute(out, [order.index(d) for d in range(rank)]) if axis != rank - 1 else out


def _repeats(shape: tuple[int, ...], plans: list[tuple[int, NDArray[np.float64], NDArray[np.bool_] | None]]) -> bool:
    """Whether the nearest resize repeats each element of H and W of an NCHW tensor s times
    (the same whole number s for both, nothing else changing): npusim's upsample."""
    if len(shape) != 4 or [p[0] for p in plans] != [2, 3] or any(p[2] is not None for p in plans):
        return False
    s = plans[0][1].shape[0] // shape[2]
    return s > 1 and all(p[1].shape[0] == s * shape[p[0]] and np.array_equal(p[1].argmax(axis=1), np.arange(p[1].shape[0]) // s)
                         for p in plans)


def out_sizes(b: Builder, shape: tuple[int, ...], scales: NDArray[Any] | None, sizes: NDArray[Any] | None, axes: list[int] | None,
              policy: str) -> tuple[list[int], list[float]]:
    """(sizes, scales) over every axis, as ONNX's Resize computes them."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [axis_of(b, a, rank) for a in axes]
    if sizes is not None:
        full = list(shape)
        for a, s in zip(axes, sizes):
            full[a] = int(s)
        factors = [full[i] / shape[i] for i in range(rank)]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise b.reject("keep_aspect_ratio_policy", policy)
            pick = min if policy == "not_larger" else max
            scale = pick(factors[a] for a in axes)
            factors = [scale if i in axes else 1.0 for i in range(rank)]
            full = [int(scale * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)]
        return full, factors
    if scales is None:  # resize_op gives scales or sizes
        raise ValueError("Resize without scales or sizes")
    factors = [1.0] * rank
    for a, s in zip(axes, scales):
        factors[a] = float(s)
    return [int(f * n) for f, n in zip(np.asarray(factors, np.float32).astype(np.float64), shape)], factors


def _optional(b: Builder, i: int, what: str) -> NDArray[Any] | None:
    """An optional input's known values (an empty tensor counts as absent)."""
    if not b.has(i):
        return None
    value = b.static(i, what).reshape(-1)
    return value if value.size else None


@onnx_op("Resize", static=(1, 2, 3))
def resize_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    shape = x.shape
    ctm = b.attr("coordinate_transformation_mode", "half_pixel")
    roi = _optional(b, 1, "roi") if ctm == "tf_crop_and_resize" else None
    scales, sizes = _optional(b, 2, "scales"), _optional(b, 3, "sizes")
    if scales is None and sizes is None:
        raise b.error("Resize needs scales or sizes")
    axes = b.attr("axes")
    full_sizes, factors = out_sizes(b, shape, None if scales is None else scales.astype(np.float32),
                                    None if sizes is None else sizes, axes, b.attr("keep_aspect_ratio_policy", "stretch"))
    if sizes is not None:
        factors = [float(f) for f in factors]
    else:
        factors = [float(np.float32(f)) for f in factors]
    full_roi = None
    if ctm == "tf_crop_and_resize":
        if roi is None:
            raise b.error("tf_crop_and_resize needs roi")
        rank = len(shape)
        if axes is not None:
            full_roi = [0.0] * rank + [1.0] * rank
            for k, a in enumerate(axes):
                full_roi[axis_of(b, a, rank)] = float(roi[k])
                full_roi[axis_of(b, a, rank) + rank] = float(roi[len(axes) + k])
        else:
            full_roi = [float(v) for v in roi]
    return [resize(b, x, full_sizes, factors, b.attr("mode", "nearest"), ctm, b.attr("nearest_mode", "round_prefer_floor"),
                   b.attr("cubic_coeff_a", -0.75), b.attr("exclude_outside", 0), b.attr("antialias", 0), full_roi,
                   float(b.attr("extrapolation_value", 0.0)))]


@onnx_op("Upsample", static=(1,))
def upsample(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    scales = [float(s) for s in b.static(1, "scales").reshape(-1)]
    sizes = [int(s * n) for s, n in zip(scales, x.shape)]
    mode = b.attr("mode", "nearest")
    if mode == "nearest" and not all(s.is_integer() for s in scales):
        raise b.error(f"nearest Upsample with scales {scales} that are not whole numbers is not supported")
    return [resize(b, x, sizes, scales, mode, "asymmetric", "floor", -0.75, 0, 0, None, 0.0)]
