"""Shape ops of the BMLang seed (002, lines 1095-1135).

    squeeze(tensor_i, axis=())           drop the given size-1 axes (negatives count from the end),
                                         or every size-1 axis when none is given
    expand_dims(tensor_i, axis, ndims=1) insert ndims size-1 axes before input axis `axis`
    reshape(tensor_i, reshape_param)     0 keeps the input's size on that axis, -1 (at most one)
                                         is inferred, a positive value is the size
    reshape_v2(tensor_i, shape_info)     reshape with the parameter an int32 tensor whose values
                                         the graph knows (a constant or a shape_fetch output)
    shape_fetch(tensor_i, begin_axis=0, end_axis=1, step=1)
                                         tensor_i.shape[begin_axis:end_axis:step] as int32

The first four keep the element order, so they place their output on the input's bytes (the
"view" template: no instruction runs). shape_fetch's value follows from shapes alone, so it is
a constant preloaded in DDR (the "constant" template) that reshape_v2 can read when the graph
is built.
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Node, Tensor
from .arrange import integer, ints, known_ints
from .base import OpDef, Spec, apply_one, register


class _View(OpDef):
    """An op whose output is its input under another shape: same dtype (the seed: 输入输出数据类型
    要求一致), same elements in the same order."""

    kind = "global"  # seed lines 1101, 1108, 1118, 1128
    template = "view"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x = ins[0]
        return [Spec(self.out_shape(x.shape, params), x.dtype)]

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        raise NotImplementedError


class Squeeze(_View):
    """Squeezing every axis of a tensor of one element leaves shape (1,), not numpy's (): a
    tensor here keeps at least one axis, as a graph constant made from a numpy scalar does."""

    name = "squeeze"

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        axes = self.axes(shape, params)
        return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)

    def axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> list[int]:
        rank = len(shape)
        if not params["axis"]:
            return [i for i, d in enumerate(shape) if d == 1]
        axes = []
        for a in params["axis"]:
            if not -rank <= a < rank:
                raise ShapeError(f"squeeze: axis {a} is out of range for a rank-{rank} tensor (allowed: [{-rank}, {rank - 1}])")
            axes.append(a % rank)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"squeeze: axis names an axis twice: {list(params['axis'])} for a rank-{rank} tensor")
        wide = [a for a in axes if shape[a] != 1]
        if wide:
            raise ShapeError(f"squeeze: axis {wide[0]} has size {shape[wide[0]]}, not 1 (input shape {shape})")
        return axes

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        y = np.squeeze(arrays[0], axis=tuple(params["axis"]) or None)
        return [y.reshape(1) if y.ndim == 0 else y]


SQUEEZE = register(Squeeze())


def squeeze(tensor_i: Tensor, axis: Sequence[int] = (), name: str | None = None) -> Tensor:
    """tensor_i without the size-1 axes listed in `axis` (every size-1 axis when it is empty)."""
    return apply_one(SQUEEZE, [tensor_i], {"axis": ints(axis, "squeeze", "axis")}, name)


class ExpandDims(_View):
    name = "expand_dims"

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        rank, axis = len(shape), params["axis"]
        if not -rank - 1 <= axis <= rank:
            raise ShapeError(f"expand_dims: axis must be in [{-rank - 1}, {rank}] for a rank-{rank} tensor, got {axis}")
        at = axis % (rank + 1)
        return shape[:at] + (1,) * params["ndims"] + shape[at:]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, axis = arrays[0], params["axis"]
        for _ in range(params["ndims"]):
            x = np.expand_dims(x, axis if axis >= 0 else x.ndim + axis + 1)
        return [x]


EXPAND_DIMS = register(ExpandDims())


def expand_dims(tensor_i: Tensor, axis: int, ndims: int = 1, name: str | None = None) -> Tensor:
    """Insert `ndims` size-1 axes before input axis `axis` (a negative axis counts from the end:
    -1 appends them)."""
    params = {"axis": integer(axis, "expand_dims", "axis"), "ndims": integer(ndims, "expand_dims", "ndims", low=1)}
    return apply_one(EXPAND_DIMS, [tensor_i], params, name)


def resolve_shape(op: str, param: str, shape: tuple[int, ...], spec: Sequence[int]) -> tuple[int, ...]:
    """The output shape a reshape parameter asks for: 0 keeps the input's size on that axis, one
    -1 takes what the others leave, a positive value is the size."""
    out, infer_at = [], None
    for i, d in enumerate(spec):
        if d == 0:
            if i >= len(shape):
                raise ShapeError(f"{op}: {param}[{i}] is 0 (keep the input's size) but the input {shape} has no axis {i}")
            out.append(shape[i])
        elif d == -1:
            if infer_at is not None:
                raise ShapeError(f"{op}: {param} may hold at most one -1, got {list(spec)}")
            infer_at = i
            out.append(1)
        elif d > 0:
            out.append(d)
        else:
            raise ShapeError(f"{op}: {param}[{i}] is {d}; sizes are positive, 0 (keep) or -1 (infer)")
    total, known = math.prod(shape), math.prod(out)
    if infer_at is not None:
        if total % known:
            raise ShapeError(f"{op}: {param} {list(spec)} cannot hold the input's {total} elements (shape {shape}): "
                             f"{total} is not a multiple of {known}")
        out[infer_at] = total // known
    if math.prod(out) != total:
        raise ShapeError(f"{op}: {param} {list(spec)} gives shape {tuple(out)} of {math.prod(out)} elements; the input {shape} has {total}")
    return tuple(out)


def _numpy_shape(x: np.ndarray, spec: Sequence[int]) -> np.ndarray:
    """The reference's reading of a reshape parameter: numpy infers -1 itself."""
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(spec)])


class Reshape(_View):
    name = "reshape"

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return resolve_shape(self.name, "reshape_param", shape, params["reshape_param"])

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        return [_numpy_shape(arrays[0], params["reshape_param"])]


RESHAPE = register(Reshape())


def reshape(tensor_i: Tensor, reshape_param: Sequence[int], name: str | None = None) -> Tensor:
    """tensor_i's elements in the shape reshape_param gives (0 keeps an axis, one -1 is inferred)."""
    return apply_one(RESHAPE, [tensor_i], {"reshape_param": ints(reshape_param, "reshape", "reshape_param")}, name)


class ReshapeV2(_View):
    """reshape whose parameter is the int32 tensor shape_info. The seed wants the shape to change
    at run time; here memory is planned before the run, so shape_info's values must be known
    when the graph is built. The reference reads the operand itself."""

    name = "reshape_v2"

    def checked_inputs(self, node: Node) -> int:
        return 1  # shape_info is INT32 on every chip (seed lines 1125-1127); infer checks it

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        info = ins[1]
        if info.dtype != "int32" or len(info.shape) != 1:
            raise UnsupportedError(f"reshape_v2: shape_info must be a 1-d int32 tensor (seed line 1126), got {info.dtype} {info.shape}")
        return super().infer(ins, params)

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return resolve_shape(self.name, "shape_info", shape, params["shape_info"])

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        return [_numpy_shape(arrays[0], arrays[1].tolist())]


RESHAPE_V2 = register(ReshapeV2())


def reshape_v2(tensor_i: Tensor, shape_info: Tensor, name: str | None = None) -> Tensor:
    """reshape with the parameter given as a 1-d int32 tensor whose values the graph knows."""
    if not isinstance(shape_info, Tensor):
        raise GraphError(f"reshape_v2: shape_info must be a Tensor (a constant or a shape_fetch output), got {type(shape_info).__name__}")
    return apply_one(RESHAPE_V2, [tensor_i, shape_info], {"shape_info": known_ints(shape_info, "reshape_v2", "shape_info")}, name)


class ShapeFetch(OpDef):
    """tensor_i.shape[begin_axis:end_axis:step] as a 1-d int32 tensor. Negative axes count from
    the end; 0 <= begin < end <= rank after that, step >= 1 (the seed gives no limits: these
    are Python's slice rules without the empty result)."""

    name = "shape_fetch"
    kind = "global"  # seed line 1135
    template = "constant"

    def dims(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        rank = len(shape)
        begin, end = (a + rank if a < 0 else a for a in (params["begin_axis"], params["end_axis"]))
        if not 0 <= begin < end <= rank:
            raise ShapeError(f"shape_fetch: begin_axis {params['begin_axis']} and end_axis {params['end_axis']} must select "
                             f"at least one axis of a rank-{rank} tensor (0 <= begin "
                             f"< end <= {rank} after counting negatives from the end)")
        return shape[begin:end:params["step"]]

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        return [Spec((len(self.dims(ins[0].shape, params)),), "int32")]

    def known_value(self, known: list[np.ndarray | None], ins: list[Spec], params: dict[str, Any]) -> np.ndarray | None:
        return np.array(self.dims(ins[0].shape, params), np.int32)

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        return [np.array(arrays[0].shape[params["begin_axis"]:params["end_axis"]:params["step"]], np.int32)]


SHAPE_FETCH = register(ShapeFetch())


def shape_fetch(tensor_i: Tensor, begin_axis: int = 0, end_axis: int = 1, step: int = 1, name: str | None = None) -> Tensor:
    """The sizes of tensor_i's axes begin_axis, begin_axis + step, ... before end_axis, as int32."""
    params = {"begin_axis": integer(begin_axis, "shape_fetch", "begin_axis"), "end_axis": integer(end_axis, "shape_fetch", "end_axis"),
              "step": integer(step, "shape_fetch", "step", low=1)}
    return apply_one(SHAPE_FETCH, [tensor_i], params, name)

