"""Indexed ONNX ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements, OneHot,
Trilu, CumSum, Compress, NonMaxSuppression.

npusim's gather (tf.gather: one indexed DMA) and scatter_nd (ONNX's) do the moving. ONNX's
negative indices count from the end: known indices are normalized when the graph is built;
Gather's run-time ones by its DMA as it reads them (the gather's `wrap`, as TPU-MLIR's gather
kernel takes them), the others' by element-wise steps on the machine (index + size where
index < 0), since arithmetic on them follows. GatherElements,
GatherND and ScatterElements index the data flattened: the flat index is computed from the
indices by element-wise steps and offsets known from the shapes. A gather moves float16,
float32, bfloat16, int32, uint32 and int64 rows: narrower integers and bools are widened to
int32 and narrowed back, exactly.

Compress is masked_select and NonMaxSuppression npusim's non_max_suppression (ONNX's, on the
scalar engine): the data size their results, so they can be graph outputs, not other ops'
operands. masked_select's result is 1-D: Compress with an axis of a tensor of rank 2 or more is
not supported.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from ..errors import IndexRangeError, ShapeError
from ..ops.gather import Gather
from .builder import Rank0
from .elementwise import narrow
from .registry import folds, onnx_op
from .shape import GATHER_DTYPES, WIDER, axis_of

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output


def fix_negative(t: Tensor, size: int) -> Tensor:
    """index + size where index < 0 (size a number, or a known array broadcasting against t)."""
    if isinstance(size, (int, np.integer)):
        return ops.add(t, ops.muls(ops.lts(t, 0), int(size)))
    return ops.add(t, ops.mul(ops.lts(t, 0), size))


def index_tensor(b: Builder, i: int, size: int) -> Tensor:
    """Input i as int64 indices in [0, size): normalized and range-checked when known."""
    known = b.known(i)
    if known is not None:
        idx = known.astype(np.int64)
        idx = np.where(idx < 0, idx + size, idx)
        bad = (idx < 0) | (idx >= size)
        if bad.any():
            raise IndexRangeError(f"{b.where()}: index {int(known[bad][0])} is out of range for a dimension of size {size}")
        return b.const(idx.reshape(idx.shape or (1,)))
    return fix_negative(narrow(run_time_index(b, i), "int64"), size)


def run_time_index(b: Builder, i: int) -> Tensor:
    """Input i, integer indices known only at run time, in a dtype the gather reads (int64 for
    the narrower ones)."""
    t = b.tensor(i)
    if not dtypes.is_int(t.dtype):
        raise b.error(f"indices must be integers, got {t.dtype}")
    return t if t.dtype in Gather.INDEX_DTYPES else narrow(t, "int64")


def gather_rows(b: Builder, data: Tensor, idx: Tensor, axis: int, wrap: bool = False) -> Tensor:
    """npusim's gather, with the data widened to a dtype it moves when needed."""
    if data.dtype in GATHER_DTYPES:
        return ops.gather(data, idx, axis, wrap=wrap)
    if data.dtype not in WIDER:
        raise b.error(f"a gather of {data.dtype} is not supported")
    out = ops.gather(ops.cast(data, out_dtype=WIDER[data.dtype]), idx, axis, wrap=wrap)
    return ops.nes(out, 0, out_dtype="bool") if data.dtype == "bool" else ops.cast(out, out_dtype=data.dtype)


@onnx_op("Gather")
def gather(b: Builder, node: NodeProto) -> Sequence[Output]:
    data = b.tensor(0)
    shape = b.shape(0)
    axis = axis_of(b, b.attr("axis", 0), len(shape))
    if b.known(1) is None:
        y = gather_rows(b, data, run_time_index(b, 1), axis, wrap=True)
    else:
        y = gather_rows(b, data, index_tensor(b, 1, shape[axis]), axis)
    if b.rank(1) == 0:  # a scalar index drops the axis
        out = shape[:axis] + shape[axis + 1:]
        return [Rank0(b.reshape(y, (1,))) if not out else b.reshape(y, out)]
    return [y]


def elements_index(b: Builder) -> tuple[Tensor, Tensor]:
    """(data, the flat index into data of data[i_0, ..., idx[i], ..., i_n] for each position i
    of the node's indices, row-major): idx * stride[axis] + the other coordinates' offsets
    (known), for GatherElements and ScatterElements."""
    data = b.tensor(0)
    shape = data.shape
    axis = axis_of(b, b.attr("axis", 0), len(shape))
    idx = index_tensor(b, 1, shape[axis])
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1].astype(np.int64)
    grids = np.indices(idx.shape, dtype=np.int64)
    base = sum(grids[j] * strides[j] for j in range(len(idx.shape)) if j != axis)
    base = np.asarray(base, np.int64).reshape(idx.shape)
    return data, ops.add(ops.muls(idx, int(strides[axis])), b.const(base))


@onnx_op("GatherElements")
def gather_elements(b: Builder, node: NodeProto) -> Sequence[Output]:
    data, flat = elements_index(b)
    return [gather_rows(b, b.reshape(data, (data.size,)), flat, 0)]


@onnx_op("GatherND")
def gather_nd(b: Builder, node: NodeProto) -> Sequence[Output]:
    data = b.tensor(0)
    shape = data.shape
    batch = b.attr("batch_dims", 0)
    idx_shape = b.shape(1)
    k = idx_shape[-1]
    dims = shape[batch:batch + k]
    rows = int(np.prod(dims, dtype=np.int64))
    strides = [int(np.prod(dims[j + 1:], dtype=np.int64)) for j in range(k)]
    known = b.known(1)
    if known is not None:
        idx = known.astype(np.int64)
        idx = np.where(idx < 0, idx + np.asarray(dims), idx)
        if ((idx < 0) | (idx >= np.asarray(dims))).any():
            raise IndexRangeError(f"{b.where()}: an index is out of range for dimensions {dims}")
        flat = (idx * np.asarray(strides)).sum(axis=-1)
        flat = flat + _batch_offsets(idx_shape[:-1], batch, rows)
        flat_t = b.const(flat.reshape(flat.shape or (1,)))
    else:
        t = narrow(b.tensor(1), "int64")
        flat_t = None
        for j in range(k):
            col = ops.extract(t, [0] * len(idx_shape[:-1]) + [j], list(idx_shape[:-1]) + [j + 1], [1] * len(idx_shape))
            col = b.reshape(fix_negative(col, dims[j]), idx_shape[:-1] or (1,))
            term = ops.muls(col, strides[j]) if strides[j] != 1 else col
            flat_t = term if flat_t is None else ops.add(flat_t, term)
        if batch:
            flat_t = ops.add(flat_t, b.const(_batch_offsets(idx_shape[:-1], batch, rows)))
    table = b.reshape(data, (int(np.prod(shape[:batch + k], dtype=np.int64)),) + shape[batch + k:])
    if flat_t is None:  # indices of no coordinate (a last dimension of 0) computed at run time
        raise b.error("GatherND of run-time indices whose last dimension is 0 is not supported")
    y = gather_rows(b, table, flat_t, 0)
    out = tuple(idx_shape[:-1]) + shape[batch + k:]
    return [Rank0(b.reshape(y, (1,))) if not out else b.reshape(y, out)]


def _batch_offsets(positions: tuple[int, ...], batch: int, rows: int) -> NDArray[Any] | int:
    """The flat row offset of each index position's batch coordinates (positions[:batch])."""
    if not batch:
        return 0
    grid = np.indices(positions, dtype=np.int64)
    linear = np.zeros(positions, np.int64)
    for j in range(batch):
        linear = linear * positions[j] + grid[j]
    return linear * rows


@onnx_op("ScatterND")
def scatter_nd(b: Builder, node: NodeProto) -> Sequence[Output]:
    reduction = b.attr("reduction", "none")
    return [ops.scatter_nd(b.tensor(0), b.tensor(1), b.tensor(2), reduction, opset=b.opset)]


@onnx_op("ScatterElements")
def scatter_elements(b: Builder, node: NodeProto) -> Sequence[Output]:
    data, flat = elements_index(b)
    n = flat.size
    out = ops.scatter_nd(b.reshape(data, (data.size,)), b.reshape(flat, (n, 1)), b.reshape(b.tensor(2), (n,)),
                         b.attr("reduction", "none"), opset=max(b.opset, 11))
    return [b.reshape(out, data.shape)]


@onnx_op("OneHot", static=(1,))
def one_hot(b: Builder, node: NodeProto) -> Sequence[Output]:
    depth = int(b.static(1, "depth").reshape(-1)[0])
    if depth < 1:
        raise b.error(f"depth {depth} must be >= 1", ShapeError)
    b.check_size((depth,), np.int64, "the one-hot positions")
    rank = b.rank(0)
    axis = axis_of(b, b.attr("axis", -1), rank + 1)
    idx = b.tensor(0)
    idx = b.cast(idx, "int64") if idx.dtype != "int64" else idx
    idx = fix_negative(idx, depth)
    shape = list(b.shape(0))
    idx = b.reshape(idx, shape[:axis] + [1] + shape[axis:])
    iota = b.const(np.arange(depth, dtype=np.int64).reshape([depth if i == axis else 1 for i in range(rank + 1)]))
    hit = ops.eq(idx, iota, out_dtype="bool")
    values = b.tensor(2)
    dtype = values.dtype
    off = b.reshape(ops.extract(values, [0], [1], [1]), (1,) * (rank + 1))
    on = b.reshape(ops.extract(values, [1], [2], [1]), (1,) * (rank + 1))
    return [ops.condition_select(hit, on, off, out_dtype=dtype)]


@onnx_op("Trilu", static=(1,))
def trilu(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    k = b.static_ints(1, "k")[0] if b.has(1) else 0
    n, m = x.shape[-2:]
    rows, cols = np.indices((n, m))
    keep = (cols - rows >= k) if b.attr("upper", 1) else (cols - rows <= k)
    mask = b.const(keep.reshape((1,) * (len(x.shape) - 2) + (n, m)))
    zero = b.full(0, x.dtype, len(x.shape))
    return [ops.condition_select(mask, x, zero)]


@onnx_op("CumSum", static=(1,))
def cumsum(b: Builder, node: NodeProto) -> Sequence[Output]:
    """A cumulative sum in ceil(log2 n) steps (Hillis and Steele): y += y shifted by 1, 2, 4,
    ... along the axis, each shift a slice padded with zeros (exact for integers)."""
    x = b.tensor(0)
    rank = len(x.shape)
    axis = axis_of(b, b.static_ints(1, "axis")[0], rank)
    n = x.shape[axis]
    reverse = bool(b.attr("reverse", 0))
    zero = 0 if dtypes.is_int(x.dtype) else 0.0

    def shifted(t: Tensor, k: int) -> Tensor:
        """t moved k places along the axis (toward the end, or the start when reverse), zeros in."""
        start = [k if reverse and i == axis else 0 for i in range(rank)]
        end = [d - k if i == axis and not reverse else d for i, d in enumerate(t.shape)]
        part = ops.extract(t, start, end, [1] * rank)
        pads = []
        for i in range(rank):
            pads += [0, k] if i == axis and reverse else [k, 0] if i == axis else [0, 0]
        return ops.pad(part, zero, pads)  # type: ignore[arg-type]  # isa/ops annotates a float pad value as int

    y = x
    if b.attr("exclusive", 0):
        y = shifted(y, 1) if n > 1 else ops.muls(y, zero)
    k = 1
    while k < n:
        y = ops.add(y, shifted(y, k))
        k *= 2
    return [y]


@onnx_op("Compress")
def compress(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    cond = b.tensor(1)
    axis = b.attr("axis")
    if axis is not None and len(x.shape) > 1 and int(np.prod([d for i, d in enumerate(x.shape) if i != axis % len(x.shape)])) > 1:
        raise b.error("Compress along an axis of a tensor of rank 2 or more is not supported: npusim's data-sized results "
                      "(masked_select) are 1-D")
    flat = b.reshape(x, (x.size,))
    n = cond.shape[0]
    if n > x.size:
        raise b.error(f"condition has {n} entries for {x.size} elements")
    if n < x.size:
        flat = ops.extract(flat, [0], [n], [1])
    out = ops.masked_select(flat, cond)
    return [out]


@folds("Gather")
def fold_gather(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    data, idx = arrays
    if data.dtype.kind not in "iub":
        return None
    axis = b.attr("axis", 0)
    return [np.take(data, idx.astype(np.int64), axis=axis)]


@onnx_op("NonMaxSuppression", static=(2, 3, 4))
def non_max_suppression(b: Builder, node: NodeProto) -> Sequence[Output]:
    """npusim's non_max_suppression (ONNX's, on the scalar engine): its data-sized result can
    be a graph output, not another op's operand."""
    def scalar(i: int, what: str, default: float | None) -> float | None:
        if not b.has(i):
            return default
        value = b.static(i, what).reshape(-1)
        return value[0].item() if value.size else default

    most = int(scalar(2, "max_output_boxes_per_class", 0) or 0)
    if most < 1:
        raise b.error(f"max_output_boxes_per_class {most} selects no box (npusim tensors are not empty)")
    return [ops.non_max_suppression(b.tensor(0), b.tensor(1), most, float(scalar(3, "iou_threshold", 0.0) or 0.0),
                                    scalar(4, "score_threshold", None), b.attr("center_point_box", 0))]
