"""How data-arrangement ops describe their outputs for the DMA template (isa/lower/templates/arrange.py):
as pieces, each a strided view of one input copied to a strided view of one output, or a
constant written into a view of an output (a fill). Also the helpers the arrangement ops share:
dense strides, per-axis segments assembled into pieces, and their parameter checks.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef

if TYPE_CHECKING:
    from isa.ops.base import Spec


@dataclass(frozen=True)
class View:
    """A strided view of a dense tensor, in elements: a zero stride repeats, a negative one walks
    back, an offset selects."""

    offset: int
    shape: tuple
    strides: tuple


@dataclass(frozen=True)
class Piece:
    """Elements written into view `dst` of output `output`: view `src` of input `input`, or for
    a fill (input None) the constant `value` (a number of the output's dtype)."""

    input: int | None
    src: View | None
    dst: View
    output: int = 0
    value: object = None


class Arrangement(OpDef):
    """An op the arrange template runs: its `pieces(shapes, out_shape, params)` describe its
    outputs (`shapes` its inputs', `out_shape` its first output's)."""

    template = "arrange"

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        raise NotImplementedError


def fill_piece(dst: View, value: float, output: int = 0) -> Piece:
    return Piece(None, None, dst, output, value)


def strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def dense(shape: tuple[int, ...], offset: int = 0) -> View:
    return View(offset, tuple(shape), strides(shape))


@dataclass(frozen=True)
class Segment:
    """`count` output indices along one axis from index `at`, read from input index `start` on,
    `step` apart (0 repeats one index, negative walks back); a fill segment (`start` None)
    writes the constant instead."""

    at: int
    count: int
    start: int | None = None
    step: int = 1


def whole(n: int) -> Segment:
    """A whole axis of n, copied in order."""
    return Segment(0, n, 0)


def assemble(axes: list[list[Segment]], src_strides: tuple[int, ...], dst_strides: tuple[int, ...], input: int = 0, output: int = 0,
             value: float | None = None, dst_offset: int = 0) -> list[Piece]:
    """The pieces of a box of the output given, per axis, the segments that tile it: one copy
    per combination of copy segments, and one fill per fill segment met, which covers every
    later axis whole (so a constant border is 2 pieces per axis, not 3^rank blocks)."""
    pieces = []

    def walk(axis: int, src_at: int, dst_at: int, shape: tuple[int, ...], src_steps: tuple[int, ...], dst_steps: tuple[int, ...]) -> None:
        if axis == len(axes):
            pieces.append(Piece(input, View(src_at, shape, src_steps), View(dst_at, shape, dst_steps), output))
            return
        for seg in axes[axis]:
            at = dst_at + seg.at * dst_strides[axis]
            if seg.start is None:
                if value is None:
                    raise ValueError("assemble: a fill segment needs the fill value")
                rest = [(min(s.at for s in segs), max(s.at + s.count for s in segs)) for segs in axes[axis + 1:]]
                at += sum(lo * st for (lo, _), st in zip(rest, dst_strides[axis + 1:]))
                box = shape + (seg.count,) + tuple(hi - lo for lo, hi in rest)
                pieces.append(fill_piece(View(at, box, dst_steps + tuple(dst_strides[axis:])), value, output))
            else:
                walk(axis + 1, src_at + seg.start * src_strides[axis], at, shape + (seg.count,),
                     src_steps + (seg.step * src_strides[axis],), dst_steps + (dst_strides[axis],))

    walk(0, 0, dst_offset, (), (), ())
    return pieces


# ---- parameter checks ----------------------------------------------------------------------

def ints(values: Sequence[int], op: str, param: str, length: int | None = None, low: int | None = None) -> tuple[int, ...]:
    """`values` as a tuple of ints, each >= `low`, `length` of them when given."""
    try:
        out = tuple(values)
    except TypeError:
        raise ShapeError(f"{op}: {param} must be a list of integers, got {values!r}") from None
    if not all(isinstance(v, Integral) and not isinstance(v, bool) for v in out):
        raise ShapeError(f"{op}: {param} must be integers, got {list(out)}")
    out = tuple(int(v) for v in out)
    if length is not None and len(out) != length:
        raise ShapeError(f"{op}: {param} needs {length} values, got {len(out)}: {list(out)}")
    if low is not None and any(v < low for v in out):
        raise ShapeError(f"{op}: every {param} value must be >= {low}, got {list(out)}")
    return out


def integer(value: int, op: str, param: str, low: int | None = None) -> int:
    """`value` as an int, >= `low` when given."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ShapeError(f"{op}: {param} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ShapeError(f"{op}: {param} must be >= {low}, got {value}")
    return int(value)


def axis_of(axis: int, rank: int, op: str) -> int:
    """A non-negative axis of a rank-`rank` tensor (the seed counts axes from 0)."""
    if isinstance(axis, bool) or not isinstance(axis, Integral) or not 0 <= axis < rank:
        raise ShapeError(f"{op}: axis must be in [0, {rank - 1}] for a rank-{rank} tensor, got {axis!r}")
    return int(axis)


def fill_value(value: float, dtype: str, op: str, param: str) -> float | int:
    """`value` as the `dtype` number a fill writes: any number for a float dtype (it rounds, but
    must not overflow), an integral one in range for an integer dtype."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UnsupportedError(f"{op}: {param} must be a number, got {value!r}")
    if dtypes.is_int(dtypes.check(dtype)):
        lo, hi = dtypes.int_range(dtype)
        if not float(value).is_integer() or not lo <= value <= hi:
            raise UnsupportedError(f"{op}: {param} must be an integer in [{lo}, {hi}] for {dtype}, got {value!r}")
        return int(value)
    with np.errstate(over="ignore"):
        rounded = np.array(value, dtypes.np_dtype(dtype))
    if np.isfinite(value) and not np.isfinite(rounded):
        raise UnsupportedError(f"{op}: {param} {value!r} overflows {dtype}")
    return float(value)


def known_ints(tensor: Tensor | np.ndarray, op: str, param: str) -> tuple[int, ...]:
    """The values of an int32 vector operand, which must be known when the graph is built: the
    simulator plans memory before the run, so a shape may not wait for data."""
    if isinstance(tensor, np.ndarray):
        values = tensor
    elif isinstance(tensor, Tensor):
        known = tensor.graph.known(tensor)
        if known is None:
            raise ShapeError(f"{op}: {param} ({tensor.name}) must be a constant tensor (or computed from shapes alone): "
                             "shapes are fixed when the graph is built")
        values = known
    else:
        raise ShapeError(f"{op}: {param} must be an int32 tensor, got {type(tensor).__name__}")
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


def check_vector_operand(spec: Spec, length: int, op: str, param: str) -> None:
    """An int32 vector operand of `length` elements."""
    if spec.dtype != "int32" or len(spec.shape) != 1 or spec.shape[0] != length:
        raise ShapeError(f"{op}: {param} must be an int32 vector of {length} elements, got {spec.dtype} {spec.shape}")


def same_dtype(ins: list[Spec], op: str) -> str:
    if len({s.dtype for s in ins}) > 1:
        raise UnsupportedError(f"{op}: every input must have one dtype, got {[s.dtype for s in ins]}")
    return ins[0].dtype
