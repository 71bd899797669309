"""Stride element-wise ops (the seed's stride_add ... stride_cpy_offset): element i of the
result combines the operands' elements at offset + i * stride in every dimension where the
operand is not broadcast (size 1); there stride and offset do not apply.

The DMA reads the operands with those strides, so these ops read their inputs from DDR: each
starts a layer group (later local ops may still fuse behind it)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError
from .base import Spec
from .elementwise import Elementwise, broadcast_shape, define

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy import ufunc


class Strided(Elementwise):
    strided = True

    def __init__(self, name: str, fn: str, ref: ufunc | Callable, inputs: tuple[str, ...], with_offset: bool) -> None:
        order = tuple(inputs) + ("stride",) + (("offset",) if with_offset else ())
        super().__init__(name, fn, ref, inputs, order=order)
        self.with_offset = with_offset

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        params["stride"] = [int(s) for s in params["stride"]]
        params["offset"] = [int(o) for o in params.get("offset") or [0] * len(params["stride"])]
        return params

    def _check(self, shape: tuple[int, ...], params: dict[str, Any]) -> None:
        stride, offset = params["stride"], params["offset"]
        if len(stride) != len(shape) or len(offset) != len(shape):
            raise ShapeError(f"{self.name}: stride {stride} and offset {offset} need one entry per dimension of {shape}")
        for n, st, off in zip(shape, stride, offset):
            if st < 1 or (not 0 <= off < n and n != 1):
                raise ShapeError(f"{self.name}: stride {st} must be >= 1 and offset {off} in [0, {n}) for a dimension of {n}")

    def strided_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        self._check(shape, params)
        return tuple(1 if n == 1 else math.ceil((n - off) / st) for n, st, off in zip(shape, params["stride"], params["offset"]))

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != self.tensors:
            raise ShapeError(f"{self.name}: takes {self.tensors} tensor(s), got {len(ins)}")
        shape = broadcast_shape([self.strided_shape(s.shape, params) for s in ins], self.name)
        return [Spec(shape, self.out_dtype(ins, params))]

    def load_kind(self, i: int, shapes: list[tuple[int, ...]], params: dict[str, Any]) -> tuple[object, ...]:
        return ("stride", tuple(params["stride"]), tuple(params["offset"]))

    def input_box(self, i: int, shape: tuple[int, ...], starts: tuple[int, ...], extents: tuple[int, ...],
                  params: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        pinned = [n == 1 for n in shape]
        return (
            tuple(0 if p else off + s * st for p, s, st, off in zip(pinned, starts, params["stride"], params["offset"])),
            tuple(1 if p else e for p, e in zip(pinned, extents)),
            tuple(1 if p else st for p, st in zip(pinned, params["stride"])),
        )

    def reference_operands(self, arrays: list[np.ndarray], params: dict[str, Any]) -> list[np.ndarray]:
        return [a[tuple(slice(None) if n == 1 else slice(off, None, st) for n, st, off in zip(a.shape, params["stride"], params["offset"]))]
                for a in arrays]


_TWO = ("tensor_i0", "tensor_i1")


def _doc(fn: str, offset: bool) -> str:
    where = "offset + i * stride" if offset else "i * stride"
    return f"tensor_o[i] = {fn}(tensor_i0[{where}], tensor_i1[{where}]) in every non-broadcast dimension."


stride_add = define(Strided("stride_add", "add", np.add, _TWO, False), _doc("add", False))
stride_sub = define(Strided("stride_sub", "sub", np.subtract, _TWO, False), _doc("sub", False))
stride_mul = define(Strided("stride_mul", "mul", np.multiply, _TWO, False), _doc("mul", False))
stride_div = define(Strided("stride_div", "div", np.divide, _TWO, False), _doc("div", False))
stride_max = define(Strided("stride_max", "max", np.maximum, _TWO, False), _doc("max", False))
stride_min = define(Strided("stride_min", "min", np.minimum, _TWO, False), _doc("min", False))
stride_cpy = define(Strided("stride_cpy", "copy", lambda x: x, ("tensor_i",), False), "tensor_o[i] = tensor_i[i * stride].")
stride_add_offset = define(Strided("stride_add_offset", "add", np.add, _TWO, True), _doc("add", True))
stride_sub_offset = define(Strided("stride_sub_offset", "sub", np.subtract, _TWO, True), _doc("sub", True))
stride_mul_offset = define(Strided("stride_mul_offset", "mul", np.multiply, _TWO, True), _doc("mul", True))
stride_div_offset = define(Strided("stride_div_offset", "div", np.divide, _TWO, True), _doc("div", True))
stride_max_offset = define(Strided("stride_max_offset", "max", np.maximum, _TWO, True), _doc("max", True))
stride_min_offset = define(Strided("stride_min_offset", "min", np.minimum, _TWO, True), _doc("min", True))
stride_cpy_offset = define(Strided("stride_cpy_offset", "copy", lambda x: x, ("tensor_i",), True),
                           "tensor_o[i] = tensor_i[offset + i * stride].")
