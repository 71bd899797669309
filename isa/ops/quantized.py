"""The seed's three quantized modes (QCalMode) of conv and matrix_mul: their rules, the vector
steps that finish an INT32 accumulator on the machine, and a transcription of the pseudo-code
for the references.

    rshift   = ceil(log2(1/scale)) if 0 < scale <= 1 else 0     (scale rounded to float32;
               conv's HighPrecisionAsymmetric takes floor, as its pseudo-code says)
    rr(x)    = (x + 2^(rshift-1)) >> rshift                     (the seed's rounding right shift)
    round()  = C's, halves away from zero; float arithmetic is float32

LowPrecisionSymmetric   res = sat8(rr(acc + bias)); if scale * 2^rshift != 1:
                        res = sat8((res * int(scale * 2^rshift * 2^7) + 2^6) >> 7)
HighPrecisionSymmetric  res = sat16(rr(acc [+ bias if 16-bit]))
                        res = sat_out(round(res * scale * 2^rshift [+ bias * scale if INT32/FLOAT32]))
HighPrecisionAsymmetric res = sat16(sat16(rr(acc)) - sat16(rr(acc_zp)))
                        res = sat_out(round(res * scale * 2^rshift + bias_v2 * scale) + zp_o)

In the asymmetric mode acc = x (*) w and acc_zp = x (*) zp_r (the seed's two partial products),
and bias_v2 = bias - zp_l * sum(w - zp_r) over each output's reduction, folded offline. The
seed's pseudo-code adds part2 and the folded term and drops zp_o; its formula
Round{[(x - zp_l) (*) (w - zp_r) + bias] * scale} + zp_o needs them subtracted and zp_o added,
and the formula wins (docs/sources.md#known-slips). Inputs are padded with raw zeros, so a padded position
counts as (0 - zp_l).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Graph
from .base import TensorLike
from .elementwise import In, Step, Tmp

if TYPE_CHECKING:
    from isa.ops.base import Spec

INT8 = ("int8", "uint8")
MODES = {
    # mode: (bias dtypes, output dtypes)
    "LowPrecisionSymmetric": (("int16", "uint16"), ("int8", "uint8")),
    "HighPrecisionSymmetric": (("int16", "uint16", "int32", "float32"), ("int8", "uint8", "int16", "uint16")),
    "HighPrecisionAsymmetric": (("int16", "uint16", "int32", "float32"), ("int8", "uint8", "int16", "uint16")),
}
ZERO_POINTS = ("left_zero_point", "right_zero_point", "output_zero_point")
WITHIN_INT16 = ("int8", "uint8", "int16")  # output dtypes whose range int16's holds


def shift_and_multiplier(scale: float, floor: bool = False) -> tuple[int, float]:
    """(rshift, scale * 2^rshift) for the seed's float32 scale."""
    scale = float(np.float32(scale))
    exact = math.log2(1 / scale) if 0 < scale <= 1 else 0.0
    rshift = (math.floor(exact) if floor else math.ceil(exact)) if 0 < scale <= 1 else 0
    return rshift, float(np.float32(scale * 2.0**rshift))


def out_dtype(op: str, ins: list[Spec], params: dict[str, Any], bias_allowed: tuple[str, ...] | None = None) -> str:
    """Check a quantized op's operands (left/input, right/weight, optional bias) and params for
    its mode; returns the output dtype."""
    mode = params["mode"]
    if mode not in MODES:
        raise UnsupportedError(f"{op}: unknown mode {mode!r}; known: {', '.join(MODES)}")
    for t, what in ((ins[0], "left operand"), (ins[1], "right operand")):
        if t.dtype not in INT8:
            raise UnsupportedError(f"{op}: the {what} is {t.dtype}; quantized {op} takes int8 or uint8")
    bias_types, out_types = MODES[mode]
    if mode == "HighPrecisionAsymmetric":
        for z, dt in zip(ZERO_POINTS, (ins[0].dtype, ins[1].dtype, params.get("out_dtype") or ins[0].dtype)):
            lo, hi = dtypes.int_range(dt) if dtypes.is_int(dt) else (-(2**31), 2**31 - 1)
            if not lo <= params[z] <= hi:
                raise UnsupportedError(f"{op}: {z} {params[z]} is outside {dt}'s range [{lo}, {hi}]")
    elif any(params[z] != 0 for z in ZERO_POINTS):
        raise UnsupportedError(f"{op}: {mode} needs all zero points to be 0")
    if len(ins) > 2:
        allowed = bias_allowed or bias_types
        if ins[2].dtype not in allowed:
            raise UnsupportedError(f"{op} {mode} bias: dtype {ins[2].dtype} is not supported (supported: {', '.join(allowed)})")
    out = params.get("out_dtype") or ins[0].dtype
    if out not in out_types:
        raise UnsupportedError(f"{op} {mode} output: dtype {out} is not supported (supported: {', '.join(out_types)})")
    if out.startswith("u") and any(t.dtype.startswith("int") for t in ins):
        raise UnsupportedError(f"{op}: an unsigned output {out} needs unsigned inputs")
    return out


def _wide(bias_dtype: str | None) -> bool:
    return bias_dtype in ("int32", "float32")


def plain_epilogue(bias_dtype: str | None, out_dtype: str, acc_dtype: str) -> tuple[list[Step], list[str]]:
    """(steps, scratch dtypes) of an accumulator In(0) with no scale to apply (a float product,
    the integer family's INT32 one): plus the bias In(1), or cast to the result's dtype, or none
    (the result is the accumulator itself)."""
    if bias_dtype:
        return [Step("add", (In(0), In(1)))], []
    return ([Step("copy", (In(0),))] if out_dtype != acc_dtype else []), []


def epilogue(params: dict[str, Any], bias_dtype: str | None, out_dtype: str, float_acc: bool = False,
             floor: bool = False) -> tuple[list[Step], list[str]]:
    """(steps, scratch dtypes) from the accumulator In(0) (the bias In(1), the asymmetric mode's
    second product In(2)) to the result OUT. float_acc: the product was made in float32 (BM1684's
    depthwise convolution in the high-precision modes), so the result is round((acc + bias) * scale) + zp_o."""
    mode = params["mode"]
    scale = float(np.float32(params["scale"]))
    rshift, multiplier = shift_and_multiplier(params["scale"], floor)
    zp_o = params.get("output_zero_point", 0)
    temps = ["int32", "int16", "float32", "float32", "int16"]
    finish = [Step("round", (Tmp(2),), Tmp(0), cdt="float32"),
              Step("add", (Tmp(0), zp_o), cdt="int64")] if zp_o else [Step("round", (Tmp(2),), cdt="float32")]
    if float_acc:
        biased = [Step("add", (In(0), In(1)), Tmp(2), cdt="float32")] if bias_dtype else [Step("copy", (In(0),), Tmp(2), cdt="float32")]
        return biased + [Step("mul", (Tmp(2), scale), Tmp(2), cdt="float32")] + finish, temps
    if mode == "LowPrecisionSymmetric":
        steps = [Step("add", (In(0), In(1)), Tmp(0), cdt="int64")] if bias_dtype else []
        acc = Tmp(0) if steps else In(0)
        if multiplier == 1.0:
            return steps + [Step("rshift", (acc, rshift, dtypes.HALF_UP), cdt="int64")], ["int32"]
        return steps + [
            Step("rshift", (acc, rshift, dtypes.HALF_UP), Tmp(1), cdt="int64"),
            Step("mul", (Tmp(1), int(multiplier * 2**7)), Tmp(0), cdt="int64"),
            Step("rshift", (Tmp(0), 7, dtypes.HALF_UP), cdt="int64"),
        ], ["int32", out_dtype]
    asym = mode == "HighPrecisionAsymmetric"
    wide = asym or _wide(bias_dtype)
    steps = [Step("add", (In(0), In(1)), Tmp(0), cdt="int64")] if bias_dtype and not wide else []
    if not wide and multiplier == 1.0 and out_dtype in WITHIN_INT16:
        # round(res * 1) is res, and saturating to int16 first changes nothing when the result's
        # range lies inside int16's: the shift stores the result, as in LowPrecisionSymmetric
        return steps + [Step("rshift", (Tmp(0) if steps else In(0), rshift, dtypes.HALF_UP), cdt="int64")], ["int32"]
    steps.append(Step("rshift", (Tmp(0) if steps else In(0), rshift, dtypes.HALF_UP), Tmp(1), cdt="int64"))
    if asym:
        steps += [Step("rshift", (In(2), rshift, dtypes.HALF_UP), Tmp(4), cdt="int64"), Step("sub", (Tmp(1), Tmp(4)), Tmp(1), cdt="int64")]
    steps.append(Step("mul", (Tmp(1), multiplier), Tmp(2), cdt="float32"))
    if wide and bias_dtype:
        steps += [Step("mul", (In(1), scale), Tmp(3), cdt="float32"), Step("add", (Tmp(2), Tmp(3)), Tmp(2), cdt="float32")]
    return steps + finish, temps


def requantize(acc: np.ndarray, bias: np.ndarray | None, params: dict[str, Any], out: str, acc_zp: np.ndarray | None = None,
               floor: bool = False) -> np.ndarray:
    """The pseudo-code, transcribed: acc (and acc_zp) are exact integer products; bias is the
    op's bias (bias_v2 in the asymmetric mode) or None."""
    mode = params["mode"]
    rshift, multiplier = shift_and_multiplier(params["scale"], floor)
    scale = np.float32(params["scale"])

    def rr(x: np.ndarray) -> np.ndarray:
        return ((x >> (rshift - 1)) + 1) >> 1 if rshift > 0 else x

    acc = acc.astype(np.int64)
    if mode == "LowPrecisionSymmetric":
        res = dtypes.convert(rr(acc + (0 if bias is None else bias.astype(np.int64))), out)
        if multiplier != 1.0:
            res = dtypes.convert((res.astype(np.int64) * int(multiplier * 2**7) + (1 << 6)) >> 7, out)
        return res
    wide = mode == "HighPrecisionAsymmetric" or (bias is not None and _wide(dtypes.of_array(bias)))
    imm = rr(acc if wide or bias is None else acc + bias.astype(np.int64))
    res = dtypes.convert(imm, "int16").astype(np.int64)
    if mode == "HighPrecisionAsymmetric":
        assert acc_zp is not None  # the asymmetric mode's callers give the zero point's product
        res = dtypes.convert(res - dtypes.convert(rr(acc_zp.astype(np.int64)), "int16"), "int16").astype(np.int64)
    value = res.astype(np.float32) * np.float32(multiplier)
    if wide and bias is not None:
        value = value + bias.astype(np.float32) * scale
    return dtypes.convert(dtypes.round_half_away(value).astype(np.int64) + params.get("output_zero_point", 0), out)


def requantize_float(acc: np.ndarray, bias: np.ndarray | None, params: dict[str, Any], out: str) -> np.ndarray:
    """BM1684's depthwise convolution in a high-precision mode, computed in float32:
    round((acc + bias) * scale) + zp_o, acc being the exact (x - zp_l) (*) (w - zp_r)."""
    value = acc.astype(np.float32) + (0 if bias is None else bias.astype(np.float32))
    value = value * np.float32(params["scale"])
    return dtypes.convert(dtypes.round_half_away(value).astype(np.int64) + params.get("output_zero_point", 0), out)


ZeroPointVector = np.ndarray | Sequence[int]  # per-channel zero points, as the integer family's *_vec arguments take them
ZeroPoint = tuple[bool, int, ZeroPointVector | None]  # (is_const, value, vector) of one zero point


def zero_point_operands(op: str, graph: Graph, operands: list[TensorLike], params: dict[str, Any], points: dict[str, ZeroPoint],
                        name: str | None = None) -> None:
    """The integer family's zero points: each of `points` ({key: (is_const, value, vector)}) goes
    into params as a number, or, as a vector, onto operands as an int16 constant tensor whose
    position params[key + "_input"] records (params[key] is then "vector")."""
    for key, (const, value, vector) in points.items():
        if const:
            params[key] = int(value)
            continue
        if vector is None or len(vector) == 0:
            raise ShapeError(f"{op}: the {key} zero point is a vector, but the vector is empty")
        params[key], params[key + "_input"] = "vector", len(operands)
        operands.append(graph.constant(f"{name or op}_{key}{len(graph.constants)}", np.asarray(vector, np.int16)))
