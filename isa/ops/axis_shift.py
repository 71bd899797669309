"""The BMLang seed's tensor shifts (seed lines 1242-1300): a tensor moved along an axis by
`num` indices, as two DMA transfers.

    lshift(tensor_i, num, axis=1)    out[j] = in[j + num], zeros where that runs past the end
    rshift(tensor_i, num, axis=1)    out[j] = in[j - num], zeros before
    clshift(tensor_i, num, axis=1)   out[j] = in[(j + num) mod d]   (numpy's roll by -num)
    crshift(tensor_i, num, axis=1)   out[j] = in[(j - num) mod d]   (numpy's roll by num)

The seed supports axis 1 only ("目前默认且仅支持axis==1", line 1247); a shift of the axis's
size or more leaves only zeros, or wraps round for the circular ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from .arrange import Arrangement, Segment, assemble, integer, strides, whole
from .base import Spec, apply_one, register

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Tensor
    from isa.ops.arrange import Piece


class AxisShift(Arrangement):
    kind = "local"  # 本地操作 (seed lines 1256, 1271, 1286, 1301)

    def __init__(self, name: str, left: bool, circular: bool) -> None:
        self.name, self.left, self.circular = name, left, circular

    def infer(self, ins: list[Spec], params: dict[str, int]) -> list[Spec]:
        x = ins[0]
        if params["axis"] != 1:
            raise UnsupportedError(f"{self.name}: only axis 1 is supported (seed line 1247), got axis {params['axis']}")
        if len(x.shape) < 2:
            raise ShapeError(f"{self.name}: shifts along axis 1, so needs rank >= 2, got shape {x.shape}")
        return [Spec(x.shape, x.dtype)]

    def segments(self, d: int, num: int) -> list[Segment]:
        """The shifted axis: what each run of output indices reads."""
        if self.circular:
            k = num % d if self.left else (d - num % d) % d  # the index out[0] reads
            return [Segment(0, d - k, k), Segment(d - k, k, 0)]
        k = min(num, d)
        return [Segment(0, d - k, k), Segment(d - k, k)] if self.left else [Segment(0, k), Segment(k, d - k, 0)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, int]) -> list[Piece]:
        shape, axis = shapes[0], params["axis"]
        axes = [self.segments(d, params["num"]) if i == axis else [whole(d)] for i, d in enumerate(shape)]
        return assemble(axes, strides(shape), strides(shape), value=0)

    def reference(self, arrays: list[ndarray], params: dict[str, int], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        x, num, axis = arrays[0], params["num"], params["axis"]
        if self.circular:
            return [np.roll(x, -num if self.left else num, axis=axis)]
        d = x.shape[axis]
        out = np.zeros_like(x)
        k = min(num, d)
        moved = (slice(None),) * axis
        if self.left:
            out[moved + (slice(0, d - k),)] = x[moved + (slice(k, d),)]
        else:
            out[moved + (slice(k, d),)] = x[moved + (slice(0, d - k),)]
        return [out]


LSHIFT = register(AxisShift("lshift", left=True, circular=False))
RSHIFT = register(AxisShift("rshift", left=False, circular=False))
CLSHIFT = register(AxisShift("clshift", left=True, circular=True))
CRSHIFT = register(AxisShift("crshift", left=False, circular=True))


def _shift(opdef: AxisShift, tensor_i: Tensor, num: int, axis: int, name: str | None) -> Tensor:
    params = {"num": integer(num, opdef.name, "num", low=0), "axis": integer(axis, opdef.name, "axis")}
    return apply_one(opdef, [tensor_i], params, name)


def lshift(tensor_i: Tensor, num: int, axis: int = 1, name: str | None = None) -> Tensor:
    """Shift left along `axis` by `num`, filling with zeros on the right."""
    return _shift(LSHIFT, tensor_i, num, axis, name)


def rshift(tensor_i: Tensor, num: int, axis: int = 1, name: str | None = None) -> Tensor:
    """Shift right along `axis` by `num`, filling with zeros on the left."""
    return _shift(RSHIFT, tensor_i, num, axis, name)


def clshift(tensor_i: Tensor, num: int, axis: int = 1, name: str | None = None) -> Tensor:
    """Rotate left along `axis` by `num`: what leaves on the left comes back on the right."""
    return _shift(CLSHIFT, tensor_i, num, axis, name)


def crshift(tensor_i: Tensor, num: int, axis: int = 1, name: str | None = None) -> Tensor:
    """Rotate right along `axis` by `num`: what leaves on the right comes back on the left."""
    return _shift(CRSHIFT, tensor_i, num, axis, name)
