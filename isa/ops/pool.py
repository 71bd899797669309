"""Pooling of the BMLang seed (Up/Down Scaling Operator): pool, pool_int, pool3d_int. Local ops,
run by the pooling template (isa/lower/templates/pool.py): a window reduction on the vector unit.

    pool(tensor_i, stride_h, stride_w, kernel_h, kernel_w, pad_h=0, pad_w=0, pad_h_offset=0,
         pad_w_offset=0, pooling_type="MAX", is_global_pooling=False, is_ceil_mode=False,
         is_ave_count_zero_pad=True, ensure_pool_image=False)
         top/left padding pad_h/pad_w, bottom/right pad_h + pad_h_offset, pad_w + pad_w_offset
    pool_int(tensor_i, stride_h, stride_w, kernel_h, kernel_w, pad_h_t, pad_h_b, pad_w_l, pad_w_r,
             is_avg_pooling, out_ceil_mode, quant_mode, scale, rshift)
    pool3d_int: the same over (t, h, w)

Window semantics (Caffe's, which BMLang follows): the window of output o starts at o * stride -
pad_before. MAX takes the largest real input in it. AVE divides the sum of the real inputs by
the window's size clipped to the padded input when is_ave_count_zero_pad (padding counts as
zeros), else by the number of real inputs. In ceil mode a last window may hang past the padding;
with ensure_pool_image a window that starts past the input is dropped (Caffe's rule). A
window with no element to count averages to 0/0: NaN, or 0 in an integer result.
pool_int's average is sum / count rounded half away from zero (quant_mode 1) or
(sum * scale) >> rshift rounded half up (quant_mode 2), over the real inputs. An integer `pool`
average rounds half away from zero too. The seed's optional tensor_mask output is not produced.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from .base import OpDef, Spec, apply_one, register

if TYPE_CHECKING:
    from isa.graph import Tensor


class Pool(OpDef):
    kind = "local"
    template = "pool"

    def __init__(self, name: str, spatial: int, integer: bool) -> None:
        self.name, self.spatial, self.integer = name, spatial, integer

    def out_spatial(self, sizes: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        out = []
        for n, k, s, (pb, pa) in zip(sizes, params["kernel"], params["strides"], params["pads"]):
            span = n + pb + pa - k
            if span < 0:
                raise ShapeError(f"{self.name}: kernel {k} is larger than the padded input {n + pb + pa}")
            o = (math.ceil(span / s) if params["ceil"] else span // s) + 1
            if params["ceil"] and params["ensure_image"] and (o - 1) * s >= n + pb:
                o -= 1
            out.append(o)
        return tuple(out)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 1:
            raise ShapeError(f"{self.name}: takes one tensor, got {len(ins)}")
        x = ins[0]
        if len(x.shape) != self.spatial + 2:
            raise ShapeError(f"{self.name}: input {x.shape} must have {self.spatial + 2} dimensions (N, C, spatial...)")
        allowed = ("int8", "uint8", "int16") if self.integer else ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16")
        if x.dtype not in allowed:
            raise UnsupportedError(f"{self.name}: dtype {x.dtype} is not supported (supported: {', '.join(allowed)})")
        if params.get("out_dtype") not in (None, x.dtype):
            raise UnsupportedError(f"{self.name}: the output has the input's dtype {x.dtype}, out_dtype {params['out_dtype']} asked")
        return [Spec(x.shape[:2] + self.out_spatial(x.shape[2:], params), x.dtype)]

    # ---- the seed's window rule, for the reference -------------------------------------------

    def windows(self, sizes: tuple[int, ...], params: dict[str, Any]) -> list[list[tuple[slice, int]]]:
        """Per output position: (slices of the real input, count dividing an average)."""
        axes = []
        for n, k, s, (pb, pa), o in zip(sizes, params["kernel"], params["strides"], params["pads"], self.out_spatial(sizes, params)):
            per = []
            for i in range(o):
                start = i * s - pb
                end = min(start + k, n + pa)
                lo, hi = max(start, 0), min(end, n)
                per.append((slice(lo, hi), (end - start) if params["count_pad"] else max(hi - lo, 0)))
            axes.append(per)
        return axes

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        axes = self.windows(x.shape[2:], params)
        floats = dtypes.is_float(dtypes.of_array(x))
        wide = x.astype(np.float32 if floats else np.int64)
        out = np.zeros(x.shape[:2] + tuple(len(a) for a in axes), wide.dtype)
        for index in np.ndindex(*out.shape[2:]):
            picks = [axes[d][i] for d, i in enumerate(index)]
            window = wide[(slice(None), slice(None)) + tuple(sl for sl, _ in picks)]
            count = int(np.prod([c for _, c in picks]))
            reduce_axes = tuple(range(2, 2 + self.spatial))
            if params["method"] == "MAX":
                out[(slice(None), slice(None)) + index] = window.max(axis=reduce_axes)
            else:
                total = window.sum(axis=reduce_axes)
                out[(slice(None), slice(None)) + index] = self._average(total, count, params, floats)
        return [dtypes.convert(out, dtypes.of_array(x))]

    @staticmethod
    def _average(total: np.ndarray, count: int, params: dict[str, Any], floats: bool) -> np.ndarray:
        if params.get("quant_mode") == 2:
            return (total * params["scale"] + (1 << (params["rshift"] - 1) if params["rshift"] > 0 else 0)) >> params["rshift"]
        with np.errstate(invalid="ignore"):  # an empty window's average: 0/0
            mean = total.astype(np.float32) / np.float32(count)
        return mean if floats else dtypes.round_half_away(mean).astype(np.int64)


POOL = register(Pool("pool", 2, integer=False))
POOL_INT = register(Pool("pool_int", 2, integer=True))
POOL3D_INT = register(Pool("pool3d_int", 3, integer=True))


def _check(op: str, kernel: tuple[int, ...], strides: tuple[int, ...], pads: tuple[tuple[int, int], ...]) -> None:
    if any(k < 1 for k in kernel) or any(s < 1 for s in strides):
        raise ShapeError(f"{op}: kernel {tuple(kernel)} and strides {tuple(strides)} must be >= 1")
    if any(p < 0 for pair in pads for p in pair):
        raise ShapeError(f"{op}: pads {tuple(pads)} must be >= 0")


def pool(tensor_i: Tensor, stride_h: int = 1, stride_w: int = 1, kernel_h: int = 1, kernel_w: int = 1, pad_h: int = 0, pad_w: int = 0,
         pad_h_offset: int = 0, pad_w_offset: int = 0,
         pooling_type: str = "MAX", is_global_pooling: bool = False, is_ceil_mode: bool = False, is_ave_count_zero_pad: bool = True,
         ensure_pool_image: bool = False, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Max or average pooling over H and W (see the module docstring)."""
    method = str(pooling_type).upper()
    if method not in ("MAX", "AVE"):
        raise UnsupportedError(f"pool: unknown pooling_type {pooling_type!r}; known: MAX, AVE")
    if is_global_pooling:
        kernel_h, kernel_w = tensor_i.shape[2], tensor_i.shape[3]
        stride_h = stride_w = 1
        pad_h = pad_w = pad_h_offset = pad_w_offset = 0
    pads = ((pad_h, pad_h + pad_h_offset), (pad_w, pad_w + pad_w_offset))
    _check("pool", (kernel_h, kernel_w), (stride_h, stride_w), pads)
    params = {"kernel": (kernel_h, kernel_w), "strides": (stride_h, stride_w), "pads": pads, "method": method,
              "ceil": bool(is_ceil_mode), "count_pad": bool(is_ave_count_zero_pad), "ensure_image": bool(ensure_pool_image),
              "out_dtype": out_dtype}
    return apply_one(POOL, [tensor_i], params, name)


def _int_params(op: str, kernel: tuple[int, ...], strides: tuple[int, ...], pads: tuple[tuple[int, int], ...], is_avg_pooling: bool,
                out_ceil_mode: int, quant_mode: int, scale: int, rshift: int, out_dtype: str | None) -> dict[str, Any]:
    _check(op, kernel, strides, pads)
    if is_avg_pooling and quant_mode not in (1, 2):
        raise UnsupportedError(f"{op}: quant_mode {quant_mode!r} must be 1 (divide) or 2 (scale and shift)")
    if is_avg_pooling and quant_mode == 2 and not 0 <= rshift <= 31:
        raise UnsupportedError(f"{op}: rshift {rshift} must be in [0, 31]")
    return {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(pads), "method": "AVE" if is_avg_pooling else "MAX",
            "ceil": bool(out_ceil_mode), "count_pad": False, "ensure_image": False, "quant_mode": quant_mode if is_avg_pooling else 0,
            "scale": int(scale), "rshift": int(rshift), "out_dtype": out_dtype}


def pool_int(tensor_i: Tensor, stride_h: int = 1, stride_w: int = 1, pad_h_t: int = 0, pad_h_b: int = 0, pad_w_l: int = 0, pad_w_r: int = 0,
             kernel_h: int = 1, kernel_w: int = 1, is_avg_pooling: bool = False, out_ceil_mode: int = 0, quant_mode: int = 1,
             scale: int = 1, rshift: int = 0, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Integer 2-d pooling: max, or an average in quant_mode 1 or 2 (see the module docstring)."""
    params = _int_params("pool_int", (kernel_h, kernel_w), (stride_h, stride_w), ((pad_h_t, pad_h_b), (pad_w_l, pad_w_r)),
                         is_avg_pooling, out_ceil_mode, quant_mode, scale, rshift, out_dtype)
    return apply_one(POOL_INT, [tensor_i], params, name)


def pool3d_int(tensor_i: Tensor, stride_t: int = 1, stride_h: int = 1, stride_w: int = 1, pad_t_0: int = 0, pad_t_1: int = 0,
               pad_h_0: int = 0, pad_h_1: int = 0, pad_w_0: int = 0, pad_w_1: int = 0, kernel_t: int = 1, kernel_h: int = 1,
               kernel_w: int = 1, is_avg_pooling: bool = False, out_ceil_mode: int = 0, quant_mode: int = 1, scale: int = 1,
               rshift: int = 0, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Integer 3-d pooling over (t, h, w)."""
    params = _int_params("pool3d_int", (kernel_t, kernel_h, kernel_w), (stride_t, stride_h, stride_w),
                         ((pad_t_0, pad_t_1), (pad_h_0, pad_h_1), (pad_w_0, pad_w_1)),
                         is_avg_pooling, out_ceil_mode, quant_mode, scale, rshift, out_dtype)
    return apply_one(POOL3D_INT, [tensor_i], params, name)
