"""customed_ops: the seed's user-defined operator (002, lines 1234-1240), which runs a user CPU
layer. Here a user registers the op in Python and it runs on the chip's scalar engine:

    isa.ops.register_custom("softplus", compute, cost, infer=None)
        compute(arrays, params) -> list of arrays     what the op does, one array per output
        cost(src_shapes, dst_shapes, params) -> cycles on the scalar engine (its issue latency
                                                      is added)
        infer(specs, params) -> list of Spec          the outputs (default: one, with the first
                                                      input's shape and dtype)
    y = isa.ops.customed_ops([x], "softplus", {"beta": 1.0})

The Scalar instruction names the kernel "custom.<op_type>" and carries `params` as its
arguments, so they must be what a program's text can hold: numbers, short strings and tuples
of numbers. A program that runs a custom op needs the op registered in the process that runs it.
"""
from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Graph, Tensor
from ..instructions import CUSTOM_PREFIX, ScalarArg
from .base import OpDef, Spec, apply, register

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")  # a string argument: one word of program text


@dataclass(frozen=True)
class CustomOp:
    name: str
    compute: Callable  # (arrays, params) -> list of arrays
    cost: Callable  # (src shapes, dst shapes, params) -> cycles
    infer: Callable | None = None  # (specs, params) -> list of Spec


CUSTOM: dict[str, CustomOp] = {}  # op_type -> CustomOp; sim/kernels looks the kernel "custom.<op_type>" up here


def register_custom(name: str, compute: typing.Callable, cost: typing.Callable, infer: typing.Callable | None = None) -> CustomOp:
    """Register (or replace) the custom op `name` for customed_ops(..., op_type=name)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise GraphError(f"register_custom: name {name!r} must match {_NAME.pattern}")
    for what, fn in (("compute", compute), ("cost", cost), ("infer", infer)):
        if fn is not None and not callable(fn):
            raise GraphError(f"register_custom {name}: {what} must be callable, got {type(fn).__name__}")
    CUSTOM[name] = CustomOp(name, compute, cost, infer)
    return CUSTOM[name]


def lookup(op_type: str) -> CustomOp:
    if op_type not in CUSTOM:
        known = ", ".join(sorted(CUSTOM)) or "none"
        raise UnsupportedError(f"customed_ops: op_type {op_type!r} is not registered (registered: {known}); "
                               "register it with isa.ops.register_custom")
    return CUSTOM[op_type]


def _argument(key: str, value: object, op_type: str) -> ScalarArg:
    """A param value as an instruction argument: an int, a float, a word or a tuple of numbers."""
    where = f"customed_ops {op_type}: param {key!r}"
    if isinstance(value, str):
        if not _WORD.match(value) or _is_number(value):
            raise UnsupportedError(f"{where}: a string must be one word of at most 64 letters, digits, _ . - "
                                   f"starting with a letter or _ (and not a number), got {value!r}")
        return value
    if hasattr(value, "tolist"):  # a numpy array or scalar
        items = value.tolist()
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        return _scalar(value, where)
    if not isinstance(items, list):  # a numpy scalar
        return _argument(key, items, op_type)
    return tuple(_scalar(v, f"{where} element") for v in items)


def _scalar(value: object, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UnsupportedError(f"{where} must be a number, a word or a list of numbers, got {type(value).__name__} {value!r}")
    if isinstance(value, Integral):
        return int(value)
    if math.isnan(value):
        raise UnsupportedError(f"{where} is NaN, which a program cannot hold as an argument")
    return float(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class CustomedOps(OpDef):
    """A registered custom op on the scalar engine: params are op_type and param (the user's
    arguments); the reference is the user's compute function (the user's op means what it
    computes)."""

    name = "customed_ops"
    kind = "global"  # seed line 1240
    template = "scalar"
    list_input = True  # the seed's tensor_i is a vector of tensors

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        op = lookup(params["op_type"])
        if op.infer is not None:
            outs = op.infer(list(ins), dict(params["param"]))
        elif ins:
            outs = [Spec(ins[0].shape, ins[0].dtype)]
        else:
            raise ShapeError(f"customed_ops {op.name}: with no input tensor the op must say its outputs (register_custom infer=)")
        if not isinstance(outs, (list, tuple)) or not outs or not all(isinstance(s, Spec) for s in outs):
            raise GraphError(f"customed_ops {op.name}: infer must return a non-empty list of isa.ops.Spec, got {outs!r}")
        cycles = op.cost([s.shape for s in ins], [s.shape for s in outs], dict(params["param"]))
        if isinstance(cycles, bool) or not isinstance(cycles, Real) or not 0 <= float(cycles) < math.inf:
            raise GraphError(f"customed_ops {op.name}: cost must return a finite number of cycles >= 0, got {cycles!r}")
        return list(outs)

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return CUSTOM_PREFIX + params["op_type"], dict(params["param"])

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        return list(lookup(params["op_type"]).compute(list(arrays), dict(params["param"])))


CUSTOMED_OPS = register(CustomedOps())


def customed_ops(tensor_i: Sequence[Tensor], op_type: str, param: dict[str, Any] | None = None, name: str | None = None,
                 graph: Graph | None = None) -> Tensor | tuple[Tensor, ...]:
    """Run the registered custom op `op_type` on the tensors tensor_i with the arguments `param`
    (a dict of numbers, words and lists of numbers). Returns its output, or a tuple of them."""
    if isinstance(tensor_i, (str, bytes)) or not isinstance(tensor_i, Sequence):
        raise GraphError(f"customed_ops: tensor_i must be a list of tensors, got {type(tensor_i).__name__}")
    if not isinstance(op_type, str):
        raise UnsupportedError(f"customed_ops: op_type must be the name of a registered op, got {op_type!r}")
    lookup(op_type)
    param = {} if param is None else param
    if not isinstance(param, dict):
        raise UnsupportedError(f"customed_ops {op_type}: param must be a dict of arguments, got {type(param).__name__}")
    for key in param:
        if not isinstance(key, str) or not _NAME.match(key):
            raise UnsupportedError(f"customed_ops {op_type}: param name {key!r} must match {_NAME.pattern}")
    args = {key: _argument(key, value, op_type) for key, value in param.items()}
    return apply(CUSTOMED_OPS, list(tensor_i), {"op_type": op_type, "param": args}, name, graph=graph)
