"""Constant tensors made on the machine: one DMA writing a constant (isa/lower/templates/arrange.py).

    number_like(tensor_like, scalar_i)   BMLang (seed 002 line 1188): tensor_like's shape and dtype,
                                         every element scalar_i; nothing of tensor_like is read
    fill(out_dim, value, dtype)          Ascend ATB Fill without mask (seed 000): shape out_dim,
                                         every element value[0]
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from .arrange import Arrangement, dense, fill_piece, fill_value, ints
from .base import Spec, apply_one, register

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Graph, Tensor
    from isa.ops.arrange import Piece


class Constant(Arrangement):
    """An output every element of which is params[`param`]; a global op (number_like: seed
    line 1194; the ATB document gives Fill no class, and it reads nothing)."""

    kind = "global"
    param: str  # the param holding the value

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        return [fill_piece(dense(out_shape), params[self.param])]


class NumberLike(Constant):
    name = "number_like"  # a global op (seed line 1194)
    param = "scalar_i"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        like = ins[0]
        fill_value(params["scalar_i"], like.dtype, self.name, "scalar_i")  # "tensor_o和scalar_i的数据类型要求一致"
        return [Spec(like.shape, like.dtype)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [np.full(arrays[0].shape, params["scalar_i"], arrays[0].dtype)]


NUMBER_LIKE = register(NumberLike())


def number_like(tensor_like: Tensor, scalar_i: float, name: str | None = None) -> Tensor:
    """A tensor of tensor_like's shape and dtype, every element scalar_i."""
    return apply_one(NUMBER_LIKE, [tensor_like], {"scalar_i": scalar_i}, name)


class Fill(Constant):
    name = "fill"
    seed = "atb"
    param = "value"
    DTYPES = ("float16", "int32", "bfloat16")  # the seed's x/output dtypes

    def infer(self, ins: list[Any], params: dict[str, Any]) -> list[Spec]:
        dtype = params["dtype"]
        if dtype not in self.DTYPES:
            raise UnsupportedError(f"fill: dtype {dtype!r} is not supported (the seed: {', '.join(self.DTYPES)})")
        fill_value(params["value"], dtype, self.name, "value")
        return [Spec(params["out_dim"], dtype)]

    def reference(self, arrays: list[Any], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [np.full(params["out_dim"], params["value"], dtypes.np_dtype(params["dtype"]))]


FILL = register(Fill())


def fill(out_dim: Sequence[int], value: list[int] | int, dtype: str, graph: Graph | None = None, name: str | None = None) -> Tensor:
    """A tensor of shape out_dim, every element value (a number or the seed's one-element
    list). It has no tensor operand: it goes to `graph`, or to the graph of `with graph:`."""
    out_dim = ints(out_dim, "fill", "out_dim", low=1)
    if not out_dim:
        raise ShapeError("fill: out_dim needs at least one dimension, got []")
    if isinstance(value, (Sequence, np.ndarray)):
        if len(value) != 1:
            raise ShapeError(f"fill: value must hold exactly one element (the seed: value.size() == 1), got {len(value)}: {list(value)}")
        (value,) = value
    return apply_one(FILL, [], {"out_dim": out_dim, "value": value, "dtype": dtype}, name, graph=graph)
