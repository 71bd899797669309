"""Data-arrangement ops of the BMLang seed (seed lines 787-852, 897-904) that move elements
without computing: each is a few strided DMA transfers (isa/lower/templates/arrange.py).

    permute(tensor_i, order)                 axes reordered: one transfer reading with permuted strides
    tile(tensor_i, reps), broadcast(tensor_i, times), repeat(tensor_i, reps)
                                             the whole tensor repeated reps[i] times along axis i (the
                                             seed: broadcast is "a copy of tile", repeat "works as tile");
                                             one transfer whose source repeats with zero strides
    extract(tensor_i, start, end, stride)    every stride[i]-th index from start[i] below end[i]
    extract_v2(tensor_i, start, end, stride) the same with int32 vector operands known when built
    interleave(tensor_i0, tensor_i1, axis, step)   step-long runs along axis, taken in turn
    concat(tensor_i, axis), split(tensor_i, axis, num, size)   one transfer per part
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError
from .arrange import (
    Arrangement,
    Piece,
    Segment,
    View,
    assemble,
    axis_of,
    check_vector_operand,
    dense,
    integer,
    ints,
    known_ints,
    same_dtype,
    strides,
    whole,
)
from .base import Spec, apply_one, outputs, register

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Node, Tensor


class Permute(Arrangement):
    name = "permute"
    kind = "global"  # seed line 794

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x, order = ins[0], params["order"]
        if sorted(order) != list(range(len(x.shape))):
            raise ShapeError(f"permute: order must be a permutation of 0..{len(x.shape) - 1} for shape {x.shape}, got {list(order)}")
        return [Spec(tuple(x.shape[a] for a in order), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """One transfer: the input read with its strides in the new order."""
        st = strides(shapes[0])
        return [Piece(0, View(0, out_shape, tuple(st[a] for a in params["order"])), dense(out_shape))]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [np.transpose(arrays[0], params["order"])]


PERMUTE = register(Permute())


def permute(tensor_i: Tensor, order: list[int], name: str | None = None) -> Tensor:
    """Reorder the axes: output axis i is input axis order[i]."""
    return apply_one(PERMUTE, [tensor_i], {"order": ints(order, "permute", "order")}, name)


class Tile(Arrangement):
    """tile and its copies broadcast and repeat: `param` gives the copies per axis."""

    def __init__(self, name: str, kind: str, param: str) -> None:
        self.name, self.kind, self.param = name, kind, param

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x, reps = ins[0], params[self.param]
        if len(reps) != len(x.shape):
            raise ShapeError(f"{self.name}: {self.param} needs one count per dimension of shape {x.shape}, got {len(reps)}: {list(reps)}")
        return [Spec(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """One transfer over (reps[0], d[0], reps[1], d[1], ...): the source repeats along each
        reps dimension with stride 0, the destination steps a whole input extent there."""
        shape, reps, out_st = shapes[0], params[self.param], strides(out_shape)
        pairs = list(zip(reps, shape, strides(shape), out_st))
        src = View(0, sum(((r, d) for r, d, _, _ in pairs), ()), sum(((0, s) for _, _, s, _ in pairs), ()))
        dst = View(0, src.shape, sum(((d * t, t) for _, d, _, t in pairs), ()))
        return [Piece(0, src, dst)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [np.tile(arrays[0], params[self.param])]


# tile and broadcast: 受限本地操作 (local when reps[1] == 1, seed lines 801, 812); repeat: global (line 904)
TILE = register(Tile("tile", "local", "reps"))
BROADCAST = register(Tile("broadcast", "local", "times"))
REPEAT = register(Tile("repeat", "global", "reps"))


def tile(tensor_i: Tensor, reps: list[int], name: str | None = None) -> Tensor:
    """Repeat the whole tensor reps[i] times along each axis i (numpy's tile)."""
    return apply_one(TILE, [tensor_i], {"reps": ints(reps, "tile", "reps", low=1)}, name)


def broadcast(tensor_i: Tensor, times: list[int], name: str | None = None) -> Tensor:
    """As tile (the seed: broadcast is tile's copy): `times` copies along each axis."""
    return apply_one(BROADCAST, [tensor_i], {"times": ints(times, "broadcast", "times", low=1)}, name)


def repeat(tensor_i: Tensor, reps: list[int], name: str | None = None) -> Tensor:
    """As tile (the seed: 功能同tile, whole-tensor copies, not numpy's per-element repeat)."""
    return apply_one(REPEAT, [tensor_i], {"reps": ints(reps, "repeat", "reps", low=1)}, name)


class Extract(Arrangement):
    name = "extract"
    kind = "local"  # 受限本地操作: local unless it extracts along axis 1 (seed line 821)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = ins[0]
        rank = len(x.shape)
        for key in ("start", "end", "stride"):
            if len(params[key]) != rank:
                raise ShapeError(f"{self.name}: {key} needs {rank} values for shape {x.shape}, got {len(params[key])}: {list(params[key])}")
        out = []
        for i, (d, s, e, k) in enumerate(zip(x.shape, params["start"], params["end"], params["stride"])):
            if k < 1:
                raise ShapeError(f"{self.name}: stride[{i}] must be >= 1, got {k}")
            if not 0 <= s < e <= d:
                raise ShapeError(f"{self.name}: axis {i} of size {d} needs 0 <= start < end <= {d}, got start {s}, end {e}")
            out.append(-(-(e - s) // k))  # ceil((end - start) / stride), seed line 815
        return [Spec(tuple(out), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """One transfer: the input read from `start` with strides times `stride`."""
        axes = [[Segment(0, n, s, k)] for n, s, k in zip(out_shape, params["start"], params["stride"])]
        return assemble(axes, strides(shapes[0]), strides(out_shape))

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [arrays[0][tuple(slice(s, e, k) for s, e, k in zip(params["start"], params["end"], params["stride"]))]]


EXTRACT = register(Extract())


def extract(tensor_i: Tensor, start: list[int], end: list[int], stride: list[int], name: str | None = None) -> Tensor:
    """Every stride[i]-th index from start[i] up to (not including) end[i], along each axis."""
    params = {key: ints(v, "extract", key) for key, v in (("start", start), ("end", end), ("stride", stride))}
    return apply_one(EXTRACT, [tensor_i], params, name)


class ExtractV2(Extract):
    """extract with start, end and stride as int32 vector operands. The machine plans memory
    before it runs, so their values must be known when the graph is built: the op function
    copies them into params; the reference reads the operands themselves."""

    name = "extract_v2"
    kind = "global"  # seed line 828

    def checked_inputs(self, node: Node) -> int:
        return 1  # start/end/stride are INT32 on every chip (lines 825-827); infer checks that

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        for spec, key in zip(ins[1:], ("start", "end", "stride")):
            check_vector_operand(spec, len(ins[0].shape), self.name, key)
        return super().infer(ins[:1], params)

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        start, end, stride = (a.tolist() for a in arrays[1:])
        return [arrays[0][tuple(slice(s, e, k) for s, e, k in zip(start, end, stride))]]


EXTRACT_V2 = register(ExtractV2())


def extract_v2(tensor_i: Tensor, start: Tensor, end: Tensor, stride: Tensor, name: str | None = None) -> Tensor:
    """extract with start, end and stride given as int32 tensors whose values the graph knows."""
    params = {key: known_ints(t, "extract_v2", key) for key, t in (("start", start), ("end", end), ("stride", stride))}
    return apply_one(EXTRACT_V2, [tensor_i, start, end, stride], params, name)


class Interleave(Arrangement):
    name = "interleave"
    kind = "global"  # seed line 836

    def infer(self, ins: list[Spec], params: dict[str, int]) -> list[Spec]:
        a, b = ins
        if a.shape != b.shape:
            raise ShapeError(f"interleave: tensor_i0 and tensor_i1 must have one shape, got {a.shape} and {b.shape}")
        dtype = same_dtype(ins, self.name)
        axis = axis_of(params["axis"], len(a.shape), self.name)
        return [Spec(a.shape[:axis] + (2 * a.shape[axis],) + a.shape[axis + 1:], dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, int]) -> list[Piece]:
        """Per input, its whole runs of `step` in one transfer and its shorter last run (when
        the axis is no multiple of `step`; the seed's example is) in another."""
        shape, axis, step = shapes[0], params["axis"], params["step"]
        outer, d, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
        runs, tail = divmod(d, step)
        pieces = []
        for j in (0, 1):
            pieces.append(Piece(j, View(0, (outer, runs, step, inner), (d * inner, step * inner, inner, 1)),
                                View(j * step * inner, (outer, runs, step, inner), (2 * d * inner, 2 * step * inner, inner, 1))))
            pieces.append(Piece(j, View(runs * step * inner, (outer, tail, inner), (d * inner, inner, 1)),
                                View((2 * runs * step + j * tail) * inner, (outer, tail, inner), (2 * d * inner, inner, 1))))
        return pieces

    def reference(self, arrays: list[ndarray], params: dict[str, int], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        a, b = arrays
        axis, step = params["axis"], params["step"]
        take = lambda x, k: np.take(x, range(k, min(k + step, x.shape[axis])), axis=axis)  # noqa: E731
        return [np.concatenate([part for k in range(0, a.shape[axis], step) for part in (take(a, k), take(b, k))], axis=axis)]


INTERLEAVE = register(Interleave())


def interleave(tensor_i0: Tensor, tensor_i1: Tensor, axis: int, step: int, name: str | None = None) -> Tensor:
    """Runs of `step` indices along `axis`, from tensor_i0 and tensor_i1 in turn."""
    return apply_one(INTERLEAVE, [tensor_i0, tensor_i1], {"axis": axis, "step": integer(step, "interleave", "step", low=1)}, name)


class Concat(Arrangement):
    name = "concat"
    kind = "local"  # 受限本地操作: local when axis != 1 (seed line 844)
    list_input = True

    def infer(self, ins: list[Spec], params: dict[str, int]) -> list[Spec]:
        rank = len(ins[0].shape)
        axis = axis_of(params["axis"], rank, self.name)
        for k, s in enumerate(ins):
            if len(s.shape) != rank:
                raise ShapeError(f"concat: every input must have rank {rank} (as input 0), input {k} has shape {s.shape}")
            if s.shape[:axis] + s.shape[axis + 1:] != ins[0].shape[:axis] + ins[0].shape[axis + 1:]:
                raise ShapeError(f"concat: inputs must agree off axis {axis}: input 0 has shape {ins[0].shape}, input {k} {s.shape}")
        dtype = same_dtype(ins, self.name)
        return [Spec(ins[0].shape[:axis] + (sum(s.shape[axis] for s in ins),) + ins[0].shape[axis + 1:], dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, int]) -> list[Piece]:
        """One transfer per input, into its place along the axis."""
        axis, at, pieces = params["axis"], 0, []
        for k, shape in enumerate(shapes):
            axes = [[Segment(at, d, 0) if i == axis else whole(d)] for i, d in enumerate(shape)]
            pieces += assemble(axes, strides(shape), strides(out_shape), input=k)
            at += shape[axis]
        return pieces

    def reference(self, arrays: list[ndarray], params: dict[str, int], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [np.concatenate(arrays, axis=params["axis"])]


CONCAT = register(Concat())


def concat(tensor_i: list[Tensor], axis: int, name: str | None = None) -> Tensor:
    """Join a list of tensors along `axis`."""
    if not isinstance(tensor_i, (list, tuple)) or not tensor_i:
        raise ShapeError(f"concat: tensor_i must be a non-empty list of tensors, got {tensor_i!r}")
    return apply_one(CONCAT, list(tensor_i), {"axis": axis}, name)


class Split(Arrangement):
    name = "split"
    kind = "global"  # seed line 852

    def sizes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        """The parts' extents along the axis: `size`, or `num` equal parts when it is empty."""
        d, num, size = shape[params["axis"]], params["num"], params["size"]
        if not size:
            if d % num:
                raise ShapeError(f"split: axis {params['axis']} of size {d} does not split into num = {num} equal parts")
            return (d // num,) * num
        if len(size) != num:
            raise ShapeError(f"split: size needs num = {num} values, got {len(size)}: {list(size)}")
        if sum(size) != d:
            raise ShapeError(f"split: size must add up to axis {params['axis']}'s {d}, got {list(size)} (sum {sum(size)})")
        return size

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = ins[0]
        axis = axis_of(params["axis"], len(x.shape), self.name)
        return [Spec(x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype) for n in self.sizes(x.shape, params)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """One transfer per output, from its place along the axis."""
        shape, axis = shapes[0], params["axis"]
        pieces, at = [], 0
        for k, n in enumerate(self.sizes(shape, params)):
            part = shape[:axis] + (n,) + shape[axis + 1:]
            axes = [[Segment(0, n, at) if i == axis else whole(d)] for i, d in enumerate(part)]
            pieces += assemble(axes, strides(shape), strides(part), output=k)
            at += n
        return pieces

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        cuts = np.cumsum(self.sizes(arrays[0].shape, params))[:-1]
        return np.split(arrays[0], cuts, axis=params["axis"])


SPLIT = register(Split())


def split(tensor_i: Tensor, axis: int, num: int, size: list[int] | None = None, name: str | None = None) -> list[Tensor]:
    """`num` parts along `axis`: equal ones, or of the extents in `size`. Returns a list."""
    params = {"axis": axis, "num": integer(num, "split", "num", low=1), "size": ints(() if size is None else size, "split", "size", low=1)}
    return list(outputs(SPLIT, [tensor_i], params, name))
