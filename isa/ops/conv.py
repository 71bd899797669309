"""Convolutions of the BMLang seed (NN/Matrix Operator): conv, deconv, conv3d. Local ops, run
by the convolution template (isa/lower/templates/conv.py) as implicit GEMMs on the matrix unit, or, for a
depthwise convolution, by the depthwise template (isa/lower/templates/depthwise.py) as
multiply-accumulates on the vector unit.

    conv(tensor_input [N, IC, H, W], tensor_weight [OC, IC/groups, KH, KW], tensor_bias [1, OC, 1, 1],
         dh, dw, pad_h_t, pad_h_b, pad_w_l, pad_w_r, stride_h, stride_w, groups,
         scale, mode, left_zero_point, right_zero_point, output_zero_point, out_dtype)
    deconv: the same parameters; the weight is [IC, OC/groups, KH, KW]; a transposed
            convolution, output (in - 1) * stride - pads + dilation * (k - 1) + 1
    conv3d(tensor_input [N, IC, D, H, W], tensor_weight [OC, IC/groups, KD, KH, KW],
           tensor_bias [1, OC, 1, 1, 1] or [OC], groups, dilation[3], pad[6], stride[3])

Float inputs accumulate in float32. INT8/UINT8 inputs follow the seed's quantized modes
(isa/ops/quantized.py); deconv takes LowPrecisionSymmetric only, as the seed says. conv3d takes
conv's quantized modes too, beyond the seed (whose conv3d is float only): TPU-MLIR lowers a 3-d
convolution to INT8 for BM1684 as a tpu::Conv3DOp with an int8 filter, an int16 bias and a right
shift (sophgo/tpu-mlir, commit ca0304ab, lib/Conversion/TopToTpu/BM1684/Conv.cpp), which is
LowPrecisionSymmetric. Padding is with (raw) zeros.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Node, Tensor
from . import quantized
from .base import OpDef, Spec, TensorLike, apply_one, register
from .quantized import ZeroPointVector

if TYPE_CHECKING:
    from collections.abc import Callable

FLOAT = ("float32", "float16", "bfloat16")


class Conv(OpDef):
    kind = "local"
    template = "conv"
    templates = ("conv", "depthwise")
    variants = ("depthwise",)

    def __init__(self, name: str, spatial: int, transposed: bool, modes: tuple[str, ...]) -> None:
        self.name, self.spatial, self.transposed, self.modes = name, spatial, transposed, modes

    def variant(self, params: dict[str, Any]) -> str | None:
        return "depthwise" if params["depthwise"] else None

    def template_for(self, params: dict[str, Any]) -> str:
        """A depthwise convolution has a vector template of its own (isa/lower/templates/depthwise.py)."""
        return "depthwise" if params["depthwise"] else self.template

    # ---- shapes -----------------------------------------------------------------------------

    def channels(self, x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int) -> tuple[int, int, tuple[int, ...]]:
        """(in channels, out channels, kernel) of an input and weight shape."""
        if self.transposed:
            return w_shape[0], w_shape[1] * groups, w_shape[2:]
        return w_shape[1] * groups, w_shape[0], w_shape[2:]

    def out_spatial(self, x_shape: tuple[int, ...], kernel: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        pads, strides, dilations = params["pads"], params["strides"], params["dilations"]
        if self.transposed:
            return tuple((n - 1) * s - pb - pa + d * (k - 1) + 1
                         for n, k, s, d, (pb, pa) in zip(x_shape[2:], kernel, strides, dilations, pads))
        return tuple((n + pb + pa - d * (k - 1) - 1) // s + 1
                     for n, k, s, d, (pb, pa) in zip(x_shape[2:], kernel, strides, dilations, pads))

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (2, 3):
            raise ShapeError(f"{self.name}: takes the input, the weight and an optional bias, got {len(ins)} tensors")
        x, w = ins[0], ins[1]
        rank = self.spatial + 2
        if len(x.shape) != rank or len(w.shape) != rank:
            raise ShapeError(f"{self.name}: input {x.shape} and weight {w.shape} must both have {rank} dimensions")
        groups = params["groups"]
        ic, oc, kernel = self.channels(x.shape, w.shape, groups)
        if x.shape[1] != ic or ic % groups or oc % groups:
            raise ShapeError(f"{self.name}: input has {x.shape[1]} channels, weight {w.shape} with "
                             f"groups {groups} expects {ic} (in) and {oc} (out), both divisible by groups")
        spatial = self.out_spatial(x.shape, kernel, params)
        if min(spatial) < 1:
            raise ShapeError(f"{self.name}: input {x.shape} with kernel {tuple(kernel)}, pads "
                             f"{params['pads']} and strides {params['strides']} gives output size {spatial}")
        if len(ins) == 3 and ins[2].shape not in ((1, oc) + (1,) * self.spatial, (oc,)):
            raise ShapeError(f"{self.name}: bias must have shape {(1, oc) + (1,) * self.spatial}, got {ins[2].shape}")
        return [Spec((x.shape[0], oc) + spatial, self._out_dtype(ins, params))]

    def _out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        x = ins[0]
        if x.dtype in FLOAT:
            for t, what in zip(ins[1:], ("weight", "bias")):
                if t.dtype != x.dtype:
                    raise UnsupportedError(f"{self.name}: {what} is {t.dtype} but the input is {x.dtype}; float operands must match")
            if params.get("out_dtype") not in (None, x.dtype):
                raise UnsupportedError(f"{self.name}: float operands give a {x.dtype} result, out_dtype {params['out_dtype']} asked")
            return x.dtype
        if not self.modes:
            raise UnsupportedError(f"{self.name}: takes {', '.join(FLOAT)} inputs only (the seed gives no quantized mode), got {x.dtype}")
        if params["mode"] not in self.modes:
            raise UnsupportedError(f"{self.name}: quantized mode {params['mode']!r} is not "
                                   f"available (the seed gives {', '.join(self.modes) or 'none'})")
        return quantized.out_dtype(self.name, ins, params)

    def acc_dtype(self, x_dtype: str, float_acc: bool = False) -> str:
        return "float32" if x_dtype in FLOAT or float_acc else "int32"

    def asymmetric(self, params: dict[str, Any]) -> bool:
        return params["mode"] == "HighPrecisionAsymmetric"

    def floor_shift(self, params: dict[str, Any]) -> bool:
        """conv's HighPrecisionAsymmetric pseudo-code takes floor(log2(1/scale)); every other ceil."""
        return self.asymmetric(params)

    # ---- reference --------------------------------------------------------------------------

    def products(self, x: np.ndarray, w: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        """The exact convolution of x and w (floats in float64, integers in int64), loop by loop."""
        return convolve(x, w, params["groups"], params["strides"], params["dilations"], params["pads"], self.transposed)

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, w = arrays[0], arrays[1]
        bias = arrays[2] if len(arrays) == 3 else None
        out = self.infer([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)[0]
        if bias is not None:
            bias = bias.reshape((1, -1) + (1,) * self.spatial)
        if out.dtype in FLOAT:
            acc = self.products(x.astype(np.float32), w.astype(np.float32), params)
            acc = acc.astype(np.float32) + (0 if bias is None else bias.astype(np.float32))
            return [acc.astype(dtypes.np_dtype(out.dtype))]
        zl, zr = params["left_zero_point"], params["right_zero_point"]
        if self.float_compute(params, dtypes.of_array(x), compute):
            exact = self.products(x.astype(np.int64), w.astype(np.int64) - zr, params) - zl * self._window_sums(w, params, zr)
            return [quantized.requantize_float(exact, bias, params, out.dtype)]
        acc = self.products(x.astype(np.int64), w.astype(np.int64), params)
        if not self.asymmetric(params):
            return [quantized.requantize(acc, bias, params, out.dtype)]
        folded = (0 if bias is None else bias.astype(np.int64)) - zl * self._window_sums(w, params, zr)
        acc_zp = zr * self.products(x.astype(np.int64), np.ones_like(w, np.int64), params)
        return [quantized.requantize(acc, dtypes.convert(folded, "int32"), params, out.dtype, acc_zp, floor=self.floor_shift(params))]

    def _window_sums(self, w: np.ndarray, params: dict[str, Any], zr: np.ndarray | int) -> np.ndarray:
        """sum over each output channel's input channels and kernel of (w - zr), as [1, OC, 1...]."""
        w = w.astype(np.int64) - zr
        if self.transposed:  # [IC, OC/g, k...] -> per output channel
            g = params["groups"]
            w = w.reshape((g, w.shape[0] // g) + w.shape[1:]).sum(axis=(1,) + tuple(range(3, w.ndim + 1)))
            return w.reshape((1, -1) + (1,) * self.spatial)
        return w.sum(axis=tuple(range(1, w.ndim))).reshape((1, -1) + (1,) * self.spatial)

    def float_compute(self, params: dict[str, Any], x_dtype: str, compute: dict[str, str] | None) -> bool:
        """BM1684 computes a depthwise convolution in FLOAT32 in the high-precision modes (the
        seed); a chip says so by computing the row's int8/uint8 in float32."""
        return params["mode"] != "LowPrecisionSymmetric" and dtypes.is_float((compute or {}).get(x_dtype, x_dtype))


def convolve(x: np.ndarray, w: np.ndarray, groups: int, strides: Sequence[int], dilations: Sequence[int],
             pads: Sequence[tuple[int, int]], transposed: bool) -> np.ndarray:
    """Direct convolution: for each kernel offset, the strided input slice against the weight."""
    wide = np.float64 if x.dtype.kind == "f" else np.int64
    x, w = x.astype(wide), w.astype(wide)
    n, ic = x.shape[:2]
    kernel = w.shape[2:]
    if transposed:  # scatter every input element through the kernel
        icg, ocg = ic // groups, w.shape[1]
        full = tuple((s - 1) * st + d * (k - 1) + 1 for s, st, d, k in zip(x.shape[2:], strides, dilations, kernel))
        out = np.zeros((n, groups, ocg) + full, wide)
        xg = x.reshape((n, groups, icg) + x.shape[2:])
        wg = w.reshape((groups, icg, ocg) + kernel)
        for k in np.ndindex(*kernel):
            part = np.einsum("ngi...,gio->ngo...", xg, wg[(slice(None), slice(None), slice(None)) + k])
            where = tuple(slice(kk * d, kk * d + (s - 1) * st + 1, st) for kk, d, s, st in zip(k, dilations, x.shape[2:], strides))
            out[(slice(None),) * 3 + where] += part
        crop = tuple(slice(pb, f - pa) for (pb, pa), f in zip(pads, full))
        return out[(slice(None),) * 3 + crop].reshape((n, groups * ocg) + tuple(f - pb - pa for (pb, pa), f in zip(pads, full)))
    ocg, icg = w.shape[0] // groups, ic // groups
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    out_sp = tuple((s - d * (k - 1) - 1) // st + 1 for s, d, k, st in zip(xp.shape[2:], dilations, kernel, strides))
    out = np.zeros((n, groups, ocg) + out_sp, wide)
    xg = xp.reshape((n, groups, icg) + xp.shape[2:])
    wg = w.reshape((groups, ocg, icg) + kernel)
    for k in np.ndindex(*kernel):
        window = tuple(slice(kk * d, kk * d + (o - 1) * st + 1, st) for kk, d, o, st in zip(k, dilations, out_sp, strides))
        out += np.einsum("ngi...,goi->ngo...", xg[(slice(None),) * 3 + window], wg[(slice(None),) * 3 + k])
    return out.reshape((n, groups * ocg) + out_sp)


# ---- op functions ---------------------------------------------------------------------------

def _params(op: Conv, x: Tensor, w: Tensor, groups: int, dilations: tuple[int, ...], pads: tuple[tuple[int, int], ...],
            strides: tuple[int, ...], quant: dict[str, Any], out_dtype: str | None) -> dict[str, Any]:
    for what, values in (("dilation", dilations), ("stride", strides)):
        if any(v < 1 for v in values):
            raise ShapeError(f"{op.name}: {what} {tuple(values)} must be >= 1")
    if any(p < 0 for pair in pads for p in pair):
        raise ShapeError(f"{op.name}: pads {tuple(pads)} must be >= 0")
    if groups < 1:
        raise ShapeError(f"{op.name}: groups {groups} must be >= 1")
    ic = x.shape[1] if isinstance(x, Tensor) else None
    oc = (w.shape[1] * groups if op.transposed else w.shape[0]) if isinstance(w, Tensor) else None
    params = {
        "groups": groups, "dilations": tuple(dilations), "pads": tuple(tuple(p) for p in pads), "strides": tuple(strides),
        "depthwise": groups > 1 and groups == ic == oc, "out_dtype": out_dtype,
    }
    params.update(quant)
    if params["mode"] == "HighPrecisionAsymmetric" and isinstance(w, Tensor) and w.name not in w.graph.constants:
        raise UnsupportedError(f"{op.name}: HighPrecisionAsymmetric folds zero points "
                               "offline, so the weight must be a constant (COEFF_TENSOR)")
    return params


def _quant(scale: float, mode: str, left_zero_point: int, right_zero_point: int, output_zero_point: int) -> dict[str, str | int | float]:
    return {"scale": float(scale), "mode": mode, "left_zero_point": left_zero_point,
            "right_zero_point": right_zero_point, "output_zero_point": output_zero_point}


CONV = register(Conv("conv", 2, False, tuple(quantized.MODES)))
DECONV = register(Conv("deconv", 2, True, ("LowPrecisionSymmetric",)))
CONV3D = register(Conv("conv3d", 3, False, tuple(quantized.MODES)))


def _conv2d(op: Conv, doc: str) -> Callable[..., Tensor]:
    def fn(tensor_input: Tensor, tensor_weight: Tensor, tensor_bias: Tensor | None = None, dh: int = 1, dw: int = 1, pad_h_t: int = 0,
           pad_h_b: int = 0, pad_w_l: int = 0, pad_w_r: int = 0, stride_h: int = 1, stride_w: int = 1, groups: int = 1, scale: float = 1.0,
           mode: str = "LowPrecisionSymmetric", left_zero_point: int = 0, right_zero_point: int = 0, output_zero_point: int = 0,
           out_dtype: str | None = None, name: str | None = None) -> Tensor:
        quant = _quant(scale, mode, left_zero_point, right_zero_point, output_zero_point)
        params = _params(op, tensor_input, tensor_weight, groups, (dh, dw), ((pad_h_t, pad_h_b), (pad_w_l, pad_w_r)),
                         (stride_h, stride_w), quant, out_dtype)
        operands = [tensor_input, tensor_weight] + ([tensor_bias] if tensor_bias is not None else [])
        return apply_one(op, operands, params, name)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = doc
    return fn


conv = _conv2d(CONV, "2-d convolution (NCHW input, [OC, IC/groups, KH, KW] weight), float or quantized.")
deconv = _conv2d(DECONV, "2-d transposed convolution (NCHW input, [IC, OC/groups, KH, KW] weight).")


def conv3d(tensor_input: Tensor, tensor_weight: Tensor, tensor_bias: Tensor | None = None, groups: int = 1,
           dilation: tuple[int, int, int] = (1, 1, 1), pad: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0),
           stride: tuple[int, int, int] = (1, 1, 1), out_dtype: str | None = None, scale: float = 1.0,
           mode: str = "LowPrecisionSymmetric", left_zero_point: int = 0, right_zero_point: int = 0, output_zero_point: int = 0,
           name: str | None = None) -> Tensor:
    """3-d convolution (NCDHW), float or quantized as conv. pad is the seed's order: d_bottom,
    d_top, h_bottom, h_top, w_bottom, w_top; bottom is the end of a dimension and top its start,
    as conv's pad_h_t is."""
    pads = tuple((pad[2 * i + 1], pad[2 * i]) for i in range(3))
    quant = _quant(scale, mode, left_zero_point, right_zero_point, output_zero_point)
    params = _params(CONV3D, tensor_input, tensor_weight, groups, dilation, pads, stride, quant, out_dtype)
    operands = [tensor_input, tensor_weight] + ([tensor_bias] if tensor_bias is not None else [])
    return apply_one(CONV3D, operands, params, name)


# ---- the integer family (NN/Matrix Int Operator): conv_v2, conv3d_v2, deconv_v2, deconv3d_v2 ----

class ConvV2(Conv):
    """output = (input - izp) (*) (weight - kzp) + bias, INT8/UINT8 operands, INT32/UINT32 result.

    izp is one value or one per input channel (izp_vec), kzp one value or one per output
    channel (kzp_vec): the seed's `for c in channel` gives the per-channel values, and these are
    the channels each zero point belongs to. The convolution pads (input - izp) with zeros, so a
    padded position contributes nothing, as quantized frameworks pad with the zero point."""

    modes = ()

    def __init__(self, name: str, spatial: int, transposed: bool) -> None:
        super().__init__(name, spatial, transposed, ())

    def checked_inputs(self, node: Node) -> int:
        return 2 + node.params["has_bias"]

    def _zero_point(self, arrays: list[np.ndarray], params: dict[str, Any], key: str, axis_len: int) -> np.ndarray:
        """The zero point `key` as an array broadcasting over channels, from its constant input or value."""
        if params[key] == "vector":
            return arrays[params[key + "_input"]].astype(np.int64).reshape(axis_len)
        return np.full(axis_len, params[key], np.int64)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        data = ins[: 2 + params["has_bias"]]
        out = super().infer(data, dict(params, mode="v2"))
        x, w = ins[0], ins[1]
        ic, oc, _ = self.channels(x.shape, w.shape, params["groups"])
        for key, n in (("izp", ic), ("kzp", oc)):
            if params[key] == "vector" and ins[params[key + "_input"]].shape != (n,):
                raise ShapeError(f"{self.name}: {key}_vec needs {n} values, got {ins[params[key + '_input']].shape[0]}")
        return out

    def _out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        for t, what in zip(ins, ("input", "weight")):
            if t.dtype not in ("int8", "uint8"):
                raise UnsupportedError(f"{self.name}: the {what} is {t.dtype}; {self.name} takes int8 or uint8")
        if len(ins) == 3 and ins[2].dtype not in ("int32", "uint32"):
            raise UnsupportedError(f"{self.name}: the bias is {ins[2].dtype}; it must be int32 or uint32")
        out = params.get("out_dtype") or "int32"
        if out not in ("int32", "uint32"):
            raise UnsupportedError(f"{self.name}: the output must be int32 or uint32, got {out}")
        return out

    def acc_dtype(self, x_dtype: str, float_acc: bool = False) -> str:
        return "int32"

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, w = arrays[0].astype(np.int64), arrays[1].astype(np.int64)
        ic, oc, _kernel = self.channels(x.shape, w.shape, params["groups"])
        izp = self._zero_point(arrays, params, "izp", ic).reshape((1, ic) + (1,) * self.spatial)
        kzp = self._zero_point(arrays, params, "kzp", oc)
        if self.transposed:  # [IC, OC/g, k...]: kzp by output channel
            g = params["groups"]
            kzp = kzp.reshape(g, 1, oc // g, *(1,) * self.spatial).repeat(ic // g, axis=1).reshape((ic, oc // g) + (1,) * self.spatial)
        else:
            kzp = kzp.reshape((oc,) + (1,) * (self.spatial + 1))
        acc = self.products(x - izp, w - kzp, params)
        if params["has_bias"]:
            acc = acc + arrays[2].astype(np.int64).reshape((1, oc) + (1,) * self.spatial)
        out = self._out_dtype([Spec(a.shape, dtypes.of_array(a)) for a in arrays[: 2 + params["has_bias"]]], params)
        return [dtypes.convert(acc, out)]


def _v2(op: ConvV2, tensor_input: Tensor, tensor_weight: Tensor, tensor_bias: Tensor | None, groups: int, dilations: tuple[int, ...],
        pads: tuple[tuple[int, int], ...], strides: tuple[int, ...], has_bias: bool, is_izp_const: bool, izp_val: int,
        izp_vec: ZeroPointVector | None, is_kzp_const: bool, kzp_val: int, kzp_vec: ZeroPointVector | None, out_dtype: str | None,
        name: str | None) -> Tensor:
    if bool(has_bias) != (tensor_bias is not None):
        raise ShapeError(f"{op.name}: has_bias is {has_bias} but tensor_bias is {'missing' if tensor_bias is None else 'given'}")
    params = _params(op, tensor_input, tensor_weight, groups, dilations, pads, strides, {"mode": "v2"}, out_dtype)
    params["has_bias"] = int(tensor_bias is not None)
    operands: list[TensorLike] = [tensor_input, tensor_weight]
    if tensor_bias is not None:
        operands.append(tensor_bias)
    points: dict[str, quantized.ZeroPoint] = {"izp": (is_izp_const, izp_val, izp_vec), "kzp": (is_kzp_const, kzp_val, kzp_vec)}
    quantized.zero_point_operands(op.name, tensor_input.graph, operands, params, points, name)
    return apply_one(op, operands, params, name)


CONV_V2 = register(ConvV2("conv_v2", 2, False))
CONV3D_V2 = register(ConvV2("conv3d_v2", 3, False))
DECONV_V2 = register(ConvV2("deconv_v2", 2, True))
DECONV3D_V2 = register(ConvV2("deconv3d_v2", 3, True))


def _v2_2d(op: ConvV2) -> Callable[..., Tensor]:
    def fn(tensor_input: Tensor, tensor_weight: Tensor, tensor_bias: Tensor | None = None, dh: int = 1, dw: int = 1, pad_h_t: int = 0,
           pad_h_b: int = 0, pad_w_l: int = 0, pad_w_r: int = 0, stride_h: int = 1, stride_w: int = 1, groups: int = 1,
           has_bias: bool | None = None, is_izp_const: bool = True, izp_val: int = 0, izp_vec: ZeroPointVector | None = None,
           is_kzp_const: bool = True, kzp_val: int = 0, kzp_vec: ZeroPointVector | None = None, out_dtype: str | None = None,
           name: str | None = None) -> Tensor:
        has = tensor_bias is not None if has_bias is None else has_bias
        return _v2(op, tensor_input, tensor_weight, tensor_bias, groups, (dh, dw), ((pad_h_t, pad_h_b), (pad_w_l, pad_w_r)),
                   (stride_h, stride_w), has, is_izp_const, izp_val, izp_vec, is_kzp_const, kzp_val, kzp_vec, out_dtype, name)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = f"{op.name}: (input - izp) {'transposed ' if op.transposed else ''}conv (weight - kzp) + bias, INT32 result (ConvV2Param)."
    return fn


def _v2_3d(op: ConvV2) -> Callable[..., Tensor]:
    def fn(tensor_input: Tensor, tensor_weight: Tensor, tensor_bias: Tensor | None = None, dt: int = 1, dh: int = 1, dw: int = 1,
           pad_t_0: int = 0, pad_t_1: int = 0, pad_h_0: int = 0, pad_h_1: int = 0, pad_w_0: int = 0, pad_w_1: int = 0, stride_t: int = 1,
           stride_h: int = 1, stride_w: int = 1, groups: int = 1, has_bias: bool | None = None, is_izp_const: bool = True, izp_val: int = 0,
           izp_vec: ZeroPointVector | None = None, is_kzp_const: bool = True, kzp_val: int = 0, kzp_vec: ZeroPointVector | None = None,
           out_dtype: str | None = None, name: str | None = None) -> Tensor:
        has = tensor_bias is not None if has_bias is None else has_bias
        return _v2(op, tensor_input, tensor_weight, tensor_bias, groups, (dt, dh, dw),
                   ((pad_t_0, pad_t_1), (pad_h_0, pad_h_1), (pad_w_0, pad_w_1)), (stride_t, stride_h, stride_w), has,
                   is_izp_const, izp_val, izp_vec, is_kzp_const, kzp_val, kzp_vec, out_dtype, name)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = f"{op.name}: the 3-d {op.name[:-3]} of the integer family (Conv3DV2Param; pad_x_0 is the start)."
    return fn


conv_v2 = _v2_2d(CONV_V2)
deconv_v2 = _v2_2d(DECONV_V2)
conv3d_v2 = _v2_3d(CONV3D_V2)
deconv3d_v2 = _v2_3d(DECONV3D_V2)
