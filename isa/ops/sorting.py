"""The BMLang seed's sort family (seed 002 lines 1055-1092), each one kernel on the chip's scalar
engine (sim/kernels/sort.py):

    arg(tensor_i, axis, method, out_dtype="int32")
        index of the max (method 0 or "max") or min (1, "min") along axis; that dim becomes 1.
        The index is int32 or float32 (out_dtype).
    topk(tensor_i, k=1, axis=0, descending=True) -> (tensor_val, tensor_idx)
        the k largest (descending) or smallest values along axis, in that order; idx int32.
    sort(tensor_i, dim=-1, stable=False, descending=False) -> (index_o, tensor_o)
    argsort(tensor_i, dim=-1, stable=False, descending=False, out_dtype="int32") -> index_o

Order: NaN ranks above every number (numpy's sort order): last ascending, first descending;
arg returns the first NaN, as numpy's argmax and argmin do. Ties: arg takes the first
occurrence (numpy, TensorFlow); a stable sort keeps equal elements in input order in either
direction; an unstable sort and topk (unstable, the seed says) put ties in an order that is the
same run after run but not specified (the seed: (3,3,3) may give (0,1,2) or (1,0,2)).

The seed's text says sort's and argsort's descending=true sorts ascending; the parameter is
taken at its word (a known slip, docs/sources.md#known-slips): true is descending, as topk's text says.

BM1684 sorts only with stable=false (lines 1077, 1087): `stable` is a variant ("sort.stable",
"sort.unstable") so a chip's table can lack the stable one.
"""

import math
from collections.abc import Sequence
from typing import Any, SupportsFloat

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import integer
from .base import OpDef, Spec, apply_one, outputs, register
from .reduce import normalize_axes

INDEX_DTYPES = ("int32", "float32")  # what an index output may be (arg's and argsort's out_dtype)


def axis_in(op: str, axis: int, shape: tuple[int, ...]) -> int:
    """`axis` (negative counts from the end) as a non-negative axis of a tensor of `shape`."""
    return normalize_axes(op, (axis,), shape)[0]


def index_dtype(op: str, out_dtype: str) -> str:
    if out_dtype not in INDEX_DTYPES:
        raise UnsupportedError(f"{op}: out_dtype must be int32 or float32 (the index output), got {out_dtype!r}")
    return out_dtype


def lines(x: np.ndarray, axis: int) -> np.ndarray:
    """The 1-D lines of x along axis, as the rows of a 2-D array."""
    return np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])


def from_lines(rows: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Rows (of any length) put back as the lines along axis of a tensor shaped like `shape`."""
    moved = tuple(d for i, d in enumerate(shape) if i != axis) + (rows.shape[1],)
    return np.moveaxis(rows.reshape(moved), -1, axis)


def rank_key(value: SupportsFloat) -> tuple[int, SupportsFloat]:
    """A Python sort key in numpy's order: NaN above every number."""
    return (1, 0.0) if math.isnan(value) else (0, value)


def ordered(row: Sequence[float], descending: bool) -> list[int]:
    """Positions of a line's elements in sorted order, equal ones in input order (Python's sort
    is stable, with reverse=True too)."""
    return sorted(range(len(row)), key=lambda i: rank_key(row[i]), reverse=descending)


class _SortOp(OpDef):
    kind = "global"
    template = "scalar"
    axis_param: str  # the param naming the sorted axis

    def axis(self, shape: tuple[int, ...], params: dict[str, Any]) -> int:
        return axis_in(self.name, params[self.axis_param], shape)

    def check_input(self, ins: list[Spec]) -> Spec:
        if len(ins) != 1:
            raise ShapeError(f"{self.name}: takes one tensor, got {len(ins)}")
        return ins[0]

    def sorted_lines(self, x: np.ndarray, params: dict[str, Any], count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(indices, values) of x's lines along the op's axis in the reference's order, the first
        `count` of each line (all when None), shaped as tensors."""
        axis = self.axis(x.shape, params)
        order = np.array([ordered(row.tolist(), params["descending"])[:count] for row in lines(x, axis)])
        idx = from_lines(order.reshape(-1, count or x.shape[axis]), x.shape, axis)
        return idx, np.take_along_axis(x, idx, axis)


class Arg(_SortOp):
    """arg: the index of the first max or min along axis (ArgParam: axis, method 0 max, 1 min)."""

    name = "arg"
    # The seed makes arg a limited local op (local when axis > 1) on the TPU; here it is a kernel
    # on the scalar engine, which reads its operands in DDR, so it is global on every chip.
    kind = "global"
    axis_param = "axis"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = self.check_input(ins)
        axis = self.axis(x.shape, params)
        return [Spec(x.shape[:axis] + (1,) + x.shape[axis + 1:], index_dtype("arg", params["out_dtype"]))]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "arg", {"axis": self.axis(ins[0].shape, params), "method": params["method"]}

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        axis = self.axis(x.shape, params)
        better = (lambda a, b: a > b) if params["method"] == "max" else (lambda a, b: a < b)
        found = []
        for row in lines(x, axis).tolist():
            best = 0
            for i, v in enumerate(row):
                if math.isnan(row[best]):  # a NaN was met: it stays
                    break
                if math.isnan(v) or better(v, row[best]):
                    best = i
            found.append([best])
        return [from_lines(np.array(found), x.shape, axis).astype(params["out_dtype"])]


ARG = register(Arg())


def arg(tensor_i: Tensor, axis: int, method: int | str, out_dtype: str = "int32", name: str | None = None) -> Tensor:
    """The index of the max (method 0 / "max") or min (1 / "min") of tensor_i along axis, the
    first one on ties; the axis's dim becomes 1."""
    methods = {0: "max", 1: "min", "max": "max", "min": "min"}
    key = method.lower() if isinstance(method, str) else method
    if isinstance(key, bool) or key not in methods:
        raise UnsupportedError(f"arg: method must be 0 (max) or 1 (min), got {method!r}")
    params = {"axis": integer(axis, "arg", "axis"), "method": methods[key], "out_dtype": out_dtype}
    return apply_one(ARG, [tensor_i], params, name)


class Topk(_SortOp):
    """topk: the k largest (descending) or smallest values along axis and their int32 indices."""

    name = "topk"
    axis_param = "axis"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = self.check_input(ins)
        axis = self.axis(x.shape, params)
        if params["k"] > x.shape[axis]:
            raise ShapeError(f"topk: k must be at most the axis's dim {x.shape[axis]} (axis {axis} of {x.shape}), got {params['k']}")
        shape = x.shape[:axis] + (params["k"],) + x.shape[axis + 1:]
        return [Spec(shape, x.dtype), Spec(shape, "int32")]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "topk", {"axis": self.axis(ins[0].shape, params), "k": params["k"], "descending": int(params["descending"])}

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        idx, values = self.sorted_lines(arrays[0], params, params["k"])
        return [values, idx.astype(np.int32)]


TOPK = register(Topk())


def topk(tensor_i: Tensor, k: int = 1, axis: int = 0, descending: bool = True, name: str | None = None) -> tuple[Tensor, ...]:
    """(tensor_val, tensor_idx): the k largest values along axis (the k smallest when not
    descending), in that order, and their indices (int32). Unstable: ties in no set order."""
    params = {"k": integer(k, "topk", "k", low=1), "axis": integer(axis, "topk", "axis"), "descending": bool(descending)}
    return outputs(TOPK, [tensor_i], params, name)


class _Sort(_SortOp):
    axis_param = "dim"
    variants = ("stable", "unstable")

    def variant(self, params: dict[str, Any]) -> str | None:
        return "stable" if params["stable"] else "unstable"

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self.name, {"axis": self.axis(ins[0].shape, params), "stable": int(params["stable"]),
                           "descending": int(params["descending"])}


class Sort(_Sort):
    """sort: (index_o, tensor_o), the sorted tensor and where each element was along dim."""

    name = "sort"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = self.check_input(ins)
        self.axis(x.shape, params)
        return [Spec(x.shape, "int32"), Spec(x.shape, x.dtype)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        idx, values = self.sorted_lines(arrays[0], params)
        return [idx.astype(np.int32), values]


class Argsort(_Sort):
    """argsort: where each element of the sorted tensor was along dim (int32 or float32)."""

    name = "argsort"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = self.check_input(ins)
        self.axis(x.shape, params)
        return [Spec(x.shape, index_dtype("argsort", params["out_dtype"]))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        idx, _ = self.sorted_lines(arrays[0], params)
        return [idx.astype(params["out_dtype"])]


SORT = register(Sort())
ARGSORT = register(Argsort())


def sort(tensor_i: Tensor, dim: int = -1, stable: bool = False, descending: bool = False, name: str | None = None) -> tuple[Tensor, ...]:
    """(index_o, tensor_o): tensor_i sorted along dim, ascending unless `descending`, and each
    element's index along dim in tensor_i (int32). `stable` keeps equal elements in input order."""
    params = {"dim": integer(dim, "sort", "dim"), "stable": bool(stable), "descending": bool(descending)}
    return outputs(SORT, [tensor_i], params, name)


def argsort(tensor_i: Tensor, dim: int = -1, stable: bool = False, descending: bool = False, out_dtype: str = "int32",
            name: str | None = None) -> Tensor:
    """index_o: the indices along dim that sort tensor_i (as `sort`'s index_o), int32 or float32."""
    params = {"dim": integer(dim, "argsort", "dim"), "stable": bool(stable), "descending": bool(descending),
              "out_dtype": out_dtype}
    return apply_one(ARGSORT, [tensor_i], params, name)
