"""Element-wise work in layer groups: the `Tail` (a chain of element-wise ops run on output
tiles) and the element-wise template, a group that is nothing but a tail.

A layer group may start with a head of another template (a convolution, a pooling) that leaves
its output tile in local memory; the tail then runs its ops on that tile before anything goes
back to the tensors' homes (DDR, or on chip as the policy places them). Every tile loads the tail's other inputs,
runs each op's vector steps and stores the tensors needed outside the group; intermediates never leave local memory.

An op says how a tile of its output reads each input (`input_box`): broadcast operands stay
compact (their size-1 dimensions are read back with stride 0), stride ops load every k-th
element, a lookup table is loaded whole. Inputs read the same way share one load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import OutOfMemoryError
from ...instructions import Region
from ...ops import REGISTRY
from ..context import operand_memory, vector_memories
from ..memory.route import copy
from ..schedule.pipeline import deal, run_units, step_budget
from ..schedule.tiling import boxes, broadcast_view, budgeted_tile, nbytes
from ..templates.vector_steps import emit_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
    from typing import TypeAlias

    from chips.schema import Engine

    from ...graph import Graph, Node, Tensor
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group

    Key: TypeAlias = "_Load | str | tuple[str, int, str]"  # a value of the tail: a load, a tensor made in the group, ("tmp", k, dtype)
    Source: TypeAlias = "dict[tuple[int, int], _Load | str]"  # (node, operand) -> its load or in-group tensor
    Slot = dict[int, Buf]  # one slot's buffers by class
    Local: TypeAlias = "dict[_Load | str, tuple[Region, Buf]]"  # a tile's loads and stored-in-place tensors, where compute reads them
    Action = Callable[[], None]  # one of a pipeline step's load, compute and store


@dataclass(frozen=True, eq=False)
class _Load:
    """A tensor loaded from its home for the group, in one way (see OpDef.load_kind)."""

    tensor: str
    node: _Node  # the first _Node reading it this way
    index: int  # its operand position there
    kind: Hashable  # OpDef.load_kind's


class _Node:
    """A node of the tail with what its op says about it."""

    def __init__(self, graph: Graph, node: Node, compute: Mapping[str, str]) -> None:
        self.node, self.opdef, self.compute = node, REGISTRY[node.op], compute
        ins = [graph.tensors[t] for t in node.inputs]
        self.shapes = [t.shape for t in ins]
        self.out = graph.tensors[node.outputs[0]]
        self.steps = self.opdef.steps(node.params, [t.dtype for t in ins], self.out.dtype)
        self.temps = self.opdef.temps(node.params, [t.dtype for t in ins], self.out.dtype)

    def operand_shape(self, i: int) -> tuple[int, ...]:
        return self.opdef.operand_shape(i, self.shapes)

    def box(self, i: int, starts: Sequence[int], extents: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return self.opdef.input_box(i, self.operand_shape(i), starts, extents, self.node.params)


class Tail:
    """The element-wise nodes of a group over output tiles of `shape`.

    `given` names tensors whose tiles the head leaves in local memory (the head owns their
    buffers); `stores` are the group's tensors needed outside it, given ones included.
    """

    def __init__(self, ctx: Lowering, nodes: Sequence[Node], stores: Sequence[str], shape: tuple[int, ...],
                 given: Iterable[str] = ()) -> None:
        self.ctx, self.graph, self.shape = ctx, ctx.graph, shape
        self.nodes = [_Node(ctx.graph, n, ctx.compute_map(n)) for n in nodes]
        self.stores, self.given = list(stores), set(given)
        produced = {n.out.name for n in self.nodes} | self.given
        self.loads, self.source = _loads(self.nodes, produced)
        self.place = _assign_buffers(self.graph, self.nodes, self.loads, self.source, shape, self.stores, self.given)
        self.classes = sorted(set(self.place.values()))

    # ---- sizing -----------------------------------------------------------------------------

    def _bytes(self, key: Key, tile: Sequence[int]) -> int:
        if isinstance(key, _Load):
            return nbytes(self.graph.tensors[key.tensor].dtype, key.node.box(key.index, (0,) * len(tile), tile)[1])
        if isinstance(key, tuple):  # ("tmp", k, dtype)
            return nbytes(key[2], tile)
        return nbytes(self.graph.tensors[key].dtype, tile)

    def class_bytes(self, tile: Sequence[int]) -> list[int]:
        size = dict.fromkeys(self.classes, 0)
        for key, c in self.place.items():
            size[c] = max(size[c], self._bytes(key, tile))
        return [size[c] for c in self.classes]

    def moved(self, tile: Sequence[int]) -> int:
        """Bytes a tile loads and stores."""
        return sum(self._bytes(k, tile) for k in self.loads) + sum(nbytes(self.graph.tensors[t].dtype, tile) for t in self.stores)

    def least_transfers(self, box: tuple[int, ...], mem: str) -> list[tuple[str, str, int]]:
        """(source memory, destination memory, bytes) of what the tiles of an output box load
        into `mem` and store from it, at least: the box as one tile (a broadcast operand loaded
        once); loads and stores where the tensor lives in `mem` are none."""
        home = self.ctx.home
        out: list[tuple[str, str, int]] = []
        for key in self.loads:
            if home[key.tensor].mem != mem:
                out.append((home[key.tensor].mem, mem, self._bytes(key, box)))
        for t in self.stores:
            if home[t].mem != mem:
                out.append((mem, home[t].mem, nbytes(self.graph.tensors[t].dtype, box)))
        return out

    def allocate(self, mem: str, tile: tuple[int, ...], label: str, alloc: Callable[[str, int, str], Buf] | None = None) -> list[Slot]:
        """One dict of buffers (class -> Buf) per slot, placed by alloc(memory, bytes, name) (by
        default the emitter's; the estimate's roles: tiled.tail_roles)."""
        place = alloc or self.ctx.em.alloc
        names = {c: next(_label(k) for k, v in self.place.items() if v == c) for c in self.classes}
        return [
            {c: place(mem, size, f"{label}/{names[c]}.{s}") for c, size in zip(self.classes, self.class_bytes(tile))}
            for s in range(self.ctx.slots)
        ]

    # ---- one tile ---------------------------------------------------------------------------

    def stored_in_place(self, mem: str | None) -> list[str]:
        """The stored tensors the tail computes straight into their homes: those it makes
        itself whose home is the vector memory `mem` (where its tiles' buffers are)."""
        return [t for t in self.stores if t not in self.given and self.ctx.home[t].mem == mem]

    def load(self, bufs: Slot, starts: tuple[int, ...], extents: tuple[int, ...]) -> Local:
        """Emit the tile's loads; returns for compute (Region, Buf) per load, read where it
        lives when that is the vector memory, and per tensor stored in place its home's tile."""
        em = self.ctx.em
        local: Local = {}
        for key in self.loads:
            s, e, steps = key.node.box(key.index, starts, extents)
            buf = bufs[self.place[key]]
            tensor = self.graph.tensors[key.tensor]
            home = self.ctx.home[key.tensor]
            src = _strided(home, tensor, key.node.operand_shape(key.index), s, e, steps)
            if home.mem == buf.mem:
                local[key] = (src, home)
            else:
                local[key] = (buf.region(tensor.dtype, e), buf)
                copy(em, src, home, local[key][0], buf, key.node.node.name)
        for t in self.stored_in_place(_memory(bufs)):
            home = self.ctx.home[t]
            local[t] = (_strided(home, self.graph.tensors[t], self.shape, starts, extents, (1,) * len(self.shape)), home)
        return local

    def _value(self, bufs: Slot, given: dict[str, Buf] | None, key: str, extents: tuple[int, ...],
               local: Local | None = None) -> tuple[Region, Buf]:
        """(Region, Buf) of a tensor produced in the group, at the tile's extents."""
        if local and key in local:
            return local[key]
        buf = given[key] if given is not None and key in self.given else bufs[self.place[key]]
        return buf.region(self.graph.tensors[key].dtype, extents), buf

    def compute(self, engine: str, bufs: Slot, local: Local, extents: tuple[int, ...],
                given: dict[str, Buf] | None = None) -> None:
        for k, n in enumerate(self.nodes):
            operands = []
            for i in range(len(n.node.inputs)):
                src = self.source[k, i]
                if isinstance(src, _Load):
                    region, buf = local[src]
                    operands.append((region if i in n.opdef.table_inputs else broadcast_view(region, extents), buf))
                else:
                    operands.append(self._value(bufs, given, src, extents, local))
            out = self._value(bufs, given, n.out.name, extents, local)
            temps = [(bufs[self.place[("tmp", j, d)]].region(d, extents), bufs[self.place[("tmp", j, d)]]) for j, d in enumerate(n.temps)]
            emit_steps(self.ctx.em, engine, n.node.name, n.steps, operands, out, temps, n.compute)

    def store(self, bufs: Slot, starts: tuple[int, ...], extents: tuple[int, ...],
              given: dict[str, Buf] | None = None) -> None:
        in_place = self.stored_in_place(_memory(bufs))
        for t in self.stores:
            if t in in_place:
                continue  # computed there
            region, buf = self._value(bufs, given, t, extents)
            home = self.ctx.home[t]
            dst = _strided(home, self.graph.tensors[t], self.shape, starts, extents, (1,) * len(self.shape))
            copy(self.ctx.em, region, buf, dst, home, self.graph.producer[t].name)


def lower_elementwise(ctx: Lowering, group: Group) -> None:
    """A group of element-wise ops alone: tile its output, deal the tiles among the vector
    units, and pipeline each unit's load, compute, store."""
    units = ctx.units("vector")
    engine = units[0].vx
    shape = ctx.graph.tensors[group.nodes[0].outputs[0]].shape
    tail = Tail(ctx, group.nodes, group.stores, shape)
    mem = operand_memory(engine, "")
    alloc = ctx.em.allocators[mem]
    fits = lambda tile: all(ctx.em.allocators[m].fits(tail.class_bytes(tile) * ctx.slots) for m in vector_memories(units))  # noqa: E731
    budget = step_budget(ctx, tail.moved(shape), mem, len(units))
    tile = budgeted_tile(shape, fits, tail.moved, budget, ctx.tile_limits(shape))
    if tile is None:
        need = sum(tail.class_bytes((1,) * len(shape))) * ctx.slots
        raise OutOfMemoryError(f"{mem}: layer group {group.nodes[0].name} needs {need} bytes for a one-element tile; "
                               f"{alloc.free_bytes()} free, live: {alloc.live_text()}")

    def step(vx: Engine, slots: list[Slot], i: int, starts: tuple[int, ...],
             extents: tuple[int, ...]) -> tuple[Action, Action, Action]:
        bufs = slots[i % ctx.slots]
        local: Local = {}
        return (
            lambda: local.update(tail.load(bufs, starts, extents)),
            lambda: tail.compute(vx.name, bufs, local, extents),
            lambda: tail.store(bufs, starts, extents),
        )

    per_unit: list[list[tuple[Action, Action, Action]]] = []
    placed: list[Slot] = []
    for unit, run in zip(units, deal(list(boxes(shape, tile)), len(units))):
        slots = tail.allocate(operand_memory(unit.vx, ""), tile, group.nodes[0].name) if run else []
        placed += slots
        per_unit.append([step(unit.vx, slots, i, s, e) for i, (s, e) in enumerate(run)])
    run_units(ctx, [ctx.home[t] for t in group.stores], per_unit)
    for bufs in placed:
        for buf in bufs.values():
            ctx.em.release(buf)


def _memory(bufs: Slot) -> str | None:
    """The memory a tile's buffers are in (None for a tail that has none)."""
    return next((b.mem for b in bufs.values()), None)


def _label(key: Key) -> str:
    if isinstance(key, _Load):
        return key.tensor
    return f"tmp{key[1]}" if isinstance(key, tuple) else key


def _strided(home: Buf, tensor: Tensor, shape: tuple[int, ...], starts: tuple[int, ...], extents: tuple[int, ...],
             steps: tuple[int, ...]) -> Region:
    """The region of `tensor` (viewed with `shape`) in its home Buf that a box with steps covers."""
    full = home.region(tensor.dtype, shape)
    item = full.nbytes // max(full.size, 1)
    offset = sum(s * st for s, st in zip(starts, full.strides)) * item
    return Region(home.mem, full.addr + offset, tensor.dtype, tuple(extents), tuple(st * k for st, k in zip(full.strides, steps)))


def _loads(nodes: Sequence[_Node], produced: set[str]) -> tuple[list[_Load], Source]:
    """The tail's distinct loads, and for each (node, operand) its load or in-group tensor."""
    loads: dict[tuple[str, Hashable], _Load] = {}
    source: Source = {}
    for k, n in enumerate(nodes):
        for i, t in enumerate(n.node.inputs):
            if t in produced:
                source[k, i] = t
                continue
            kind = n.opdef.load_kind(i, n.shapes, n.node.params)
            source[k, i] = loads.setdefault((t, kind), _Load(t, n, i, kind))
    return list(loads.values()), source


def _assign_buffers(graph: Graph, nodes: Sequence[_Node], loads: Sequence[_Load], source: Source, shape: tuple[int, ...],
                    stores: Sequence[str], given: set[str]) -> dict[Key, int]:
    """value -> buffer class. A node writes in place over an operand of the same shape and width
    that nothing later reads and that isn't stored (nor the head's); scratch tiles are shared by
    position and dtype; everything else gets a class of its own."""
    last_read: dict[_Load | str, int] = {}
    for k, n in enumerate(nodes):
        for i in range(len(n.node.inputs)):
            last_read[source[k, i]] = k
    place: dict[Key, int] = {}
    holder: dict[int, Key] = {}

    def new(key: Key) -> None:
        place[key] = len(holder)
        holder[place[key]] = key

    for key in loads:
        new(key)
    for k, n in enumerate(nodes):
        for j, dtype in enumerate(n.temps):
            if ("tmp", j, dtype) not in place:
                new(("tmp", j, dtype))
        out = n.out
        reusable = [
            place[src] for i, src in ((i, source[k, i]) for i in range(len(n.node.inputs)))
            if src not in given and last_read[src] == k and holder[place[src]] == src and src not in stores
            and i not in n.opdef.table_inputs and _full_width(graph, src, shape, out)
        ]
        if reusable:
            place[out.name] = reusable[0]
            holder[reusable[0]] = out.name
        else:
            new(out.name)
    return place


def _full_width(graph: Graph, src: _Load | str, shape: tuple[int, ...], out: Tensor) -> bool:
    """Whether value src fills a whole tile with out's element width."""
    tensor = graph.tensors[src.tensor if isinstance(src, _Load) else src]
    plain = not isinstance(src, _Load) or src.kind == ("view", shape)
    return plain and tensor.shape == shape and tensor.nbytes == out.nbytes
