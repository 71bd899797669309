"""Fixed point with a rounding shift (the seed's mul_shift ... rsubs_shift):

    tensor_o = saturate((a OP b) >> shift)

where a OP b is kept as an INT32 intermediate (saturated there) and >> is the seed's rounding
arithmetic right shift, `((x >> (shift - 1)) + 1) >> 1` for shift > 0 (round half up)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from .base import Spec
from .elementwise import Elementwise, In, Step, Tmp, check_number, define

_OPS = {"mul": np.multiply, "add": np.add, "sub": np.subtract}


class ShiftedArith(Elementwise):
    def __init__(self, name: str, fn: str, inputs: tuple[str, ...], scalars: tuple[str, ...] = (),
                 order: tuple[str, ...] | None = None) -> None:
        super().__init__(name, fn, _OPS[fn], inputs, scalars, order=order or tuple(inputs) + tuple(scalars) + ("shift",))

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        check_number(params["shift"], f"{self.name} shift", integer=True, low=0, high=31)
        return params

    def within_int32(self, params: dict[str, Any], ins: list[str]) -> bool:
        """Whether a OP b always fits INT32 (integer operands of known range), so that saturating
        the intermediate never acts and one instruction may do the op and the shift."""
        if not all(dtypes.is_int(d) for d in ins):
            return False
        sizes = [max(-lo, hi) for lo, hi in map(dtypes.int_range, ins)] + [abs(int(params[s])) for s in self.scalars]
        bound = sizes[0] * sizes[1] if self.vector_fn() == "mul" else sizes[0] + sizes[1]
        return bound <= dtypes.int_range("int32")[1]

    def fused(self, params: dict[str, Any], ins: list[str]) -> bool:
        """One step where the intermediate cannot saturate: the op stored straight into the
        result when there is no shift, and a multiply with its rounding shift as one `mul_rshift`
        (BM1684X's integer multiply takes the shift, its rounding and the saturation in one
        instruction: tpu_bdc_int_mul in TPU-Kernel's tpu_kernel.h, github.com/sophgo/tpu-mlir,
        third_party/customlayer/include/kernel/tpu_kernel.h at 3a6c7e0)."""
        return (params["shift"] == 0 or self.vector_fn() == "mul") and self.within_int32(params, ins)

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [] if self.fused(params, ins) else ["int32"]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        operands = self._ordered([In(i) for i in range(self.tensors)], [params[s] for s in self.scalars])
        if self.fused(params, ins):
            if params["shift"] == 0:
                return [Step(self.vector_fn(), operands, cdt="int64")]
            return [Step("mul_rshift", (*operands, params["shift"], dtypes.HALF_UP), cdt="int64")]
        return [
            Step(self.vector_fn(), operands, Tmp(0), cdt="int64"),
            Step("rshift", (Tmp(0), params["shift"], dtypes.HALF_UP), cdt="int64"),
        ]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        out = self.infer([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)[0]
        values = self._ordered([a.astype(np.int64) for a in arrays], [np.int64(params[s]) for s in self.scalars])
        intermediate = dtypes.convert(self.ref_fn(params)(*values), "int32").astype(np.int64)
        shift = params["shift"]
        rounded = (intermediate + (1 << (shift - 1))) >> shift if shift > 0 else intermediate
        return [dtypes.convert(np.broadcast_to(rounded, out.shape), out.dtype)]


_TWO = ("tensor_i0", "tensor_i1")
_ONE = ("tensor_i",)
mul_shift = define(ShiftedArith("mul_shift", "mul", _TWO), "tensor_o = (tensor_i0 * tensor_i1) >> shift, rounding half up.")
add_shift = define(ShiftedArith("add_shift", "add", _TWO), "tensor_o = (tensor_i0 + tensor_i1) >> shift, rounding half up.")
sub_shift = define(ShiftedArith("sub_shift", "sub", _TWO), "tensor_o = (tensor_i0 - tensor_i1) >> shift, rounding half up.")
muls_shift = define(ShiftedArith("muls_shift", "mul", _ONE, ("scalar",)), "tensor_o = (tensor_i * scalar) >> shift, rounding half up.")
adds_shift = define(ShiftedArith("adds_shift", "add", _ONE, ("scalar",)), "tensor_o = (tensor_i + scalar) >> shift, rounding half up.")
subs_shift = define(ShiftedArith("subs_shift", "sub", _ONE, ("scalar",)), "tensor_o = (tensor_i - scalar) >> shift, rounding half up.")
rsubs_shift = define(
    ShiftedArith("rsubs_shift", "sub", _ONE, ("scalar",), order=("scalar", "tensor_i", "shift")),
    "tensor_o = (scalar - tensor_i) >> shift, rounding half up.",
)
