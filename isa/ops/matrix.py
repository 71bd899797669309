"""matrix_mul of the BMLang seed (NN/Matrix Operator): a global op on the matrix unit.

    matrix_mul(left [M, K], right [K, N], bias [1, N] (optional), scale=1.0,
               mode="LowPrecisionSymmetric", left_zero_point=0, right_zero_point=0,
               output_zero_point=0, out_dtype=None)

Float operands (float32, float16, bfloat16) multiply in float32 and store in their own dtype.
INT8/UINT8 operands follow the seed's three quantized modes (isa/ops/quantized.py); in
HighPrecisionAsymmetric the right operand must be a constant (COEFF_TENSOR), as the seed says.
The lowering computes the product on the matrix unit into an INT32 accumulator and finishes it
with the mode's vector steps.
"""

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from . import quantized
from .base import OpDef, Spec, apply, check_rank, register
from .elementwise import In, Step

FLOAT = ("float32", "float16", "bfloat16")


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
        return [Spec((m, n), self._out_dtype(ins, params))]

    def _out_dtype(self, ins, params):
        left = ins[0]
        if left.dtype not in FLOAT:
            bias_types = ("int16", "uint16", "int32") if params["mode"] != "LowPrecisionSymmetric" else None
            return quantized.out_dtype("matrix_mul", ins, params, bias_types)
        for t, what in zip(ins[1:], ("right", "bias")):
            if t.dtype != left.dtype:
                raise UnsupportedError(f"matrix_mul: {what} is {t.dtype} but left is {left.dtype}; float operands must match")
        out = params.get("out_dtype") or left.dtype
        if out != left.dtype:
            raise UnsupportedError(f"matrix_mul: float operands give a {left.dtype} result, out_dtype {out} asked")
        return out

    def acc_dtype(self, left_dtype):
        return "float32" if left_dtype in FLOAT else "int32"

    def asymmetric(self, params):
        return params["mode"] == "HighPrecisionAsymmetric"

    def epilogue(self, params, bias_dtype, out_dtype):
        """(steps, scratch dtypes) from the accumulator In(0) (the bias In(1), a row read for every
        row; the asymmetric mode's second product In(2)) to the result OUT. When the result has
        the accumulator's dtype it is the accumulator itself."""
        if out_dtype in FLOAT:
            if bias_dtype:
                return [Step("add", (In(0), In(1)))], []
            return ([Step("copy", (In(0),))] if out_dtype != "float32" else []), []
        return quantized.epilogue(params, bias_dtype, out_dtype)

    def reference(self, arrays, params, compute=None):
        left, right = arrays[0], arrays[1]
        bias = arrays[2] if len(arrays) == 3 else None
        out = self._out_dtype([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)
        if out in FLOAT:
            acc = left.astype(np.float32) @ right.astype(np.float32)
            return [(acc if bias is None else acc + bias.astype(np.float32)).astype(dtypes.np_dtype(out))]
        acc = left.astype(np.int64) @ right.astype(np.int64)
        if not self.asymmetric(params):
            return [quantized.requantize(acc, bias, params, out)]
        zl, zr = params["left_zero_point"], params["right_zero_point"]
        bias_v2 = (0 if bias is None else bias.astype(np.int64)) - zl * (right.astype(np.int64) - zr).sum(axis=0, keepdims=True)
        acc_zp = zr * left.astype(np.int64).sum(axis=1, keepdims=True) + np.zeros_like(acc)
        return [quantized.requantize(acc, dtypes.convert(bias_v2, "int32"), params, out, acc_zp)]


MATRIX_MUL = register(MatrixMul())


def matrix_mul(left, right, bias=None, scale=1.0, mode="LowPrecisionSymmetric", left_zero_point=0,
               right_zero_point=0, output_zero_point=0, out_dtype=None, name=None):
    """matrix_result = left @ right (+ bias), with the seed's quantized modes for INT8 operands."""
    params = {
        "scale": float(scale), "mode": mode, "left_zero_point": left_zero_point,
        "right_zero_point": right_zero_point, "output_zero_point": output_zero_point, "out_dtype": out_dtype,
    }
    if mode == "HighPrecisionAsymmetric":
        for t, what in ((right, "matrix_right"), (bias, "bias")):
            if isinstance(t, Tensor) and t.name not in t.graph.constants:
                raise UnsupportedError(f"matrix_mul: HighPrecisionAsymmetric folds zero points offline, so {what} must be a constant (COEFF_TENSOR)")
    operands = [left, right] + ([bias] if bias is not None else [])
    return apply(MATRIX_MUL, operands, params, name)
