"""Arithmetic of the seed's "Base Element-wise Operator" section: tensor-tensor and
tensor-scalar arithmetic, axpy, copy, clamp, ceil/floor/round and cast."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import UnsupportedError
from .base import Spec
from .elementwise import Elementwise, In, Step, define

ONE = ("tensor_i",)
SCALAR = ("scalar",)

mul = define(Elementwise("mul", "mul", np.multiply), "tensor_o = tensor_i0 * tensor_i1, with shape broadcast.")
div = define(Elementwise("div", "div", np.divide), "tensor_o = tensor_i0 / tensor_i1, with shape broadcast (IEEE for x/0).")
add = define(Elementwise("add", "add", np.add), "tensor_o = tensor_i0 + tensor_i1, with shape broadcast.")
sub = define(Elementwise("sub", "sub", np.subtract), "tensor_o = tensor_i0 - tensor_i1, with shape broadcast.")
max = define(Elementwise("max", "max", np.maximum), "tensor_o = max(tensor_i0, tensor_i1), with shape broadcast.")  # noqa: A001
min = define(Elementwise("min", "min", np.minimum), "tensor_o = min(tensor_i0, tensor_i1), with shape broadcast.")  # noqa: A001

adds = define(Elementwise("adds", "add", np.add, ("tensor_i0",), SCALAR), "tensor_o = tensor_i0 + scalar.")
subs = define(Elementwise("subs", "sub", np.subtract, ("tensor_i0",), SCALAR), "tensor_o = tensor_i0 - scalar.")
muls = define(Elementwise("muls", "mul", np.multiply, ("tensor_i0",), SCALAR), "tensor_o = tensor_i0 * scalar.")
divs = define(Elementwise("divs", "div", np.divide, ("tensor_i0",), SCALAR), "tensor_o = tensor_i0 / scalar.")
maxs = define(Elementwise("maxs", "max", np.maximum, ("tensor_i0",), SCALAR), "tensor_o = max(tensor_i0, scalar).")
mins = define(Elementwise("mins", "min", np.minimum, ("tensor_i0",), SCALAR), "tensor_o = min(tensor_i0, scalar).")
rsubs = define(Elementwise("rsubs", "sub", np.subtract, ONE, SCALAR, order=("scalar", "tensor_i")), "tensor_o = scalar - tensor_i.")
rdivs = define(Elementwise("rdivs", "div", np.divide, ONE, SCALAR, order=("scalar", "tensor_i")), "tensor_o = scalar / tensor_i.")

axpy = define(
    Elementwise("axpy", "mul_add", lambda x, s, y: x * s + y, ("tensor_i", "tensor_o"), SCALAR, order=("tensor_i", "scalar", "tensor_o")),
    "scalar * tensor_i + tensor_o (the seed updates tensor_o in place; here the sum is a new tensor).",
)
clamp = define(
    Elementwise("clamp", "clamp", lambda x, low, high: np.minimum(np.maximum(x, low), high), ONE, ("min", "max")),
    "tensor_o = tensor_i limited to [min, max].",
)
ceil = define(Elementwise("ceil", "ceil", np.ceil, ONE), "tensor_o = ceil(tensor_i).")
floor = define(Elementwise("floor", "floor", np.floor, ONE), "tensor_o = floor(tensor_i).")
round = define(Elementwise("round", "round", dtypes.round_half_away, ONE),  # noqa: A001
               "tensor_o = round(tensor_i), halves away from zero (四舍五入).")


class Copy(Elementwise):
    """copy: the input dtype is the output dtype (seed); a global op."""

    kind = "global"

    def out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        if params.get("out_dtype") not in (None, ins[0].dtype):
            raise UnsupportedError(f"copy: the output dtype must be the input's ({ins[0].dtype}), got {params['out_dtype']}")
        return ins[0].dtype


copy = define(Copy("copy", "copy", lambda x: x, ONE), "tensor_o = tensor_i.")


class Cast(Elementwise):
    """cast: convert to `out_dtype`, saturating; floats become integers rounded half away from
    zero (the seed: 浮点向定点转换时,做四舍五入处理)."""

    def __init__(self) -> None:
        super().__init__("cast", "copy", None, ONE, defaults={})

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("out_dtype"):
            raise UnsupportedError("cast: out_dtype is required")
        return params

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        rounds = dtypes.is_float(ins[0]) and not dtypes.is_float(out)
        return [Step("round" if rounds else "copy", (In(0),), cdt=dtypes.compute_dtype(ins[0]))]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        return lambda x: dtypes.round_half_away(x) if x.dtype.kind == "f" and dtypes.is_int(params["out_dtype"]) else x


cast = define(Cast(), "tensor_o = tensor_i converted to out_dtype (saturating; float to integer rounds half away from zero).")
