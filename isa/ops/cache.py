"""Cache ops: read and append to graph state (isa.Graph.state), the key and value caches a
language model's decode steps keep in DDR between runs.

    cache_read(state, length, axis)             positions [0, length) of the state along `axis`
    cache_append(state, rows, position, axis)   the state with `rows` written at positions
                                                [position, position + rows.shape[axis]) along `axis`

A read is a view: products read the cache where it lies (isa/lower/templates/cache.py), as a
serving engine's attention kernel reads its cache. An append is one DMA of the new rows into the
cache, as the runtimes do it: Ascend ATB's ReshapeAndCacheOperation writes a step's keys and
values into one layer's key and value caches in place, at each token's slot (block id x block size
+ offset; CANN 8.0.RC3 ATB API reference, hiascend.com .../80RC3/apiref/ascendtbapi/ascendtb_01_0089.html);
Sophgo's LLM-TPU demos copy each block's new key and value rows into the layer's cache at the
token's offset with bm_memcpy_d2d_byte (sophgo/LLM-TPU models/Llama2/python_demo/chat.cpp @
0eea0dc, forward_next). Neither is an op of a chip's op table: any chip whose DMA engines copy DDR
runs them. Positions are fixed when the graph is built, as the shapes are:
a decode step at position p is a graph of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, Any

from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef, Spec, apply, register

if TYPE_CHECKING:
    from numpy import ndarray

    from ..graph import Graph


def _axis(axis: Any, rank: int, op: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, Integral) or not -rank <= int(axis) < rank:
        raise ShapeError(f"{op}: axis {axis!r} is not an axis of a rank-{rank} state (allowed: {-rank}..{rank - 1})")
    return int(axis) % rank


def _whole(value: Any, op: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ShapeError(f"{op}: {what} must be an integer, got {value!r}")
    return int(value)


def check_read(state: tuple, length: Any, axis: Any, where: str) -> tuple:
    """The shape positions [0, length) of a state of shape `state` along `axis` take."""
    axis = _axis(axis, len(state), where)
    length = _whole(length, where, "length")
    if not 1 <= length <= state[axis]:
        raise ShapeError(f"{where}: length {length} along axis {axis} is beyond the cache's {state[axis]} positions "
                         f"(state shape {state}; allowed 1..{state[axis]})")
    return state[:axis] + (length,) + state[axis + 1:]


def check_append(state: tuple, rows: tuple, position: Any, axis: Any, where: str) -> int:
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

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 1:
            raise ShapeError(f"cache_read: takes one state, got {len(ins)} tensors")
        return [Spec(check_read(ins[0].shape, params["length"], params["axis"], "cache_read"), ins[0].dtype)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: Any = None) -> list[ndarray]:
        index = [slice(None)] * arrays[0].ndim
        index[params["axis"]] = slice(0, params["length"])
        return [arrays[0][tuple(index)].copy()]


class CacheAppend(OpDef):
    name = "cache_append"
    kind = "global"
    template = "cache"
    seed = "runtime"
    table = False

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"cache_append: takes a state and its new rows, got {len(ins)} tensors")
        state, rows = ins
        if rows.dtype != state.dtype:
            raise UnsupportedError(f"cache_append: rows of {rows.dtype} into a state of {state.dtype}: convert them first")
        check_append(state.shape, rows.shape, params["position"], params["axis"], "cache_append")
        return [Spec(state.shape, state.dtype)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: Any = None) -> list[ndarray]:
        state, rows = arrays
        out = state.copy()
        index = [slice(None)] * state.ndim
        index[params["axis"]] = slice(params["position"], params["position"] + rows.shape[params["axis"]])
        out[tuple(index)] = rows
        return [out]


CACHE_READ = register(CacheRead())
CACHE_APPEND = register(CacheAppend())


def _state(tensor: Any, op: str) -> Tensor:
    if not isinstance(tensor, Tensor) or tensor.name not in tensor.graph.states:
        raise GraphError(f"{op}: its first operand must be a state of the graph (isa.Graph.state), got {tensor!r}")
    return tensor


def cache_read(state: Tensor, length: int, axis: int, name: str | None = None) -> Tensor:
    """Positions [0, length) of graph state `state` along `axis`, read where they lie."""
    _state(state, "cache_read")
    where = f"cache_read of state {state.name}"
    axis = _axis(axis, len(state.shape), where)
    check_read(state.shape, length, axis, where)
    out = apply(CACHE_READ, [state], {"length": int(length), "axis": axis}, name)
    return _one(out)


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
    out = apply(CACHE_APPEND, [state, rows], {"position": position, "axis": axis}, name)
    return state.graph.keep(_one(out))


def _one(out: Tensor | tuple[Tensor, ...]) -> Tensor:
    """apply()'s output of an op of one output."""
    return out[0] if isinstance(out, tuple) else out


@dataclass(frozen=True)
class Cache:
    """A cache a graph keeps as state `state` of `shape` and `dtype`, positions along `axis`: the
    graph's input `read` (None: the graph reads none) held its positions [0, position), its output
    `written` (None: none) the rows for [position, position + n). A state neither read nor written
    is still declared: the states' addresses stay those of the other steps' programs."""

    state: str
    shape: tuple
    dtype: str
    axis: int
    position: int
    read: str | None = None
    written: str | None = None


def keep_in_state(graph: Graph, caches: list[Cache]) -> Graph:
    """`graph`, changed in place: each cache a state (declared in the caches' order), its input a
    read of the state's positions [0, position) and its output appended to it at its position."""
    for c in caches:
        if c.written is not None and c.written not in graph.outputs:
            raise GraphError(f"graph {graph.name}: cache {c.state}'s rows come from output {c.written!r}, which it does not have "
                             f"(outputs: {', '.join(graph.outputs)})")
        state = graph.state(c.state, c.shape, c.dtype)
        if c.read is not None:
            graph.input_from(c.read, lambda c=c, state=state: cache_read(state, c.position, c.axis, name=c.read))
        if c.written is not None:
            cache_append(state, graph.tensors[graph.outputs.pop(c.written)], c.position, c.axis, name=f"{c.state}.append")
    return graph
