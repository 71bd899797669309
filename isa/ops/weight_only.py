"""Weight-only quantized matrix product (W8A16, W4A16), as LLMs are deployed on these chips:
TPU-MLIR's A16MatMul (sophgo/tpu-mlir, include/tpu_mlir/Dialect/Tpu/IR/TpuOps.td, Tpu_A16MatMulOp:
int8 or int4 weights, float16/bfloat16 activations, per-channel or per-group scales) and CANN's
aclnnWeightQuantBatchMatmulV2 (antiquant scale and offset per group).

    matrix_mul_a16(left [M, K] float16|bfloat16, right, scale [K / group, N], zero [K / group, N],
                   bits=8|4, group=128)

bits 8: right is int8 [K, N], w = q * scale, or q * scale + zero with the optional zero terms
(an asymmetric uint8 code u with zero point z stored as q = u - 128, zero = (128 - z) * scale).
bits 4: right is uint8 [K / 2, N], two 4-bit codes a byte (row 2i in the low nibble, row 2i + 1
in the high one: the memories are byte-addressed, so a packed byte is what streams from DDR at
half a byte an element), w = u * scale + zero with u in 0..15 and zero = -z * scale (GPTQ's and
AWQ's unsigned codes with a zero point z per group); the zero terms are required.
The lowering (isa/lower/templates/matmul.py) loads the packed tile, unpacks (rshift, and) and
dequantizes (mul or mul_add by the group's row of scales) in local memory with vector
instructions, then multiplies in the left's dtype, accumulating in float32.
"""

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Node, Tensor
from .base import Spec, apply_one, check_rank, register
from .matrix import MatrixMul

FLOATS = ("float16", "bfloat16")
STORED = {8: "int8", 4: "uint8"}  # bits -> the dtype a weight byte is stored in
PER_BYTE = {8: 1, 4: 2}  # weights a byte


class MatrixMulA16(MatrixMul):
    name = "matrix_mul_a16"
    seed = "tpu-mlir"

    def checked_inputs(self, node: Node) -> int:
        return 2  # the scales (and zero terms) are the op's own constants, in the left's dtype

    def dims(self, left_shape: tuple[int, ...], right_shape: tuple[int, ...],
             params: dict[str, Any]) -> tuple[tuple[int, ...], int, int, int]:
        return (), left_shape[0], left_shape[1], right_shape[1]

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        bits, group = params["bits"], params["group"]
        if bits not in STORED:
            raise UnsupportedError(f"matrix_mul_a16: bits {bits!r}; expected 8 or 4")
        if len(ins) not in ((4,) if bits == 4 else (3, 4)):
            raise ShapeError(f"matrix_mul_a16: {bits}-bit weights take left, right, scale{', zero' if bits == 4 else ' (, zero)'}; "
                             f"got {len(ins)} tensors")
        left, right = ins[0], ins[1]
        check_rank(left, 2, "matrix_mul_a16 left")
        check_rank(right, 2, "matrix_mul_a16 right")
        m, k = left.shape
        n = right.shape[1]
        if left.dtype not in FLOATS:
            raise UnsupportedError(f"matrix_mul_a16: left is {left.dtype}; expected one of {', '.join(FLOATS)}")
        if right.dtype != STORED[bits]:
            raise UnsupportedError(f"matrix_mul_a16: {bits}-bit weights are stored as {STORED[bits]}, got {right.dtype}")
        if right.shape[0] * PER_BYTE[bits] != k:
            raise ShapeError(f"matrix_mul_a16: left {left.shape} needs {k // PER_BYTE[bits]} rows of {bits}-bit weights, "
                             f"right has {right.shape[0]}")
        if not isinstance(group, int) or group < 1 or k % group or group % PER_BYTE[bits]:
            raise ShapeError(f"matrix_mul_a16: group {group!r} must divide K = {k} (and be even for 4 bits)")
        for t, what in zip(ins[2:], ("scale", "zero")):
            if t.shape != (k // group, n) or t.dtype != left.dtype:
                raise ShapeError(f"matrix_mul_a16: {what} must be {left.dtype} of shape {(k // group, n)}, got {t.dtype} {t.shape}")
        return [Spec((m, n), left.dtype)]

    def weights(self, arrays: list[np.ndarray], params: dict[str, Any]) -> np.ndarray:
        """The dequantized weight [K, N] in the left's dtype, as the lowering's vector steps make it."""
        right, scale = arrays[1], arrays[2].astype(np.float32)
        group = params["group"]
        codes = (right if params["bits"] == 8 else unpack(right)).astype(np.float32)
        w = codes * np.repeat(scale, group, axis=0)
        if len(arrays) > 3:
            w += np.repeat(arrays[3].astype(np.float32), group, axis=0)
        return w.astype(dtypes.np_dtype(dtypes.of_array(arrays[0])))

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        left = arrays[0]
        acc = left.astype(np.float32) @ self.weights(arrays, params).astype(np.float32)
        return [acc.astype(left.dtype)]


def pack(codes: np.ndarray) -> np.ndarray:
    """uint8 [K / 2, N] holding codes [K, N] (0..15): row 2i in the low nibble, row 2i + 1 in the high."""
    codes = np.asarray(codes, np.uint8)
    return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)


def unpack(packed: np.ndarray) -> np.ndarray:
    """The codes [K, N] of a packed uint8 [K / 2, N]."""
    out = np.empty((packed.shape[0] * 2, packed.shape[1]), np.uint8)
    out[0::2], out[1::2] = packed & 15, packed >> 4
    return out


MATRIX_MUL_A16 = register(MatrixMulA16())


def matrix_mul_a16(left: Tensor, right: Tensor, scale: Tensor, zero: Tensor | None = None, bits: int = 8, group: int = 128,
                   name: str | None = None) -> Tensor:
    """left @ dequantized(right): see the module docstring."""
    operands = [left, right, scale] + ([zero] if zero is not None else [])
    return apply_one(MATRIX_MUL_A16, operands, {"bits": bits, "group": group, "mode": "LowPrecisionSymmetric"}, name)
