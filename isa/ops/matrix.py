"""matrix_mul of the BMLang seed (NN/Matrix Operator): a global op on the matrix unit.

    matrix_mul(left [M, K], right [K, N], bias [1, N] (optional), scale=1.0,
               mode="LowPrecisionSymmetric", left_zero_point=0, right_zero_point=0,
               output_zero_point=0, out_dtype=None)

Float operands (float32, float16, bfloat16) multiply in float32 and store in their own dtype;
float64 operands multiply and accumulate in float64. Float operands may also carry leading batch
dimensions, broadcast as numpy's matmul does ([..., M, K] @ [..., K, N]): one product per batch
element, each reading its operands' matrices where they lie (an attention head's slice of a key
cache), as compilers lower a batched MatMul, with no copy of a slice first.
INT8/UINT8 operands follow the seed's three quantized modes (isa/ops/quantized.py); in
HighPrecisionAsymmetric the right operand must be a constant (COEFF_TENSOR), as the seed says.
The lowering computes the product on the matrix unit into an INT32 accumulator and finishes it
with the mode's vector steps.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Node, Tensor
from . import quantized
from .base import OpDef, Spec, TensorLike, apply_one, check_rank, register
from .elementwise import Step
from .quantized import ZeroPointVector

FLOAT = ("float32", "float16", "bfloat16", "float64")


def float_product(left: np.ndarray, right: np.ndarray, wide: np.dtype) -> np.ndarray:
    """left @ right summed in `wide`, the matrix unit's as its reference's: a float32 product's
    terms, each exact in float64, are summed there and rounded once, so the bits do not hang on
    the order BLAS sums in (its threads, its kernel for the host's CPU)."""
    through = np.float64 if wide == np.float32 else wide
    return (left.astype(through) @ right.astype(through)).astype(wide)


class MatrixMul(OpDef):
    name = "matrix_mul"
    kind = "global"
    template = "matmul"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (2, 3):
            raise ShapeError(f"matrix_mul: takes left, right and an optional bias, got {len(ins)} tensors")
        left, right = ins[0], ins[1]
        if left.dtype not in FLOAT or len(left.shape) < 2 or len(right.shape) < 2:  # batches: float products only
            check_rank(left, 2, "matrix_mul left")
            check_rank(right, 2, "matrix_mul right")
        batch, m, k, n = self.dims(left.shape, right.shape, params)
        if k != right.shape[-2]:
            raise ShapeError(f"matrix_mul: left is {left.shape} and right is {right.shape}: left columns {k} != right rows "
                             f"{right.shape[-2]}")
        if len(ins) == 3 and ins[2].shape != (1, n):
            raise ShapeError(f"matrix_mul: bias must have shape (1, {n}), got {ins[2].shape}")
        return [Spec(batch + (m, n), self._out_dtype(ins, params))]

    def _out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
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

    def acc_dtype(self, left_dtype: str) -> str:
        if left_dtype == "float64":
            return "float64"
        return "float32" if left_dtype in FLOAT else "int32"

    def dims(self, left_shape: tuple[int, ...], right_shape: tuple[int, ...],
             params: dict[str, Any]) -> tuple[tuple[int, ...], int, int, int]:
        """(batch shape, M, K, N): one 2-d product per element of the broadcast batch."""
        try:
            batch = np.broadcast_shapes(left_shape[:-2], right_shape[:-2])
        except ValueError:
            raise ShapeError(f"matrix_mul: batch dimensions {left_shape[:-2]} and {right_shape[:-2]} do not broadcast") from None
        return tuple(batch), left_shape[-2], left_shape[-1], right_shape[-1]

    def asymmetric(self, params: dict[str, Any]) -> bool:
        return params["mode"] == "HighPrecisionAsymmetric"

    def epilogue(self, params: dict[str, Any], bias_dtype: str | None, out_dtype: str) -> tuple[list[Step], list[str]]:
        """(steps, scratch dtypes) from the accumulator In(0) (the bias In(1), a row read for every
        row; the asymmetric mode's second product In(2)) to the result OUT. When the result has
        the accumulator's dtype it is the accumulator itself."""
        if out_dtype in FLOAT:
            return quantized.plain_epilogue(bias_dtype, out_dtype, self.acc_dtype(out_dtype))
        return quantized.epilogue(params, bias_dtype, out_dtype)

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        left, right = arrays[0], arrays[1]
        bias = arrays[2] if len(arrays) == 3 else None
        out = self._out_dtype([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)
        if out in FLOAT:
            wide = dtypes.np_dtype(self.acc_dtype(out))
            acc = float_product(left, right, wide)
            return [(acc if bias is None else acc + bias.astype(wide)).astype(dtypes.np_dtype(out))]
        acc = left.astype(np.int64) @ right.astype(np.int64)
        if not self.asymmetric(params):
            return [quantized.requantize(acc, bias, params, out)]
        zl, zr = params["left_zero_point"], params["right_zero_point"]
        bias_v2 = (0 if bias is None else bias.astype(np.int64)) - zl * (right.astype(np.int64) - zr).sum(axis=0, keepdims=True)
        acc_zp = zr * left.astype(np.int64).sum(axis=1, keepdims=True) + np.zeros_like(acc)
        return [quantized.requantize(acc, dtypes.convert(bias_v2, "int32"), params, out, acc_zp)]


MATRIX_MUL = register(MatrixMul())


def matrix_mul(left: Tensor, right: Tensor, bias: Tensor | np.ndarray | None = None, scale: float = 1.0,
               mode: str = "LowPrecisionSymmetric", left_zero_point: int = 0,
               right_zero_point: int = 0, output_zero_point: int = 0, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """matrix_result = left @ right (+ bias), with the seed's quantized modes for INT8 operands."""
    params = {
        "scale": float(scale), "mode": mode, "left_zero_point": left_zero_point,
        "right_zero_point": right_zero_point, "output_zero_point": output_zero_point, "out_dtype": out_dtype,
    }
    if mode == "HighPrecisionAsymmetric":
        for t, what in ((right, "matrix_right"), (bias, "bias")):
            if isinstance(t, Tensor) and t.name not in t.graph.constants:
                raise UnsupportedError("matrix_mul: HighPrecisionAsymmetric folds zero points "
                                       f"offline, so {what} must be a constant (COEFF_TENSOR)")
    operands = [left, right] + ([bias] if bias is not None else [])
    return apply_one(MATRIX_MUL, operands, params, name)


# ---- the integer family: matrix_mul_v2 and fc_int -------------------------------------------

class MatrixMulV2(OpDef):
    """(left - lzp) @ (right - rzp) + bias, INT8/UINT8 operands, INT32/UINT32 result, over
    batches: left [..., M, K] (or [..., K, M] transposed), right [..., K, N] (or [..., N, K]),
    leading dimensions broadcast as numpy's matmul does. A zero point is one value or a vector:
    the left's over K, the right's over N (the channel each belongs to). The bias is [N]."""

    kind = "global"
    template = "matmul"

    def __init__(self, name: str, left_ranks: tuple[int, ...], right_ranks: tuple[int, ...]) -> None:
        self.name, self.left_ranks, self.right_ranks = name, left_ranks, right_ranks

    def checked_inputs(self, node: Node) -> int:
        return 2 + node.params["has_bias"]

    def dims(self, left_shape: tuple[int, ...], right_shape: tuple[int, ...],
             params: dict[str, Any]) -> tuple[tuple[int, ...], int, int, int]:
        """(batch shape, M, K, N) of the product; raises ShapeError when the operands disagree."""
        m, k = (left_shape[-1], left_shape[-2]) if params["left_trans"] else left_shape[-2:]
        k2, n = (right_shape[-1], right_shape[-2]) if params["right_trans"] else right_shape[-2:]
        if k != k2:
            raise ShapeError(f"{self.name}: left {left_shape} and right {right_shape} (transposed: {params['left_trans']}, "
                             f"{params['right_trans']}) give reductions of {k} and {k2}")
        try:
            batch = np.broadcast_shapes(left_shape[:-2], right_shape[:-2])
        except ValueError:
            raise ShapeError(f"{self.name}: batch dimensions {left_shape[:-2]} and {right_shape[:-2]} do not broadcast") from None
        return tuple(batch), m, k, n

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        data = ins[: 2 + params["has_bias"]]
        left, right = data[0], data[1]
        for t, ranks, what in ((left, self.left_ranks, "left"), (right, self.right_ranks, "right")):
            if len(t.shape) not in ranks:
                raise ShapeError(f"{self.name}: the {what} operand {t.shape} must have {' or '.join(map(str, ranks))} dimensions")
            if t.dtype not in ("int8", "uint8"):
                raise UnsupportedError(f"{self.name}: the {what} operand is {t.dtype}; it must be int8 or uint8")
        batch, m, k, n = self.dims(left.shape, right.shape, params)
        if params["has_bias"] and (data[2].shape != (n,) or data[2].dtype not in ("int32", "uint32")):
            raise ShapeError(f"{self.name}: the bias must be int32 or uint32 of shape ({n},), got {data[2].dtype} {data[2].shape}")
        for key, length in (("lzp", k), ("rzp", n)):
            if params[key] == "vector" and ins[params[key + "_input"]].shape != (length,):
                raise ShapeError(f"{self.name}: the {key} vector needs {length} values, got {ins[params[key + '_input']].shape[0]}")
        out = params.get("out_dtype") or "int32"
        if out not in ("int32", "uint32"):
            raise UnsupportedError(f"{self.name}: the output must be int32 or uint32, got {out}")
        return [Spec(batch + (m, n), out)]

    def acc_dtype(self, left_dtype: str) -> str:
        return "int32"

    def asymmetric(self, params: dict[str, Any]) -> bool:
        return False

    def epilogue(self, params: dict[str, Any], bias_dtype: str | None, out_dtype: str) -> tuple[list[Step], list[str]]:
        return quantized.plain_epilogue(bias_dtype, out_dtype, "int32")

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        left, right = arrays[0].astype(np.int64), arrays[1].astype(np.int64)
        if params["left_trans"]:
            left = np.swapaxes(left, -1, -2)
        if params["right_trans"]:
            right = np.swapaxes(right, -1, -2)
        lzp = arrays[params["lzp_input"]].astype(np.int64) if params["lzp"] == "vector" else params["lzp"]
        rzp = arrays[params["rzp_input"]].astype(np.int64) if params["rzp"] == "vector" else params["rzp"]
        acc = np.matmul(left - lzp, right - rzp)  # lzp runs over K (the left's last axis), rzp over N
        if params["has_bias"]:
            acc = acc + arrays[2].astype(np.int64)
        return [dtypes.convert(acc, params.get("out_dtype") or "int32")]


def _matmul_v2(op: MatrixMulV2, left: Tensor, right: TensorLike, bias: TensorLike | None, has_bias: bool | None, left_trans: bool,
               right_trans: bool, lzp: quantized.ZeroPoint, rzp: quantized.ZeroPoint, out_dtype: str | None,
               name: str | None) -> Tensor:
    if has_bias is not None and bool(has_bias) != (bias is not None):
        raise ShapeError(f"{op.name}: has_bias is {has_bias} but the bias is {'missing' if bias is None else 'given'}")
    params = {"has_bias": int(bias is not None), "left_trans": bool(left_trans), "right_trans": bool(right_trans), "out_dtype": out_dtype}
    operands = [left, right] + ([bias] if bias is not None else [])
    quantized.zero_point_operands(op.name, left.graph, operands, params, {"lzp": lzp, "rzp": rzp}, name)
    return apply_one(op, operands, params, name)


MATRIX_MUL_V2 = register(MatrixMulV2("matrix_mul_v2", (2, 3, 4, 5), (2, 3, 4, 5)))
FC_INT = register(MatrixMulV2("fc_int", (3,), (2,)))


def matrix_mul_v2(matrix_left: Tensor, matrix_right: Tensor, bias: Tensor | np.ndarray | None = None, has_bias: bool | None = None,
                  is_left_trans: bool = False, is_right_trans: bool = False, is_lzp_const: bool = True, lzp_val: int = 0,
                  lzp_vec: ZeroPointVector | None = None, is_rzp_const: bool = True, rzp_val: int = 0,
                  rzp_vec: ZeroPointVector | None = None, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """(left - lzp) @ (right - rzp) + bias over 2-5 dimensional operands with batch broadcast (MatrixMulV2Param)."""
    return _matmul_v2(MATRIX_MUL_V2, matrix_left, matrix_right, bias, has_bias, is_left_trans, is_right_trans,
                      (is_lzp_const, lzp_val, lzp_vec), (is_rzp_const, rzp_val, rzp_vec), out_dtype, name)


def fc_int(tensor_input: Tensor, tensor_kernel: Tensor, tensor_bias: Tensor | None = None, has_bias: bool | None = None,
           weight_trans: bool = False, is_izp_const: bool = True, izp_val: int = 0, izp_vec: ZeroPointVector | None = None,
           is_kzp_const: bool = True, kzp_val: int = 0, kzp_vec: ZeroPointVector | None = None, out_dtype: str | None = None,
           name: str | None = None) -> Tensor:
    """Fully connected: (input [batch, rows, K] - izp) @ (kernel [K, N] - kzp) + bias (FCIntParam)."""
    return _matmul_v2(FC_INT, tensor_input, tensor_kernel, tensor_bias, has_bias, False, weight_trans,
                      (is_izp_const, izp_val, izp_vec), (is_kzp_const, kzp_val, kzp_vec), out_dtype, name)
