"""Activations (the seed's active and active_param with its ActiveType) and the Triangle
Operator section (sin, cos)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import UnsupportedError
from .elementwise import Elementwise, In, Step, check_number, define

# ActiveType (short name) -> (vector function, reference on compute-dtype values)
ACTIVE_TYPES: dict[str, tuple[str, Callable[..., Any] | None]] = {  # name -> (vector function, reference; leaky_relu reads its slope)
    "tanh": ("tanh", np.tanh),
    "sigmoid": ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    "relu": ("relu", lambda x: np.maximum(x, 0)),
    "exp": ("exp", np.exp),
    "elu": ("elu", lambda x: np.where(x > 0, x, np.expm1(x))),
    "sqrt": ("sqrt", np.sqrt),
    "square": ("square", np.square),
    "rsqrt": ("rsqrt", lambda x: 1 / np.sqrt(x)),
    "absval": ("abs", np.abs),
    "ln": ("ln", np.log),
    "round": ("round", dtypes.round_half_away),
    "ceil": ("ceil", np.ceil),
    "floor": ("floor", np.floor),
    "sin": ("sin", np.sin),
    "cos": ("cos", np.cos),
    "leaky_relu": ("leaky_relu", None),
}


class Active(Elementwise):
    """active(tensor_i, active_type) and active_param(tensor_i, active_type, params): the
    seed's ActiveType by enum name or short name ("ACTIVE_RELU", "relu"). Only leaky_relu reads
    params (its negative slope); without one, leaky_relu is relu (slope 0), as the seed says."""

    variants = tuple(ACTIVE_TYPES)

    def __init__(self, name: str, with_params: bool) -> None:
        order = ("tensor_i", "active_type") + (("params",) if with_params else ())
        super().__init__(name, None, None, ("tensor_i",), order=order, defaults={"params": []} if with_params else {})

    def prepare(self, params: dict[str, Any]) -> dict[str, str | float | None]:
        kind = str(params["active_type"]).lower().removeprefix("active_")
        if kind not in ACTIVE_TYPES:
            raise UnsupportedError(f"{self.name}: unknown active_type {params['active_type']!r}; known: {', '.join(ACTIVE_TYPES)}")
        slopes = list(params.get("params") or [])
        slope = check_number(slopes[0], f"{self.name} negative slope") if kind == "leaky_relu" and slopes else 0.0
        return {"active_type": kind, "slope": float(slope), "out_dtype": params["out_dtype"]}

    def variant(self, params: dict[str, Any]) -> str | None:
        return params["active_type"]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        fn = ACTIVE_TYPES[params["active_type"]][0]
        operands = (In(0), params["slope"]) if fn == "leaky_relu" else (In(0),)
        # integer relu/absval stay exact; a slope or a transcendental function needs floats
        exact = (dtypes.is_int(ins[0]) and fn in ("relu", "abs")) or (params["slope"] == 0.0 and fn == "leaky_relu")
        return [Step(fn, operands, cdt=None if exact or dtypes.is_float(ins[0]) else "float32")]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        if params["active_type"] == "leaky_relu":
            slope = params["slope"]
            return lambda x: np.where(x > 0, x, x * x.dtype.type(slope))
        ref = ACTIVE_TYPES[params["active_type"]][1]
        if ref is None:
            raise NotImplementedError(f"active: {params['active_type']} has no reference function")
        return ref


active = define(Active("active", with_params=False), "tensor_o = activation(tensor_i), active_type one of the seed's ActiveType.")
active_param = define(Active("active_param", with_params=True), "active with float params: params[0] is leaky_relu's negative slope.")
sin = define(Elementwise("sin", "sin", np.sin, ("tensor_i",)), "tensor_o = sin(tensor_i).")
cos = define(Elementwise("cos", "cos", np.cos, ("tensor_i",)), "tensor_o = cos(tensor_i).")
