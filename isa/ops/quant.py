"""Quantization (the seed's Quant Operator section): requant_fp32_to_int, requant_int32 and
dequant_int_to_fp32, per tensor or per channel, exactly as the seed's formulas:

requant_fp32_to_int   mode 0: saturate(int(round(input * scale)) + offset)
                      mode 1: saturate(int(round(float(input) * scale + offset)))
requant_int32         mode 0: v = shift > 0 ? input << shift : input
                              v = saturate_int32((v * multiplier) >> 31)      >> rounds half up
                              v = shift < 0 ? v >> -shift : v                  >> rounds half away from zero
                              saturate(v + offset)
                      mode 1: v = saturate_int32((input * multiplier) >> 31)   half up
                              saturate((v >> -shift) + offset)                  half away from zero
                      mode 2: v = input * multiplier, then v << shift or v >> -shift (half up)
                              saturate(v + offset)
dequant_int_to_fp32   mode 0: (input - offset) * scale, the integer offset subtracted exactly
                      mode 1: (float(input) - offset_fp) * scale, in float32

dequant_int_to_fp32 takes requant_fp32_to_int's parameter struct (the seed gives both one), so its
`mode` picks the integer offset (offset_val, offset_vec) or the float one (offset_fp_val, offset_fp_vec)
as it does for requant_fp32_to_int.

round() is C's (halves away from zero); float arithmetic is float32. The seed's text writes
mode 1 of requant_int32 as `output >> -shift + offset`; the shift is meant to come first. Mode
2 keeps v as INT32, as modes 0 and 1 say they do. A per-channel value is a vector along
dimension 1 (C of NCHW); it travels to the machine as a constant tensor of shape (1, C, 1, ...).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Node, Tensor
from .base import Spec, apply_one, register
from .elementwise import Elementwise, In, Step, Tmp

F32, I32 = "float32", "int32"


class Quant(Elementwise):
    """A quantization op: tensor_i plus the per-channel constants its mode needs (`vectors`)."""

    def __init__(self, name: str, modes: tuple[int, ...]) -> None:
        super().__init__(name, None, None, ("tensor_i",))
        self.modes = modes
        self.variants = tuple(f"mode{m}" for m in modes)

    def variant(self, params: dict[str, Any]) -> str:
        return f"mode{params['mode']}"

    def checked_inputs(self, node: Node) -> int:
        return 1

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if params["mode"] not in self.modes:
            raise UnsupportedError(f"{self.name}: mode {params['mode']!r} is not one of {', '.join(map(str, self.modes))}")
        x = ins[0]
        for s in ins[1:]:
            if len(x.shape) < 2 or s.shape != (1, x.shape[1]) + (1,) * (len(x.shape) - 2):
                raise ShapeError(f"{self.name}: a per-channel vector needs "
                                 f"{x.shape[1] if len(x.shape) > 1 else '?'} entries along dimension 1 of {x.shape}")
        return [Spec(x.shape, dtypes.check(params["out_dtype"], f"{self.name} out_dtype"))]

    def operand(self, params: dict[str, Any], key: str) -> In | float:
        """The step operand for param `key`: a number, or In(k) for a per-channel vector."""
        value = params[key]
        return In(1 + params["vectors"].index(key)) if isinstance(value, list) else value

    def per_channel(self, x: np.ndarray, params: dict[str, Any], key: str) -> np.ndarray:
        """params[key] as an array broadcasting along dimension 1 of x (reference side)."""
        value = np.asarray(params[key])
        return value.reshape((1, -1) + (1,) * (x.ndim - 2)) if value.ndim else value


def _vector_inputs(x: Tensor, params: dict[str, Any], derived: dict[str, tuple[float | list[float], str]]) -> list[Tensor]:
    """Constant tensors for the per-channel values `derived` names: {key: (values, dtype)}."""
    if not isinstance(x, Tensor):
        raise GraphError(f"expected a Tensor, got {type(x).__name__}")
    tensors: list[Tensor] = []
    for key, (values, dtype) in derived.items():
        if isinstance(values, list):
            shape = (1, len(values)) + (1,) * (len(x.shape) - 2)
            tensors.append(x.graph.constant(f"{x.name}_{key}{len(x.graph.constants)}", np.asarray(values).reshape(shape), dtype))
            params["vectors"].append(key)
    return tensors


PerChannel = Sequence[float] | np.ndarray  # one value per channel (the *_vec arguments)


def _pick(is_pc: bool, value: float, vector: PerChannel | None, what: str) -> float | list[float]:
    if not is_pc:
        return value
    if vector is None or len(vector) == 0:
        raise UnsupportedError(f"{what}: per channel is set but its vector is empty")
    return list(vector)


# ---- requant_fp32_to_int --------------------------------------------------------------------

class RequantFp32(Quant):
    def __init__(self) -> None:
        super().__init__("requant_fp32_to_int", (0, 1))

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [F32, I32] if params["mode"] == 0 else [F32]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        scale, offset = self.operand(params, "scale"), self.operand(params, "offset")
        if params["mode"] == 0:
            return [
                Step("mul", (In(0), scale), Tmp(0), cdt=F32),
                Step("round", (Tmp(0),), Tmp(1), cdt=F32),
                Step("add", (Tmp(1), offset), cdt="int64"),
            ]
        return [Step("mul_add", (In(0), scale, offset), Tmp(0), cdt=F32), Step("round", (Tmp(0),), cdt=F32)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        scale = np.float32(self.per_channel(x, params, "scale"))
        if params["mode"] == 0:
            rounded = dtypes.convert(dtypes.round_half_away(x.astype(np.float32) * scale), I32)
            result = rounded.astype(np.int64) + np.asarray(self.per_channel(x, params, "offset"), np.int64)
        else:
            result = dtypes.round_half_away(x.astype(np.float32) * scale + np.float32(self.per_channel(x, params, "offset")))
        return [dtypes.convert(result, params["out_dtype"])]


REQUANT_FP32 = register(RequantFp32())


def requant_fp32_to_int(tensor_i: Tensor, is_scale_pc: bool = False, scale_val: float = 1.0, scale_vec: PerChannel | None = None,
                        is_offset_pc: bool = False, offset_val: int = 0, offset_vec: PerChannel | None = None, offset_fp_val: float = 0.0,
                        offset_fp_vec: PerChannel | None = None, mode: int = 0, out_dtype: str = "int8", name: str | None = None) -> Tensor:
    """Quantize: mode 0 saturate(int(round(input * scale)) + offset) for a FLOAT32 input,
    mode 1 saturate(int(round(float(input) * scale + offset_fp))) for an integer input."""
    integer_offset = mode == 0
    params: dict[str, Any] = {
        "mode": mode, "out_dtype": out_dtype, "vectors": [],
        "scale": _pick(is_scale_pc, float(scale_val), scale_vec, "requant_fp32_to_int scale"),
        "offset": _pick(is_offset_pc, int(offset_val) if integer_offset else float(offset_fp_val),
                        offset_vec if integer_offset else offset_fp_vec, "requant_fp32_to_int offset"),
    }
    derived = {"scale": (params["scale"], F32), "offset": (params["offset"], I32 if integer_offset else F32)}
    return apply_one(REQUANT_FP32, [tensor_i] + _vector_inputs(tensor_i, params, derived), params, name)


# ---- requant_int32 --------------------------------------------------------------------------

class RequantInt32(Quant):
    def __init__(self) -> None:
        super().__init__("requant_int32", (0, 1, 2))

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [I32]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        m, offset = self.operand(params, "multiplier"), self.operand(params, "offset")
        mode = params["mode"]
        if mode == 0:
            return [
                Step("lshift", (In(0), self.operand(params, "lshift"), dtypes.DOWN), Tmp(0)),
                Step("mul_rshift", (Tmp(0), m, 31, dtypes.HALF_UP), Tmp(0)),
                Step("rshift", (Tmp(0), self.operand(params, "rshift"), dtypes.HALF_AWAY), Tmp(0)),
                Step("add", (Tmp(0), offset)),
            ]
        if mode == 1:
            return [
                Step("mul_rshift", (In(0), m, 31, dtypes.HALF_UP), Tmp(0)),
                Step("rshift", (Tmp(0), self.operand(params, "rshift"), dtypes.HALF_AWAY), Tmp(0)),
                Step("add", (Tmp(0), offset)),
            ]
        return [Step("mul_rshift", (In(0), m, self.operand(params, "rshift"), dtypes.HALF_UP), Tmp(0)), Step("add", (Tmp(0), offset))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0].astype(np.int64)
        m = np.asarray(self.per_channel(x, params, "multiplier"), np.int64)
        shift = np.asarray(self.per_channel(x, params, "shift"), np.int64)
        offset = np.asarray(self.per_channel(x, params, "offset"), np.int64)
        sat32 = lambda v: np.clip(v, -(2**31), 2**31 - 1)  # noqa: E731
        if params["mode"] == 0:
            v = sat32(x * 2 ** np.maximum(shift, 0))
            v = sat32(_half_up(v * m, 31))
            v = _half_away(v, np.maximum(-shift, 0))
        elif params["mode"] == 1:
            v = sat32(_half_up(x * m, 31))
            v = np.where(shift <= 0, _half_away(v, np.maximum(-shift, 0)), sat32(v * 2 ** np.maximum(shift, 0)))
        else:
            v = x * m
            v = sat32(np.where(shift > 0, v * 2 ** np.maximum(shift, 0), _half_up(v, np.maximum(-shift, 0))))
        return [dtypes.convert(v + offset, params["out_dtype"])]


def _half_up(v: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """v / 2^k rounding half up (k >= 0)."""
    return np.floor_divide(v + np.where(k > 0, 2 ** np.maximum(k - 1, 0), 0), 2 ** np.asarray(k))


def _half_away(v: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """v / 2^k rounding halves away from zero (k >= 0)."""
    return np.sign(v) * _half_up(np.abs(v), k)


REQUANT_INT32 = register(RequantInt32())


def requant_int32(tensor_i: Tensor, is_mul_shift_pc: bool = False, multiplier_val: int = 1, scale_val: int = 0,
                  multiplier_vec: PerChannel | None = None, scale_vec: PerChannel | None = None, is_offset_pc: bool = False,
                  offset_val: int = 0, offset_vec: PerChannel | None = None, mode: int = 0, out_dtype: str = "int8",
                  name: str | None = None) -> Tensor:
    """Requantize an integer tensor with a multiplier, a shift (the seed's `scale`) and an
    offset, in mode 0, 1 or 2 (see the module docstring)."""
    multiplier = _pick(is_mul_shift_pc, int(multiplier_val), multiplier_vec, "requant_int32 multiplier")
    shift = _pick(is_mul_shift_pc, int(scale_val), scale_vec, "requant_int32 shift")
    params: dict[str, Any] = {
        "mode": mode, "out_dtype": out_dtype, "vectors": [], "multiplier": multiplier, "shift": shift,
        "offset": _pick(is_offset_pc, int(offset_val), offset_vec, "requant_int32 offset"),
    }
    each = (lambda f: [f(s) for s in shift]) if isinstance(shift, list) else (lambda f: f(shift))
    # the machine's shift operands, worked out once as the compiler would
    params["lshift"] = each(lambda s: max(s, 0))
    params["rshift"] = each(lambda s: max(-s, 0)) if mode == 0 else each(lambda s: -s)
    derived = {"multiplier": (multiplier, I32), "offset": (params["offset"], I32), "rshift": (params["rshift"], I32)}
    if mode == 0:
        derived["lshift"] = (params["lshift"], I32)
    return apply_one(REQUANT_INT32, [tensor_i] + _vector_inputs(tensor_i, params, derived), params, name)


# ---- dequant_int_to_fp32 --------------------------------------------------------------------

class Dequant(Quant):
    def __init__(self) -> None:
        super().__init__("dequant_int_to_fp32", (0, 1))

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [I32] if params["mode"] == 0 else [F32]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        cdt = "int64" if params["mode"] == 0 else F32  # mode 0's integer offset is subtracted exactly
        return [Step("sub", (In(0), self.operand(params, "offset")), Tmp(0), cdt=cdt),
                Step("mul", (Tmp(0), self.operand(params, "scale")), cdt=F32)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        offset = self.per_channel(x, params, "offset")
        if params["mode"] == 0:
            shifted = dtypes.convert(x.astype(np.int64) - np.asarray(offset, np.int64), I32).astype(np.float32)
        else:
            shifted = x.astype(np.float32) - np.float32(offset)
        return [dtypes.convert(shifted * np.float32(self.per_channel(x, params, "scale")), params["out_dtype"])]


DEQUANT = register(Dequant())


def dequant_int_to_fp32(tensor_i: Tensor, is_scale_pc: bool = False, scale_val: float = 1.0, scale_vec: PerChannel | None = None,
                        is_offset_pc: bool = False, offset_val: int = 0, offset_vec: PerChannel | None = None, offset_fp_val: float = 0.0,
                        offset_fp_vec: PerChannel | None = None, mode: int = 0, out_dtype: str = "float32",
                        name: str | None = None) -> Tensor:
    """Dequantize, per tensor or per channel: mode 0 (input - offset) * scale with the integer
    offset, mode 1 (float(input) - offset_fp) * scale with the float one; the parameters are
    requant_fp32_to_int's (the seed gives both ops one struct)."""
    integer_offset = mode == 0
    params: dict[str, Any] = {
        "mode": mode, "out_dtype": out_dtype, "vectors": [],
        "scale": _pick(is_scale_pc, float(scale_val), scale_vec, "dequant_int_to_fp32 scale"),
        "offset": _pick(is_offset_pc, int(offset_val) if integer_offset else float(offset_fp_val),
                        offset_vec if integer_offset else offset_fp_vec, "dequant_int_to_fp32 offset"),
    }
    derived = {"offset": (params["offset"], I32 if integer_offset else F32), "scale": (params["scale"], F32)}
    return apply_one(DEQUANT, [tensor_i] + _vector_inputs(tensor_i, params, derived), params, name)
