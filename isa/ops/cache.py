"""Cache ops: read and append to graph state (isa.Graph.state), the key and value caches a
language model's decode steps keep in DDR between runs.

    cache_read(state, length, axis)             positions [0, length) of the state along `axis`
    cache_append(state, rows, position, axis)   the state with `rows` written at positions
                                                [position, position + rows.shape[axis]) along `axis`

A read is a view: products read the cache where it lies (isa/lower/templates/cache.py), as a
serving engine's attention kernel reads its cache. An append is one DMA of the new rows into the
cache, as the runtimes do it: Ascend ATB's ReshapeAndCache writes a step's keys and values into
the cache, Sophgo's LLM-TPU demos copy a block's new key and value rows into the cache with a
device-to-device memcpy (bm_memcpy_d2d). Neither is an op of a chip's op table: any chip whose
DMA engines copy DDR runs them. Positions are fixed when the graph is built, as the shapes are:
a decode step at position p is a graph of its own.
"""

from numbers import Integral

from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef, Spec, apply, register


def _axis(axis, rank, op):
    if isinstance(axis, bool) or not isinstance(axis, Integral) or not -rank <= axis < rank:
        raise ShapeError(f"{op}: axis {axis!r} is not an axis of a rank-{rank} state (allowed: {-rank}..{rank - 1})")
    return int(axis) % rank


def _whole(value, op, what):
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ShapeError(f"{op}: {what} must be an integer, got {value!r}")
    return int(value)


def check_read(state: tuple, length, axis, where: str) -> tuple:
    """The shape positions [0, length) of a state of shape `state` along `axis` take."""
    axis = _axis(axis, len(state), where)
    length = _whole(length, where, "length")
    if not 1 <= length <= state[axis]:
        raise ShapeError(f"{where}: length {length} along axis {axis} is beyond the cache's {state[axis]} positions "
                         f"(state shape {state}; allowed 1..{state[axis]})")
    return state[:axis] + (length,) + state[axis + 1:]


def check_append(state: tuple, rows: tuple, position, axis, where: str) -> int:
    """The axis rows of shape `rows` go along, written at `position` into a state of shape `state`."""
    axis = _axis(axis, len(state), where)
    position = _whole(position, where, "position")
    if len(rows) != len(state) or rows[:axis] + rows[axis + 1:] != state[:axis] + state[axis + 1:]:
        raise ShapeError(f"{where}: rows of shape {rows} do not fit a state of shape {state}: they must match it on every "
                         f"axis but {axis}")
    end = position + rows[axis]
    if position < 0 or end > state[axis]:
        raise ShapeError(f"{where}: {rows[axis]} position(s) from position {position} along axis {axis} reach position {end}, "
                         f"beyond the cache's {state[axis]} (state shape {state}; a position is in 0..{state[axis] - rows[axis]})")
    return axis


class CacheRead(OpDef):
    name = "cache_read"
    kind = "global"
    template = "cache"
    seed = "runtime"
    table = False  # a view and DMA copies: no chip's op table lists it (module docstring)

    def infer(self, ins, params):
        if len(ins) != 1:
            raise ShapeError(f"cache_read: takes one state, got {len(ins)} tensors")
        return [Spec(check_read(ins[0].shape, params["length"], params["axis"], "cache_read"), ins[0].dtype)]

    def reference(self, arrays, params, compute=None):
        index = [slice(None)] * arrays[0].ndim
        index[params["axis"]] = slice(0, params["length"])
        return [arrays[0][tuple(index)].copy()]


class CacheAppend(OpDef):
    name = "cache_append"
    kind = "global"
    template = "cache"
    seed = "runtime"
    table = False

    def infer(self, ins, params):
        if len(ins) != 2:
            raise ShapeError(f"cache_append: takes a state and its new rows, got {len(ins)} tensors")
        state, rows = ins
        if rows.dtype != state.dtype:
            raise UnsupportedError(f"cache_append: rows of {rows.dtype} into a state of {state.dtype}: convert them first")
        check_append(state.shape, rows.shape, params["position"], params["axis"], "cache_append")
        return [Spec(state.shape, state.dtype)]

    def reference(self, arrays, params, compute=None):
        state, rows = arrays
        out = state.copy()
        index = [slice(None)] * state.ndim
        index[params["axis"]] = slice(params["position"], params["position"] + rows.shape[params["axis"]])
        out[tuple(index)] = rows
        return [out]


CACHE_READ = register(CacheRead())
CACHE_APPEND = register(CacheAppend())


def _state(tensor, op):
    if not isinstance(tensor, Tensor) or tensor.name not in tensor.graph.states:
        raise GraphError(f"{op}: its first operand must be a state of the graph (isa.Graph.state), got {tensor!r}")
    return tensor


def cache_read(state: Tensor, length: int, axis: int, name: str | None = None) -> Tensor:
    """Positions [0, length) of graph state `state` along `axis`, read where they lie."""
    _state(state, "cache_read")
    where = f"cache_read of state {state.name}"
    axis = _axis(axis, len(state.shape), where)
    check_read(state.shape, length, axis, where)
    return apply(CACHE_READ, [state], {"length": int(length), "axis": axis}, name)


def cache_append(state: Tensor, rows: Tensor, position: int, axis: int, name: str | None = None) -> Tensor:
    """Write `rows` into graph state `state` at positions [position, position + rows.shape[axis])
    along `axis`; the updated state, which the graph keeps (isa.Graph.keep) whether or not anything
    reads it."""
    _state(state, "cache_append")
    where = f"cache_append of {getattr(rows, 'name', rows)!r} into state {state.name}"
    axis = _axis(axis, len(state.shape), where)
    position = _whole(position, where, "position")
    if isinstance(rows, Tensor):
        check_append(state.shape, rows.shape, position, axis, where)
    out = apply(CACHE_APPEND, [state, rows], {"position": int(position), "axis": axis}, name)
    return state.graph.keep(out)
