"""matrix_mul of the BMLang seed (NN/Matrix Operator): a global op on the matrix unit.

    matrix_mul(left [M, K], right [K, N], bias [1, N] (optional), scale=1.0,
               mode="LowPrecisionSymmetric", left_zero_point=0, right_zero_point=0,
               output_zero_point=0, out_dtype=None)

Float operands (float32, float16, bfloat16) multiply in float32 and store in their own dtype.
INT8/UINT8 operands follow the seed's quantized modes, exactly as its pseudo-code:

LowPrecisionSymmetric (zero points 0, bias INT16/UINT16, output INT8/UINT8):
    rshift  = ceil(log2(1/scale)) if 0 < scale <= 1 else 0         (scale rounded to float32)
    res     = sat8((left @ right + bias + 2^(rshift-1)) >> rshift)   (INT32 intermediate)
    if scale * 2^rshift != 1:   res = sat8((res * int(scale * 2^rshift * 2^7) + 2^6) >> 7)
HighPrecisionSymmetric (zero points 0, bias INT16/UINT16/INT32, output 8 or 16 bit):
    res  = sat16_int16((left @ right [+ bias if 16-bit] + 2^(rshift-1)) >> rshift)
    res  = sat_out(round(res * scale * 2^rshift [+ bias * scale if INT32]))   (float32, C round)
The lowering computes the product on the matrix unit into an INT32 accumulator and runs these
steps as vector instructions on it (the op's `epilogue`).
"""

import math

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from .base import OpDef, Spec, apply, check_dtype, check_rank, register
from .elementwise import In, Step, Tmp

FLOAT = ("float32", "float16", "bfloat16")
INT8 = ("int8", "uint8")
MODES = {
    # mode: (bias dtypes, output dtypes)
    "LowPrecisionSymmetric": (("int16", "uint16"), ("int8", "uint8")),
    "HighPrecisionSymmetric": (("int16", "uint16", "int32"), ("int8", "uint8", "int16", "uint16")),
}


def shift_and_multiplier(scale):
    """(rshift, scale * 2^rshift) for the seed's float32 scale."""
    scale = float(np.float32(scale))
    rshift = math.ceil(math.log2(1 / scale)) if 0 < scale <= 1 else 0
    return rshift, float(np.float32(scale * 2.0**rshift))


class MatrixMul(OpDef):
    name = "matrix_mul"
    kind = "global"
    template = "matmul"

    def infer(self, ins, params):
        if len(ins) not in (2, 3):
            raise ShapeError(f"matrix_mul: takes left, right and an optional bias, got {len(ins)} tensors")
        left, right = ins[0], ins[1]
        check_rank(left, 2, "matrix_mul left")
        check_rank(right, 2, "matrix_mul right")
        (m, k), (k2, n) = left.shape, right.shape
        if k != k2:
            raise ShapeError(f"matrix_mul: left is {left.shape} and right is {right.shape}: left columns {k} != right rows {k2}")
        if len(ins) == 3 and ins[2].shape != (1, n):
            raise ShapeError(f"matrix_mul: bias must have shape (1, {n}), got {ins[2].shape}")
        out = self._out_dtype(ins, params)
        return [Spec((m, n), out)]

    def _out_dtype(self, ins, params):
        left, right, bias = ins[0], ins[1], (ins[2] if len(ins) == 3 else None)
        if left.dtype in FLOAT:
            for t, what in ((right, "right"), (bias, "bias")):
                if t is not None and t.dtype != left.dtype:
                    raise UnsupportedError(f"matrix_mul: {what} is {t.dtype} but left is {left.dtype}; float operands must match")
            out = params.get("out_dtype") or left.dtype
            if out != left.dtype:
                raise UnsupportedError(f"matrix_mul: float operands give a {left.dtype} result, out_dtype {out} asked")
            return out
        check_dtype(left.dtype, FLOAT + INT8, "matrix_mul left")
        check_dtype(right.dtype, INT8, "matrix_mul right")
        mode = params["mode"]
        if mode not in MODES:
            raise UnsupportedError(f"matrix_mul: mode {mode!r} is not lowered yet (lowered: {', '.join(MODES)})")
        bias_types, out_types = MODES[mode]
        if any(params[z] != 0 for z in ("left_zero_point", "right_zero_point", "output_zero_point")):
            raise UnsupportedError(f"matrix_mul: {mode} needs all zero points to be 0")
        if bias is not None:
            check_dtype(bias.dtype, bias_types, f"matrix_mul {mode} bias")
        out = check_dtype(params.get("out_dtype") or left.dtype, out_types, f"matrix_mul {mode} output")
        if out.startswith("u") and any(t.dtype.startswith("int") for t in ins):
            raise UnsupportedError(f"matrix_mul: an unsigned output {out} needs unsigned inputs")
        return out

    def acc_dtype(self, left_dtype):
        return "float32" if left_dtype in FLOAT else "int32"

    def epilogue(self, params, bias_dtype, out_dtype):
        """(steps, scratch dtypes) from the accumulator In(0) (and the bias In(1), a row read for
        every row) to the result OUT, as vector steps (isa.ops.elementwise.Step). When the
        result has the accumulator's dtype it is the accumulator itself."""
        if out_dtype in FLOAT:
            if bias_dtype:
                return [Step("add", (In(0), In(1)))], []
            return ([Step("copy", (In(0),))] if out_dtype != "float32" else []), []
        rshift, multiplier = shift_and_multiplier(params["scale"])
        wide_bias = bias_dtype == "int32" and params["mode"] == "HighPrecisionSymmetric"
        steps = [Step("add", (In(0), In(1)), Tmp(0), cdt="int64")] if bias_dtype and not wide_bias else []
        acc = Tmp(0) if steps else In(0)
        if params["mode"] == "LowPrecisionSymmetric":
            if multiplier == 1.0:
                return steps + [Step("rshift", (acc, rshift, dtypes.HALF_UP), cdt="int64")], ["int32"]
            return steps + [
                Step("rshift", (acc, rshift, dtypes.HALF_UP), Tmp(1), cdt="int64"),
                Step("mul", (Tmp(1), int(multiplier * 2**7)), Tmp(0), cdt="int64"),
                Step("rshift", (Tmp(0), 7, dtypes.HALF_UP), cdt="int64"),
            ], ["int32", out_dtype]
        steps += [
            Step("rshift", (acc, rshift, dtypes.HALF_UP), Tmp(1), cdt="int64"),
            Step("mul", (Tmp(1), multiplier), Tmp(2), cdt="float32"),
        ]
        if wide_bias:
            steps += [
                Step("mul", (In(1), float(np.float32(params["scale"]))), Tmp(3), cdt="float32"),
                Step("add", (Tmp(2), Tmp(3)), Tmp(2), cdt="float32"),
            ]
        return steps + [Step("round", (Tmp(2),), cdt="float32")], ["int32", "int16", "float32", "float32"]

    def reference(self, arrays, params, compute=None):
        left, right = arrays[0], arrays[1]
        bias = arrays[2] if len(arrays) == 3 else None
        out = self._out_dtype([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)
        if left.dtype.kind == "f" or dtypes.of_array(left) == "bfloat16":
            acc = left.astype(np.float32) @ right.astype(np.float32)
            return [(acc if bias is None else acc + bias.astype(np.float32)).astype(dtypes.np_dtype(out))]
        acc = left.astype(np.int64) @ right.astype(np.int64)
        rshift, multiplier = shift_and_multiplier(params["scale"])
        if params["mode"] == "LowPrecisionSymmetric":
            if bias is not None:
                acc = acc + bias.astype(np.int64)
            res = dtypes.convert(_round_rshift(acc, rshift), out)
            if multiplier != 1.0:
                imm = (res.astype(np.int64) * int(multiplier * 2**7) + (1 << 6)) >> 7
                res = dtypes.convert(imm, out)
            return [res]
        wide_bias = bias is not None and bias.dtype == np.int32
        if bias is not None and not wide_bias:
            acc = acc + bias.astype(np.int64)
        res = dtypes.convert(_round_rshift(acc, rshift), "int16").astype(np.float32)
        imm = res * np.float32(multiplier)
        if wide_bias:
            imm = imm + bias.astype(np.float32) * np.float32(params["scale"])
        return [dtypes.convert(dtypes.round_half_away(imm), out)]


def _round_rshift(x, shift):
    """The seed's rounding right shift (see mul_shift): ((x >> (shift - 1)) + 1) >> 1."""
    return ((x >> (shift - 1)) + 1) >> 1 if shift > 0 else x


MATRIX_MUL = register(MatrixMul())


def matrix_mul(left, right, bias=None, scale=1.0, mode="LowPrecisionSymmetric", left_zero_point=0,
               right_zero_point=0, output_zero_point=0, out_dtype=None, name=None):
    """matrix_result = left @ right (+ bias), with the seed's quantized modes for INT8 operands."""
    params = {
        "scale": float(scale), "mode": mode, "left_zero_point": left_zero_point,
        "right_zero_point": right_zero_point, "output_zero_point": output_zero_point, "out_dtype": out_dtype,
    }
    operands = [left, right] + ([bias] if bias is not None else [])
    return apply(MATRIX_MUL, operands, params, name)
