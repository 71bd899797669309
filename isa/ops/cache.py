"""Cache ops: read and append to graph state (isa.Graph.state), the key and value caches a
language model's decode steps keep in DDR between runs.

    cache_read(state, length, axis)             positions [0, length) of the state along `axis`
    cache_append(state, rows, position, axis)   the state with `rows` written at positions
                                                [position, position + rows.shape[axis]) along `axis`

A paged cache (vLLM's PagedAttention, MindIE's block tables on Ascend) is a pool of blocks, the
state (pool blocks, ...), and a block table, an integer tensor (sequences, blocks per sequence)
whose entry [s, j] names the pool block holding sequence s's block j. Given the table and a block
j, both ops act on the block view (sequences, ...): pool block table[s, j] as row s, positions and
axis counted within a block (axis 0 is the pool's and no block view's). The table is an operand,
read at run time: the lowering reads and writes the blocks by IndexedDma through its entries
(isa/lower/templates/cache.py), so one program serves any table.

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

from .. import dtypes
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


def check_block(state: tuple, table: Spec, block: Any, where: str) -> tuple:
    """The shape of the block view of a pool of shape `state` a block table `table` gives for
    each sequence's block `block`: (sequences,) + a pool block's shape."""
    block = _whole(block, where, "block")
    if len(table.shape) != 2 or not dtypes.is_int(table.dtype):
        raise ShapeError(f"{where}: the block table must be integers of shape (sequences, blocks per sequence), got "
                         f"{table.dtype}{list(table.shape)}")
    if not 0 <= block < table.shape[1]:
        raise ShapeError(f"{where}: block {block} of a sequence is beyond the block table's {table.shape[1]} (table shape "
                         f"{table.shape}; a block is in 0..{table.shape[1] - 1})")
    if len(state) < 2:
        raise ShapeError(f"{where}: a pool of blocks is (blocks, ...), at least rank 2, got shape {state}")
    return (table.shape[0],) + tuple(state[1:])


def _view(state: Spec, ins: list[Spec], params: dict[str, Any], op: str) -> tuple:
    """The shape the op reads or writes: the state's, or through a block table (its last operand) the block view's."""
    table = ins[-1] if len(ins) == (2 if op == "cache_read" else 3) else None
    return _block_view(state.shape, table, params.get("block"), params["axis"], op)


def _block_view(state: tuple, table: Spec | None, block: Any, axis: int, where: str) -> tuple:
    """The shape a cache op at `axis` acts on: the state's, or its block view through `table`."""
    if table is None:
        return state
    if axis == 0:
        raise ShapeError(f"{where}: axis 0 of a pool counts its blocks; a position is along another axis")
    return check_block(state, table, block, where)


def _blocks(arrays: list[ndarray], params: dict[str, Any], paged: bool) -> Any:
    """The pool blocks each sequence's block view row is (a paged op's), else None."""
    return arrays[-1][:, params["block"]].astype("int64") if paged else None


class CacheRead(OpDef):
    name = "cache_read"
    kind = "global"
    template = "cache"
    seed = "runtime"
    table = False  # a view and DMA copies: no chip's op table lists it (module docstring)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (1, 2):
            raise ShapeError(f"cache_read: takes one state (and a block table), got {len(ins)} tensors")
        return [Spec(check_read(_view(ins[0], ins, params, self.name), params["length"], params["axis"], "cache_read"), ins[0].dtype)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: Any = None) -> list[ndarray]:
        blocks = _blocks(arrays, params, len(arrays) == 2)
        view = arrays[0] if blocks is None else arrays[0][blocks]
        index = [slice(None)] * view.ndim
        index[params["axis"]] = slice(0, params["length"])
        return [view[tuple(index)].copy()]


class CacheAppend(OpDef):
    name = "cache_append"
    kind = "global"
    template = "cache"
    seed = "runtime"
    table = False

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (2, 3):
            raise ShapeError(f"cache_append: takes a state and its new rows (and a block table), got {len(ins)} tensors")
        state, rows = ins[:2]
        if rows.dtype != state.dtype:
            raise UnsupportedError(f"cache_append: rows of {rows.dtype} into a state of {state.dtype}: convert them first")
        check_append(_view(state, ins, params, self.name), rows.shape, params["position"], params["axis"], "cache_append")
        return [Spec(state.shape, state.dtype)]

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: Any = None) -> list[ndarray]:
        state, rows = arrays[:2]
        out = state.copy()
        blocks = _blocks(arrays, params, len(arrays) == 3)
        view = out if blocks is None else out[blocks]
        index = [slice(None)] * view.ndim
        index[params["axis"]] = slice(params["position"], params["position"] + rows.shape[params["axis"]])
        view[tuple(index)] = rows
        if blocks is not None:
            out[blocks] = view
        return [out]


CACHE_READ = register(CacheRead())
CACHE_APPEND = register(CacheAppend())


def _state(tensor: Any, op: str) -> Tensor:
    if not isinstance(tensor, Tensor) or tensor.name not in tensor.graph.states:
        raise GraphError(f"{op}: its first operand must be a state of the graph (isa.Graph.state), got {tensor!r}")
    return tensor


def cache_read(state: Tensor, length: int, axis: int, name: str | None = None, table: Tensor | None = None,
               block: int = 0) -> Tensor:
    """Positions [0, length) of graph state `state` along `axis`, read where they lie; with a
    block table `table`, of each sequence's block `block` (the module docstring)."""
    _state(state, "cache_read")
    where = f"cache_read of state {state.name}"
    axis = _axis(axis, len(state.shape), where)
    check_read(_checked_view(state, table, block, axis, where), length, axis, where)
    params: dict[str, Any] = {"length": int(length), "axis": axis}
    if table is not None:
        params["block"] = int(block)
    out = apply(CACHE_READ, [state] + ([table] if table is not None else []), params, name)
    return _one(out)


def cache_append(state: Tensor, rows: Tensor, position: int, axis: int, name: str | None = None, table: Tensor | None = None,
                 block: int = 0) -> Tensor:
    """Write `rows` into graph state `state` at positions [position, position + rows.shape[axis])
    along `axis` (with a block table `table`, of each sequence's block `block`); the updated state,
    which the graph keeps (isa.Graph.keep) whether or not anything reads it."""
    _state(state, "cache_append")
    where = f"cache_append of {getattr(rows, 'name', rows)!r} into state {state.name}"
    axis = _axis(axis, len(state.shape), where)
    position = _whole(position, where, "position")
    view = _checked_view(state, table, block, axis, where)
    if isinstance(rows, Tensor):
        check_append(view, rows.shape, position, axis, where)
    params: dict[str, Any] = {"position": position, "axis": axis}
    if table is not None:
        params["block"] = int(block)
    out = apply(CACHE_APPEND, [state, rows] + ([table] if table is not None else []), params, name)
    return state.graph.keep(_one(out))


def _checked_view(state: Tensor, table: Tensor | None, block: int, axis: int, where: str) -> tuple:
    """_block_view of a cache op being built: its block table a tensor of the graph."""
    if table is not None and not isinstance(table, Tensor):
        raise GraphError(f"{where}: the block table must be a tensor of the graph, got {table!r}")
    return _block_view(state.shape, None if table is None else Spec(table.shape, table.dtype), block, axis, where)


def _one(out: Tensor | tuple[Tensor, ...]) -> Tensor:
    """apply()'s output of an op of one output."""
    return out[0] if isinstance(out, tuple) else out


@dataclass(frozen=True)
class Cache:
    """A cache a graph keeps as state `state` of `shape` and `dtype`, positions along `axis`: the
    graph's input `read` (None: the graph reads none) held its positions [0, position), its output
    `written` (None: none) the rows for [position, position + n). With `table`, the name of a graph
    input holding a block table, the state is a pool of blocks and the positions are those of each
    sequence's block `block` (several Caches then name one state, a block each). A state neither
    read nor written is still declared: the states' addresses stay those of the other steps' programs."""

    state: str
    shape: tuple
    dtype: str
    axis: int
    position: int
    read: str | None = None
    written: str | None = None
    table: str | None = None
    block: int = 0


def keep_in_state(graph: Graph, caches: list[Cache]) -> Graph:
    """`graph`, changed in place: each cache a state (declared once, in the caches' order), its
    input a read of the state's positions [0, position) and its output appended to it at its
    position, through its block table where it names one."""
    for c in caches:
        if c.written is not None and c.written not in graph.outputs:
            raise GraphError(f"graph {graph.name}: cache {c.state}'s rows come from output {c.written!r}, which it does not have "
                             f"(outputs: {', '.join(graph.outputs)})")
        if c.table is not None and c.table not in graph.inputs:
            raise GraphError(f"graph {graph.name}: cache {c.state}'s block table {c.table!r} is not an input of it "
                             f"(inputs: {', '.join(graph.inputs)})")
    for c in caches:
        state = graph.tensors[c.state] if c.state in graph.states else graph.state(c.state, c.shape, c.dtype)
        table = graph.tensors[c.table] if c.table is not None else None
        if c.read is not None:
            graph.input_from(c.read, lambda c=c, state=state, table=table: cache_read(state, c.position, c.axis, c.read, table, c.block))
        if c.written is not None:
            name = f"{c.state}.append" + (f".{c.block}" if table is not None else "")
            cache_append(state, graph.tensors[graph.outputs.pop(c.written)], c.position, c.axis, name, table, c.block)
    return graph
