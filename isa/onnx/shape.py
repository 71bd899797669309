"""Shape and data-arrangement ONNX ops: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size,
Transpose, Tile, Expand, Slice, Concat, Split, Pad, SpaceToDepth, DepthToSpace.

Reshape-like ops are views (no instruction); the others are npusim's arrangement ops (DMA
descriptors). Their shape operands (a Reshape's shape, a Slice's starts, a Pad's pads) must be
known when the graph is built. Shape and Size are known from the static shapes, so shape
arithmetic on them folds at import time (importer.py `_map`: an op's `fold` rule runs when every input is known) and never waits for data.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from ..errors import GraphError, ShapeError
from .builder import Rank0
from .registry import folds, onnx_op

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output


def axis_of(b: Builder, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise b.error(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def axes_input(b: Builder, i: int, attr: str, rank: int) -> list[int] | None:
    """Axes from input i (opset 13+) or an attribute (before), normalized; None when absent."""
    if b.has(i):
        axes = b.static_ints(i, "axes")
    else:
        axes = b.attr(attr)
    if axes is None:
        return None
    return distinct_axes(b, axes, rank)


def distinct_axes(b: Builder, axes: list[int], rank: int) -> list[int]:
    """Axes normalized into [0, rank), each named once (ONNX refuses a repeated axis)."""
    out = [axis_of(b, int(a), rank) for a in axes]
    if len(set(out)) != len(out):
        raise b.error(f"axes {list(axes)} name an axis of rank {rank} more than once", GraphError)
    return out


def view(b: Builder, x: Tensor | NDArray[Any], shape: tuple[int, ...]) -> Tensor | NDArray[Any] | Rank0:
    """x (a tensor or a known array) in another shape; an empty shape is an ONNX scalar."""
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    t = b.reshape(x, shape)
    return Rank0(t) if tuple(shape) == () else t


def source(b: Builder, i: int = 0) -> Tensor | NDArray[Any]:
    known = b.known(i)
    return known if known is not None and known.dtype.kind in "iub" else b.tensor(i)


@onnx_op("Reshape", static=(1,))
def reshape(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    spec = b.static_ints(1, "shape")
    allowzero = b.attr("allowzero", 0)
    out, infer = [], None
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise b.error(f"shape[{i}] is 0 (keep the input's size) but the input {shape} has no axis {i}")
            d = shape[i]
        if d == -1:
            infer = i
            d = 1
        out.append(d)
    total = math.prod(shape)
    if infer is not None:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise b.error(f"shape {spec} cannot hold the input's {total} elements")
        out[infer] = total // rest
    if math.prod(out) != total or 0 in out:
        raise b.error(f"shape {spec} gives {tuple(out)}, which does not hold the input's {total} elements (or is empty)")
    return [view(b, source(b), tuple(out))]


@onnx_op("Flatten")
def flatten(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    axis = b.attr("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise b.error(f"axis {axis} is out of range [{-len(shape)}, {len(shape)}] for rank {len(shape)}", ShapeError)
    axis = axis + len(shape) if axis < 0 else axis
    return [view(b, source(b), (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@onnx_op("Squeeze", static=(1,))
def squeeze(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    axes = axes_input(b, 1, "axes", len(shape))
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    for a in axes:
        if shape[a] != 1:
            raise b.error(f"axis {a} has size {shape[a]}, not 1")
    return [view(b, source(b), tuple(d for i, d in enumerate(shape) if i not in axes))]


@onnx_op("Unsqueeze", static=(1,))
def unsqueeze(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    rank = len(shape)
    axes = b.static_ints(1, "axes") if b.has(1) else b.attr("axes")
    if axes is None:
        raise b.error("Unsqueeze needs axes")
    axes = sorted(distinct_axes(b, axes, rank + len(axes)))
    out, it = [], iter(shape)
    for i in range(rank + len(axes)):
        out.append(1 if i in axes else next(it))
    return [view(b, source(b), tuple(out))]


@onnx_op("Shape")
def shape_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    rank = len(shape)
    start, end = b.attr("start", 0), b.attr("end", rank)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return [np.array(shape[start:end], np.int64)]


@onnx_op("Size")
def size(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [np.array(math.prod(b.shape(0)), np.int64)]


@onnx_op("Transpose")
def transpose(b: Builder, node: NodeProto) -> Sequence[Output]:
    rank = b.rank(0)
    perm = b.attr("perm") or list(range(rank))[::-1]
    x = source(b)
    if isinstance(x, np.ndarray):
        return [np.transpose(x, perm)]
    moved = [int(p) for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):  # only unit axes move: the elements keep their order, a view
        return [b.reshape(x, [x.shape[p] for p in perm]) if list(perm) != list(range(rank)) else x]
    return [ops.permute(x, [int(p) for p in perm])]


@onnx_op("Tile", static=(1,))
def tile(b: Builder, node: NodeProto) -> Sequence[Output]:
    reps = b.static_ints(1, "repeats")
    if any(r < 1 for r in reps):
        raise b.error(f"repeats {reps} must be >= 1 (npusim tensors are not empty)")
    x = source(b)
    if isinstance(x, np.ndarray):
        b.check_size([d * r for d, r in zip((1,) * (len(reps) - x.ndim) + x.shape, reps)], x.dtype, "the tiled value")
        return [np.tile(x, reps)]
    return [ops.tile(x, reps) if any(r != 1 for r in reps) else x]


def expand_to(b: Builder, x: Tensor, target: tuple[int, ...]) -> Tensor:
    """x broadcast to `target` (numpy's bidirectional rule): a view to the rank, then a tile
    over the size-1 dimensions that grow."""
    shape = (1,) * (len(target) - len(x.shape)) + tuple(x.shape)
    out = tuple(max(a, c) for a, c in zip(shape, target))
    x = b.reshape(x, shape)
    reps = [o // s for o, s in zip(out, shape)]
    return ops.tile(x, reps) if any(r != 1 for r in reps) else x


@onnx_op("Expand", static=(1,))
def expand(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = tuple(b.static_ints(1, "shape"))
    in_shape = b.shape(0)
    rank = max(len(shape), len(in_shape))
    a = (1,) * (rank - len(in_shape)) + tuple(in_shape)
    c = (1,) * (rank - len(shape)) + shape
    for x, y in zip(a, c):
        if x != y and 1 not in (x, y):
            raise b.error(f"input {in_shape} does not broadcast to {shape}")
    out = tuple(max(x, y) if min(x, y) > 0 else 0 for x, y in zip(a, c))
    value = source(b)
    if isinstance(value, np.ndarray):
        return [np.broadcast_to(value, b.check_size(out, value.dtype, "the expanded value")).copy()]
    if 0 in out:
        raise b.error(f"the result {out} is empty; npusim tensors are not empty")
    expanded = expand_to(b, value, out)
    return [Rank0(expanded) if out == () else expanded]


def slice_bounds(b: Builder, shape: tuple[int, ...], starts: list[int], ends: list[int], axes: list[int] | None,
                 steps: list[int] | None) -> list[tuple[int, int, int]]:
    """Per axis of `shape`: (start, count, step) by ONNX's clamping rules."""
    rank = len(shape)
    plan = [(0, d, 1) for d in shape]
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = axis_of(b, int(a), rank)
        d = shape[a]
        if k == 0:
            raise b.error("a slice step of 0 is invalid")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if k > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            count = max(0, -(-(e - s) // k))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            count = max(0, -(-(s - e) // -k))
        plan[a] = (s, count, k)
    return plan


@onnx_op("Slice", static=(1, 2, 3, 4))
def slice_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    get = lambda i, what: b.static_ints(i, what) if b.has(i) else None  # noqa: E731
    starts, ends = b.static_ints(1, "starts"), b.static_ints(2, "ends")
    plan = slice_bounds(b, shape, starts, ends, get(3, "axes"), get(4, "steps"))
    x = source(b)
    if isinstance(x, np.ndarray):
        return [x[tuple(slice(s, s + n * k if s + n * k >= 0 else None, k) for s, n, k in plan)]]
    if any(n == 0 for _, n, _ in plan):  # nothing to move: known (an op that reads it is refused)
        return [np.empty([n for _, n, _ in plan], dtypes.np_dtype(x.dtype))]
    return [slice_tensor(b, x, plan)]


def slice_tensor(b: Builder, x: Tensor, plan: list[tuple[int, int, int]]) -> Tensor:
    """x sliced by (start, count, step) per axis: one extract for the forward steps, a gather
    along each axis read backwards."""
    if any(n == 0 for _, n, _ in plan):
        raise b.error(f"the slice of {x.shape} is empty; npusim tensors are not empty")
    forward = [(s, n, k) if k > 0 else (0, d, 1) for (s, n, k), d in zip(plan, x.shape)]
    if any((s, n, k) != (0, d, 1) for (s, n, k), d in zip(forward, x.shape)):
        x = ops.extract(x, [s for s, _, _ in forward], [s + (n - 1) * k + 1 for s, n, k in forward], [k for _, _, k in forward])
    for axis, (s, n, k) in enumerate(plan):
        if k < 0:
            x = gather_axis(b, x, np.arange(s, s + n * k, k), axis)
    return x


GATHER_DTYPES = ("float16", "float32", "bfloat16", "int32", "uint32", "int64")
WIDER = {"int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32", "bool": "int32"}


def gather_axis(b: Builder, x: Tensor, index: NDArray[Any], axis: int) -> Tensor:
    """x's slices along axis at the known positions `index` (1-D): a gather, its data widened
    to a dtype the gather moves and narrowed back (exactly) when needed."""
    data = x if x.dtype in GATHER_DTYPES else ops.cast(x, out_dtype=WIDER.get(x.dtype, x.dtype))
    out = ops.gather(data, b.const(np.asarray(index, np.int32)), axis)
    if out.dtype == x.dtype:
        return out
    return b.cast(out, x.dtype) if x.dtype != "bool" else ops.nes(out, 0, out_dtype="bool")


@onnx_op("Concat")
def concat(b: Builder, node: NodeProto) -> Sequence[Output]:
    axis = axis_of(b, b.attr("axis"), b.rank(0))
    parts = [i for i in range(b.count) if b.has(i) and 0 not in b.shape(i)]
    known = [k for k in (b.known(i) for i in parts) if k is not None and k.dtype.kind in "iub"]
    if len(known) == len(parts):
        return [np.concatenate(known, axis=axis)]
    ts = [b.tensor(i) for i in parts]
    return [ops.concat(ts, axis) if len(ts) > 1 else ts[0]]


@onnx_op("Split", static=(1,))
def split(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    axis = axis_of(b, b.attr("axis", 0), len(shape))
    d = shape[axis]
    n = len(node.output)
    if b.has(1):
        sizes = b.static_ints(1, "split")
    elif b.attr("split") is not None:
        sizes = [int(v) for v in b.attr("split")]
    else:
        n = b.attr("num_outputs", n)
        if n < 1:
            raise b.error(f"num_outputs {n} must be >= 1", ShapeError)
        chunk = -(-d // n)
        sizes = [chunk] * (d // chunk) + ([d % chunk] if d % chunk else [])
    if sum(sizes) != d or len(sizes) != n:
        raise b.error(f"split {sizes} does not cut axis {axis} of size {d} into {n} parts")
    x = source(b)
    if isinstance(x, np.ndarray):
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    filled = [s for s in sizes if s]
    parts = iter([x] if len(filled) == 1 else ops.split(x, axis, len(filled), filled))
    empty = lambda: np.empty(shape[:axis] + (0,) + shape[axis + 1:], dtypes.np_dtype(x.dtype))  # noqa: E731
    return [next(parts) if s else empty() for s in sizes]


PAD_MODES: dict[str, str | None] = {"constant": "PAD_CONSTANT", "reflect": "PAD_REFLECT", "edge": "PAD_EDGE", "wrap": None}


@onnx_op("Pad", static=(1, 2, 3))
def pad(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    rank = len(x.shape)
    mode = b.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise b.reject("mode", mode, "constant, reflect, edge or wrap")
    pads = b.static_ints(1, "pads")
    axes = [axis_of(b, a, rank) for a in b.static_ints(3, "axes")] if b.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise b.error(f"pads {pads} needs 2 values per axis of {axes}")
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    value: float = 0
    if b.has(2) and mode == "constant":
        value = b.static(2, "constant_value").reshape(-1)[0].item()
    # negative pads crop first
    if any(p < 0 for p in before + after):
        plan = [(max(-p, 0), d - max(-p, 0) - max(-q, 0), 1) for p, q, d in zip(before, after, x.shape)]
        x = slice_tensor(b, x, plan)
        before, after = [max(p, 0) for p in before], [max(q, 0) for q in after]
    if not any(before + after):
        return [x]
    if mode == "wrap":
        for a in range(rank):
            d = x.shape[a]
            if before[a] > d or after[a] > d:
                raise b.error(f"wrap padding {before[a]}, {after[a]} is more than axis {a}'s size {d}")
            parts = []
            if before[a]:
                parts.append(slice_tensor(b, x, [(d - before[a], before[a], 1) if i == a else (0, n, 1) for i, n in enumerate(x.shape)]))
            parts.append(x)
            if after[a]:
                parts.append(slice_tensor(b, x, [(0, after[a], 1) if i == a else (0, n, 1) for i, n in enumerate(x.shape)]))
            x = ops.concat(parts, a) if len(parts) > 1 else x
        return [x]
    if dtypes.is_int(x.dtype) or x.dtype == "bool":
        value = int(value)
    else:
        value = float(value)
    return [ops.pad(x, value, [p for pair in zip(before, after) for p in pair], PAD_MODES[mode] or "PAD_CONSTANT")]  # type: ignore[arg-type]  # isa/ops annotates a float pad value as int


@onnx_op("CenterCropPad", static=(1,))
def center_crop_pad(b: Builder, node: NodeProto) -> Sequence[Output]:
    """A centered window of each axis in `axes`: a slice where the target is smaller (from
    (dim - target) // 2), zeros around where it is larger ((target - dim) // 2 before)."""
    x = b.tensor(0)
    rank = len(x.shape)
    target = b.static_ints(1, "shape")
    axes = [axis_of(b, a, rank) for a in (b.attr("axes") or range(rank))]
    plan = [(0, d, 1) for d in x.shape]
    pads = [0] * (2 * rank)
    for a, t in zip(axes, target):
        d = x.shape[a]
        if t < d:
            plan[a] = ((d - t) // 2, t, 1)
        elif t > d:
            pads[2 * a], pads[2 * a + 1] = (t - d) // 2, t - d - (t - d) // 2
    if any(p != (0, d, 1) for p, d in zip(plan, x.shape)):
        x = slice_tensor(b, x, plan)
    if any(pads):
        x = ops.pad(x, 0 if dtypes.is_int(x.dtype) or x.dtype == "bool" else 0.0, pads)  # type: ignore[arg-type]  # as in pad
    return [x]


def blocksize(b: Builder) -> int:
    s = b.attr("blocksize")
    if s < 1:
        raise b.error(f"blocksize {s} must be >= 1", ShapeError)
    return s


@onnx_op("SpaceToDepth")
def space_to_depth(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    s = blocksize(b)
    n, c, h, w = x.shape
    if h % s or w % s:
        raise b.error(f"blocksize {s} does not divide H x W = {h} x {w}")
    mode = b.attr("mode", "DCR")  # CRD from opset 28
    if mode not in ("DCR", "CRD"):
        raise b.reject("mode", mode, "DCR or CRD")
    y = ops.permute(b.reshape(x, (n, c, h // s, s, w // s, s)), [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])
    return [b.reshape(y, (n, c * s * s, h // s, w // s))]


@onnx_op("DepthToSpace")
def depth_to_space(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    s = blocksize(b)
    mode = b.attr("mode", "DCR")
    n, c, h, w = x.shape
    if c % (s * s):
        raise b.error(f"blocksize {s} squared does not divide the {c} channels")
    if mode == "DCR":
        y = ops.permute(b.reshape(x, (n, s, s, c // (s * s), h, w)), [0, 3, 4, 1, 5, 2])
    elif mode == "CRD":
        y = ops.permute(b.reshape(x, (n, c // (s * s), s, s, h, w)), [0, 1, 4, 2, 5, 3])
    else:
        raise b.reject("mode", mode, "DCR or CRD")
    return [b.reshape(y, (n, c // (s * s), h * s, w * s))]


# ---- folding: arrangement of known index data ----------------------------------------------------

def _index(arrays: list[NDArray[Any]]) -> bool:
    return arrays[0] is not None and arrays[0].dtype.kind in "iub"


@folds("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Tile", "Expand", "Slice", "Split")
def fold_arrangement(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    """Known integer data rearranged at import time (the mappings do it on the known array)."""
    return None if not _index(arrays) else OPS_FN[node.op_type](b, node)


@folds("Concat")
def fold_concat(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    return None if not all(a.dtype.kind in "iub" for a in arrays if a is not None) else concat(b, node)


OPS_FN = {"Reshape": reshape, "Flatten": flatten, "Squeeze": squeeze, "Unsqueeze": unsqueeze, "Transpose": transpose, "Tile": tile,
          "Expand": expand, "Slice": slice_op, "Split": split}
