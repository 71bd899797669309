"""Indexed ops: rows taken from, or put into, a tensor at indices the DMA engine reads from memory
(the indexed template, isa/lower/templates/indexed.py).

    gather(x, indices, axis=0, batch_dims=0, wrap=False)   Ascend ATB GatherOperation (seed 001): tf.gather
    scatter_nd(data, indices, updates, reduction="none", opset=18)   ONNX ScatterND (seed 004)

Each op describes its transfer as three views (isa/ops/arrange.View, in elements of the dense
tensors) in the shapes an IndexedDma takes: the table rows come from or go to, P + (k indexed
dimensions) + Q; the indices, P + (n, k); the rows, P + (n,) + Q.
"""

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import IndexRangeError, ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import View, dense, strides
from .base import OpDef, Spec, TensorLike, apply_one, check_dtype, register


def known_values(operand: object) -> np.ndarray | None:
    """An operand's values when the graph knows them at build time (a numpy array, a constant, a
    tensor computed from shapes alone), else None."""
    if isinstance(operand, np.ndarray):
        return operand
    return operand.graph.known(operand) if isinstance(operand, Tensor) else None


def check_known_indices(op: str, indices: np.ndarray, dims: Sequence[int], wrap: bool, unique: bool = False) -> None:
    """Build-time checks of known indices of shape (..., k) into dimensions `dims` (k of them):
    each in [0, d) (or [-d, d) with `wrap`), and with `unique` no k-tuple twice. The engine makes
    the same checks at run time (sim/engines/dma.py) for indices known only then."""
    values = np.asarray(indices, np.int64)
    sizes = np.asarray(dims, np.int64)
    low = -sizes if wrap else np.zeros_like(sizes)
    bad = (values < low) | (values >= sizes)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise IndexRangeError(f"{op}: index {int(values[at])} at position {at[:-1]} is out of range for a dimension of size "
                              f"{int(sizes[at[-1]])} (allowed {int(low[at[-1]])}..{int(sizes[at[-1]]) - 1})")
    if unique:
        rows = np.where(values < 0, values + sizes, values).reshape(-1, len(sizes))
        _, first, counts = np.unique(rows, axis=0, return_index=True, return_counts=True)
        if (counts > 1).any():
            twice = rows[first[counts > 1][0]]
            raise IndexRangeError(f"{op}: index {tuple(int(v) for v in twice)} is given more than once; with reduction 'none' "
                                  "the result would depend on the order of the writes (the seed: indices must not repeat)")


def _integer(value: object, op: str, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ShapeError(f"{op}: {param} must be an integer, got {value!r}")
    return int(value)


# ---- gather ------------------------------------------------------------------------------

class Gather(OpDef):
    """gather(x, indices, axis=0, batch_dims=0, wrap=False): tf.gather. out[b, a, i, q] =
    x[b, a, indices[b, i], q] with b the first batch_dims dimensions (shared by x and indices), a
    the dimensions of x before `axis`, i the rest of indices and q the dimensions of x after
    `axis`. An index must be in [0, x.shape[axis]): a negative one is out of range, as tf.gather on
    a CPU says. With `wrap` a negative index counts from the end, as ONNX's Gather says; the DMA
    engine maps it as it reads it (scatter_nd's indices alike), as TPU-MLIR's gather on BM1684X
    takes ONNX's indices as they are (tpu::GatherOp::inference: index + dim where index < 0)."""

    name = "gather"
    kind = "global"
    template = "indexed"
    seed = "atb"
    scatter = False
    X_DTYPES = ("float16", "float32", "bfloat16", "int32", "uint32", "int64")  # seed 001, x
    INDEX_DTYPES = ("int64", "int32", "uint32")  # seed 001, indices
    MAX_RANK = 8  # seed 001: "(n+1)+(m+1)-1-batchdims <= 8"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"gather: takes x and indices, got {len(ins)} tensors")
        x, idx = ins
        if not idx.shape:
            raise ShapeError("gather: indices must have rank >= 1 (the seed: [dim_in_0, ..., dim_in_m]), got a scalar")
        check_dtype(x.dtype, self.X_DTYPES, "gather: x")
        check_dtype(idx.dtype, self.INDEX_DTYPES, "gather: indices")
        axis, b = params["axis"], params["batch_dims"]
        if not 0 <= b <= min(axis, len(idx.shape) - 1):
            raise ShapeError(f"gather: batch_dims must be in [0, min(axis, rank(indices) - 1)] = [0, {min(axis, len(idx.shape) - 1)}] "
                             f"(axis {axis}, indices of rank {len(idx.shape)}), got {b}")
        if x.shape[:b] != idx.shape[:b]:
            raise ShapeError(f"gather: the first batch_dims={b} dimensions of x {x.shape} and indices {idx.shape} must be equal")
        out = x.shape[:axis] + idx.shape[b:] + x.shape[axis + 1:]
        if len(out) > self.MAX_RANK:
            raise ShapeError(f"gather: the output would have rank {len(out)} ({out}); at most {self.MAX_RANK} (the seed: "
                             "rank(x) + rank(indices) - 1 - batch_dims <= 8)")
        return [Spec(out, x.dtype)]

    def views(self, shapes: list[tuple[int, ...]], params: dict[str, Any]) -> tuple[View, View, View]:
        """P = x.shape[:axis] (the batch dimensions, then the ones indices repeat over, read with
        stride 0), n = the indices after the batch dimensions, k = 1, Q = x.shape[axis + 1:]."""
        x, idx = shapes
        axis, b = params["axis"], params["batch_dims"]
        prefix, q = x[:axis], x[axis + 1:]
        n = int(np.prod(idx[b:], dtype=np.int64))
        batch = strides(idx[:b] + (n,))[:b]
        index = View(0, prefix + (n, 1), batch + (0,) * (axis - b) + (1, 1))
        return dense(x), index, dense(prefix + (n,) + q)

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, idx = arrays
        axis, b = params["axis"], params["batch_dims"]
        out = np.empty(x.shape[:axis] + idx.shape[b:] + x.shape[axis + 1:], x.dtype)
        for at in np.ndindex(x.shape[:b]):
            index = idx[at].astype(np.int64)
            if params.get("wrap", False):
                index = np.where(index < 0, index + x.shape[axis], index)
            out[at] = np.take(x[at], index, axis=axis - b)
        return [out]


GATHER = register(Gather())


def gather(x: Tensor, indices: TensorLike, axis: int = 0, batch_dims: int = 0, wrap: bool = False, name: str | None = None) -> Tensor:
    """Slices of x along `axis` at `indices` (seed 001, tf.gather with batch_dims). A negative
    axis counts from the end of x's dimensions, a negative batch_dims from the end of indices';
    with `wrap` a negative index counts from the end of the axis (ONNX's Gather)."""
    x_rank, i_rank = len(x.shape), len(indices.shape)
    axis, batch_dims = _integer(axis, "gather", "axis"), _integer(batch_dims, "gather", "batch_dims")
    if not -x_rank <= axis < x_rank:
        raise ShapeError(f"gather: axis must be in [{-x_rank}, {x_rank - 1}] for x of rank {x_rank}, got {axis}")
    if batch_dims < 0:
        batch_dims += i_rank
    if not isinstance(wrap, bool):
        raise ShapeError(f"gather: wrap must be a bool, got {wrap!r}")
    params: dict[str, Any] = {"axis": axis % x_rank, "batch_dims": batch_dims}
    if wrap:
        params["wrap"] = True
    known = known_values(indices)
    if known is not None:
        check_known_indices("gather", np.asarray(known)[..., None], (x.shape[params["axis"]],), wrap=wrap)
    return apply_one(GATHER, [x, indices], params, name)


# ---- scatter_nd --------------------------------------------------------------------------

# reduction -> (the vector function combining an output row with an update row, first opset)
REDUCTIONS = {"none": (None, 11), "add": ("add", 16), "mul": ("mul", 16), "max": ("max", 18), "min": ("min", 18)}
OPSETS = (11, 13, 16, 18)  # the seed's versions; another opset number takes the latest of these at or below it


class ScatterND(OpDef):
    """scatter_nd(data, indices, updates, reduction="none", opset=18): ONNX ScatterND. The output
    is data with, for each index tuple indices[i] (k = indices.shape[-1] leading coordinates, a
    negative one counting from the end), the slice out[indices[i]] replaced by updates[i], or
    combined with it (add, mul, max, min) in the order of i, so repeated indices accumulate.

    With reduction 'none' an index tuple may not repeat: the machine faults (IndexRangeError)
    rather than leave the result to the order of the writes. Combined values are computed in
    float32 for float data and exactly for integers, then stored with saturation (the vector
    unit's rule; ONNX's numpy reference would wrap integers around); float64 and uint64 rows,
    which those would not hold, are not combined."""

    name = "scatter_nd"
    kind = "global"
    template = "indexed"
    seed = "onnx"
    scatter = True
    INDEX_DTYPES = ("int64", "int32")

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 3:
            raise ShapeError(f"scatter_nd: takes data, indices and updates, got {len(ins)} tensors")
        data, idx, upd = ins
        if not idx.shape:
            raise ShapeError("scatter_nd: indices must have rank >= 1 (the seed: q >= 1), got a scalar")
        check_dtype(idx.dtype, self.INDEX_DTYPES, "scatter_nd: indices")
        if data.dtype == "bfloat16" and params["opset"] < 13:
            raise UnsupportedError(f"scatter_nd: opset {params['opset']} does not take bfloat16 data (from opset 13)")
        if upd.dtype != data.dtype:
            raise UnsupportedError(f"scatter_nd: updates are {upd.dtype} and data {data.dtype}; they must match")
        if params["reduction"] != "none" and data.dtype in ("float64", "uint64"):
            raise UnsupportedError(f"scatter_nd: combining {data.dtype} rows (reduction {params['reduction']!r}) is not supported: "
                                   "the rows are combined in float32 or int64")
        k = idx.shape[-1]
        if k > len(data.shape):
            raise ShapeError(f"scatter_nd: indices.shape[-1] = {k} must be at most rank(data) = {len(data.shape)}")
        want = idx.shape[:-1] + data.shape[k:]
        if upd.shape != want:
            raise ShapeError(f"scatter_nd: updates must have shape indices.shape[:-1] + data.shape[{k}:] = {want}, got {upd.shape}")
        return [Spec(data.shape, data.dtype)]

    def combine(self, params: dict[str, Any]) -> str | None:
        """The vector function combining rows, or None for a plain scatter."""
        return REDUCTIONS[params["reduction"]][0]

    def views(self, shapes: list[tuple[int, ...]], params: dict[str, Any]) -> tuple[View, View, View]:
        """P = (), n = the index tuples, k = indices.shape[-1], Q = data.shape[k:]."""
        data, idx, _ = shapes
        k = idx[-1]
        n = int(np.prod(idx[:-1], dtype=np.int64))
        return dense(data), dense((n, k)), dense((n,) + data[k:])

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        """The seed's loop over np.ndindex(indices.shape[:-1])."""
        data, idx, upd = arrays
        out = data.copy()
        fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(params["reduction"])
        cdt = dtypes.np_dtype(dtypes.compute_dtype(dtypes.of_array(data)))
        for at in np.ndindex(idx.shape[:-1]):
            where = tuple(int(v) for v in idx[at])
            if fn is None:
                out[where] = upd[at]
            else:
                out[where] = dtypes.convert(fn(out[where].astype(cdt), upd[at].astype(cdt)), dtypes.of_array(data))
        return [out]


SCATTER_ND = register(ScatterND())


def scatter_nd(data: TensorLike, indices: TensorLike, updates: TensorLike, reduction: str = "none", opset: int = 18,
               name: str | None = None) -> Tensor:
    """A copy of data with the slices at indices replaced by, or combined with, updates (ONNX
    ScatterND of `opset`: 11 and 13 have no reduction, 16 adds add and mul, 18 max and min)."""
    opset = _integer(opset, "scatter_nd", "opset")
    if opset < OPSETS[0]:
        raise UnsupportedError(f"scatter_nd: opset {opset} has no ScatterND (from opset {OPSETS[0]}: {', '.join(map(str, OPSETS))})")
    if reduction not in REDUCTIONS:
        raise UnsupportedError(f"scatter_nd: unknown reduction {reduction!r}; known: {', '.join(REDUCTIONS)}")
    since = REDUCTIONS[reduction][1]
    if opset < since:
        have = [r for r, (_, first) in REDUCTIONS.items() if first <= opset]
        raise UnsupportedError(f"scatter_nd: opset {opset} has no reduction {reduction!r} (from opset {since}; "
                               f"opset {opset} has {', '.join(have)})")
    known = known_values(indices)
    if known is not None and len(indices.shape) >= 1 and indices.shape[-1] <= len(data.shape):
        check_known_indices("scatter_nd", known, data.shape[: indices.shape[-1]], wrap=True, unique=reduction == "none")
    return apply_one(SCATTER_ND, [data, indices, updates], {"reduction": reduction, "opset": opset}, name)
