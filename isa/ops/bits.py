"""Bit logic and shifts: the seed's Element-Wise Bit Logic Operator section (arith_lshift(s),
arith_rshift(s), round_rshift(s), bit_and(s), bit_or(s), bit_xor(s)) and its Shift Operator
section (arithmetic_shift, arithmetic_pc_shift, logical_shift, logical_pc_shift with every
RoundingMode).

A negative count shifts the other way. Left shifts saturate to the output dtype, as the
seed's fixed-point results do (it does not say otherwise for shifts). The shifts take the
seed's 8- to 32-bit integers and 64-bit ones (round_rshift the seed's); and, or and xor, bit
by bit, take every integer dtype.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import UnsupportedError
from .base import Spec
from .elementwise import Elementwise, In, Step, Tmp, check_number, define

INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32")  # the seed's
SHIFTS = INTS + ("int64", "uint64")  # shifts of 64-bit integers are exact too (isa.dtypes.shift)
UNSIGNED = ("uint8", "uint16", "uint32")
BITWISE = dtypes.INTS  # and, or, xor: bit by bit, so any integer width (64-bit and int4 too)

# RoundingMode value -> rounding of an exact quotient (a Fraction) to an integer: the reference's own route
_ROUND: dict[int, Callable[[Fraction], int]] = {
    dtypes.HALF_TO_EVEN: round,
    dtypes.HALF_AWAY: lambda v: math.floor(v + Fraction(1, 2)) if v >= 0 else math.ceil(v - Fraction(1, 2)),
    dtypes.TOWARDS_ZERO: math.trunc,
    dtypes.DOWN: math.floor,
    dtypes.UP: math.ceil,
    dtypes.HALF_UP: lambda v: math.floor(v + Fraction(1, 2)),
    dtypes.HALF_DOWN: lambda v: math.ceil(v - Fraction(1, 2)),
}


def shifted(x: np.ndarray, n: np.ndarray, mode: int) -> np.ndarray:
    """Reference: x * 2^n, or for n < 0 the exact quotient x / 2^-n rounded by mode, in Python's
    integers, then saturated to x's 64-bit type (uint64 stays unsigned)."""
    x = np.asarray(x)
    lo, hi = (0, 2**64 - 1) if x.dtype == np.uint64 else (-(2**63), 2**63 - 1)
    rounding = _ROUND[mode]

    def one(v: int, k: int) -> int:
        k = max(-70, min(70, int(k)))
        exact = int(v) * 2**k if k >= 0 else rounding(Fraction(int(v), 2**-k))
        return max(lo, min(hi, exact))

    out = np.frompyfunc(one, 2, 1)(x, np.asarray(n))
    return np.asarray(out, np.uint64 if x.dtype == np.uint64 else np.int64)


class Shift(Elementwise):
    """x shifted by a count (a tensor or a number): `sign` 1 shifts left for positive counts,
    -1 right; `mode` rounds right shifts (a fixed RoundingMode, or the `rounding_mode` param)."""

    def __init__(self, name: str, sign: int, mode: int | None = None, count: str = "tensor_num", scalar: bool = False,
                 allowed: tuple[str, ...] = SHIFTS, per_channel: bool = False) -> None:
        inputs = ("tensor_i",) if scalar else ("tensor_i", count)
        order = ("tensor_i", count) + (("rounding_mode",) if mode is None else ())
        super().__init__(name, "lshift" if sign > 0 else "rshift", None, inputs, (count,) if scalar else (), order=order,
                         dtypes_allowed=allowed)
        self.sign, self.mode, self.count, self.per_channel = sign, mode, count, per_channel

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.mode is None:
            params["rounding_mode"] = dtypes.rounding(params["rounding_mode"])
        if self.count in self.scalars:
            check_number(params[self.count], f"{self.name} {self.count}", integer=True)
        return params

    restricted = 1  # the shifted tensor; a count tensor is any integer type

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) == 2 and not dtypes.is_int(ins[1].dtype):
            raise UnsupportedError(f"{self.name}: the count {ins[1].dtype} must be an integer tensor")
        outs = super().infer(ins, params)
        if self.mode is None and dtypes.is_int(outs[0].dtype) and outs[0].dtype.startswith("u") != ins[0].dtype.startswith("u"):
            raise UnsupportedError(f"{self.name}: input {ins[0].dtype} and output {outs[0].dtype} must both be signed or both unsigned")
        return outs

    def out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        return params.get("out_dtype") or ins[0].dtype

    def operand_shape(self, i: int, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """A per-channel count is a vector along dimension 0 (the seed: shape [tensor_i.shape(0)])."""
        if self.per_channel and i == 1:
            return (shapes[1][0],) + (1,) * (len(shapes[0]) - 1)
        return shapes[i]

    def _mode(self, params: dict[str, Any]) -> int:
        return self.mode if self.mode is not None else params["rounding_mode"]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        count = params[self.count] if self.count in self.scalars else In(1)
        return [Step(self.vector_fn(), (In(0), count, self._mode(params)))]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        return lambda x, n: shifted(x, self.sign * np.asarray(n, np.int64), self._mode(params))


class RoundRshift(Shift):
    """round_rshift(s): round half up for a count > 0; a count <= 0 leaves the value as it is."""

    def __init__(self, name: str, scalar: bool) -> None:
        super().__init__(name, -1, dtypes.HALF_UP, scalar=scalar, count="scalar_num" if scalar else "tensor_num",
                         allowed=("int8", "uint8", "int16", "uint16", "int32"))

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [] if self.count in self.scalars else [ins[1]]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        if self.count in self.scalars:
            return [Step("rshift", (In(0), max(params[self.count], 0), dtypes.HALF_UP))]
        return [Step("max", (In(1), 0), Tmp(0)), Step("rshift", (In(0), Tmp(0), dtypes.HALF_UP))]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        return lambda x, n: shifted(x, -np.maximum(np.asarray(n, np.int64), 0), dtypes.HALF_UP)


_DOWN = dtypes.DOWN
arith_lshift = define(Shift("arith_lshift", 1, _DOWN), "Shift tensor_i left by tensor_num (negative: arithmetic right shift).")
arith_lshifts = define(Shift("arith_lshifts", 1, _DOWN, "scalar_num", scalar=True), "Shift tensor_i left by scalar_num (negative: right).")
arith_rshift = define(Shift("arith_rshift", -1, _DOWN), "Arithmetic right shift of tensor_i by tensor_num (negative: left shift).")
arith_rshifts = define(Shift("arith_rshifts", -1, _DOWN, "scalar_num", scalar=True),
                       "Arithmetic right shift by scalar_num (negative: left).")
round_rshift = define(RoundRshift("round_rshift", scalar=False), "Right shift by tensor_num rounding half up; counts <= 0 change nothing.")
round_rshifts = define(RoundRshift("round_rshifts", scalar=True),
                       "Right shift by scalar_num rounding half up; a count <= 0 changes nothing.")
arithmetic_shift = define(Shift("arithmetic_shift", 1, count="shift", scalar=True),
                          "Shift by `shift` (negative: right, rounded by rounding_mode).")
arithmetic_pc_shift = define(Shift("arithmetic_pc_shift", 1, count="tensor_shift", per_channel=True),
                             "Shift each dimension-0 slice by its tensor_shift entry (negative: right, rounded).")
logical_shift = define(Shift("logical_shift", 1, count="shift", scalar=True, allowed=UNSIGNED), "Logical shift of unsigned tensor_i.")
logical_pc_shift = define(Shift("logical_pc_shift", 1, count="tensor_shift", per_channel=True, allowed=UNSIGNED),
                          "Logical shift of unsigned tensor_i, per dimension-0 slice.")

bit_and = define(Elementwise("bit_and", "and", np.bitwise_and, dtypes_allowed=BITWISE), "tensor_o = tensor_i0 & tensor_i1.")
bit_or = define(Elementwise("bit_or", "or", np.bitwise_or, dtypes_allowed=BITWISE), "tensor_o = tensor_i0 | tensor_i1.")
bit_xor = define(Elementwise("bit_xor", "xor", np.bitwise_xor, dtypes_allowed=BITWISE), "tensor_o = tensor_i0 ^ tensor_i1.")
bit_ands = define(Elementwise("bit_ands", "and", np.bitwise_and, ("tensor_i",), ("scalar_i",), dtypes_allowed=BITWISE),
                  "tensor_o = tensor_i & scalar_i.")
bit_ors = define(Elementwise("bit_ors", "or", np.bitwise_or, ("tensor_i",), ("scalar_i",), dtypes_allowed=BITWISE),
                 "tensor_o = tensor_i | scalar_i.")
bit_xors = define(Elementwise("bit_xors", "xor", np.bitwise_xor, ("tensor_i",), ("scalar_i",), dtypes_allowed=BITWISE),
                  "tensor_o = tensor_i ^ scalar_i.")
