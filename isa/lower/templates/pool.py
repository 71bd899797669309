"""The pooling template: pool, pool_int, pool3d_int as window reductions on the vector unit,
with the element-wise ops fused behind them (the layer group's Tail).

The output is tiled over (batch, channels, spatial); each tile loads the input its windows need
(isa/lower/templates/window.py), padding filled with the reduction's identity (the dtype's lowest value
for MAX, zero for AVE), and one reduce_max or reduce_sum over the tile read as
(n, c, outputs..., kernel...) gives every window at once. An average divides by the window's
count: a number where every window of the tile has the same, else a count tile made the same way
from ones where an element counts.

A max pooling can run over a run of its output's rows (a layer group's slice,
isa/lower/schedule/chain.py) and its tilings are priced by the lowering's estimate (isa/lower/schedule/estimate.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import copy as shallow_copy
from typing import TYPE_CHECKING

import numpy as np

from ... import dtypes
from ...errors import OutOfMemoryError
from ...instructions import Region, Vector
from ...ops import REGISTRY
from ..context import operand_memory, vector_memories
from ..schedule import estimate
from ..schedule.estimate import Priced, Work, tiled
from ..schedule.pipeline import deal, run_units, step_budget
from ..schedule.tiling import budgeted_tile, nbytes
from ..templates.local import Tail
from ..templates.rows import RowsTiled
from ..templates.window import Axis, conv_axes, load_window, placed, tile_reads, window_view
from .tiled import recorder, tail_roles

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...graph import Graph, Node
    from ...instructions import Operand
    from ..context import Lowering, Unit
    from ..emit import Buf
    from ..schedule.estimate import Estimate, Timed
    from ..schedule.fusion import Group
    from ..schedule.pipeline import Step
    from ..templates.local import Local, Slot
    from ..templates.rows import Position
    from ..templates.window import Read

    Action = Callable[[], None]  # one of a pipeline step's load, compute and store

Tile = tuple[int, ...]
Bufs = dict[str, "Buf"]  # a slot's buffers by key (_needs)


def lower_pool(ctx: Lowering, group: Group) -> None:
    _Pool(ctx, group).run()


def plan_pool(ctx: Lowering, group: Group) -> _Pool:
    """The plan of a pooling group, to run over rows of its output (isa/lower/schedule/chain.py)."""
    return _Pool(ctx, group)


def pool_axes(graph: Graph, node: Node) -> tuple[Axis, ...]:
    p = node.params
    return conv_axes(graph.tensors[node.inputs[0]].shape[2:], p["kernel"], p["strides"], (1,) * len(p["kernel"]), p["pads"])


class _Pool(Priced, RowsTiled):
    def __init__(self, ctx: Lowering, group: Group) -> None:
        self.ctx, self.em, self.group = ctx, ctx.em, group
        node = self.node = group.nodes[0]
        self.params = node.params
        self.opdef = REGISTRY[node.op]
        self.x = ctx.graph.tensors[node.inputs[0]]
        self.out = ctx.graph.tensors[node.outputs[0]]
        p = self.params
        self.axes = pool_axes(ctx.graph, node)
        self.units = ctx.units("vector")
        self.vx = self.units[0].vx
        self.average = p["method"] == "AVE"
        floats = dtypes.is_float(self.x.dtype)
        self.acc_dtype = ("float32" if floats else "int32") if self.average else self.x.dtype
        self.fill = 0 if self.average else (float("-inf") if floats else dtypes.int_range(self.x.dtype)[0])
        self.tail = Tail(ctx, group.nodes[1:], group.stores, self.out.shape, given={self.out.name})
        self.init_rows()

    @property
    def vmem(self) -> str:
        """The memory of the vector engine the tiles run on: every buffer of the pooling's is there."""
        return operand_memory(self.vx, "")

    def _needs(self, tile: Sequence[int]) -> list[tuple[str, int]]:
        lead, outs = tuple(tile[:2]), tuple(tile[2:])
        extents = tuple(a.extent(n) for a, n in zip(self.axes, outs))
        elems = int(np.prod(tile))
        needs = [("x", nbytes(self.x.dtype, lead + extents)), ("out", nbytes(self.out.dtype, (elems,)))]
        if self.average:
            needs += [("sum", nbytes(self.acc_dtype, (elems,))), ("ones", nbytes("float32", extents)),
                      ("count", nbytes("float32", (elems,)))]
        return needs

    def _fits(self, tile: Sequence[int]) -> bool:
        sizes = [n for _, n in self._needs(tile)] + self.tail.class_bytes(tile)
        return all(self.em.allocators[m].fits(sizes * self.ctx.slots) for m in vector_memories(self.units))

    def _moved(self, tile: Sequence[int]) -> int:
        return self._needs(tile)[0][1] + self.tail.moved(tile)

    def on(self, unit: Unit) -> _Pool:
        """This pooling with its tiles run by unit's vector engine."""
        mine = shallow_copy(self)
        mine.vx = unit.vx
        return mine

    def feasible(self) -> bool:
        """Whether a one-element tile's buffers fit in what is free now."""
        return self._fits((1,) * len(self.out.shape))

    def floor(self) -> int:
        """A lower bound of tiling()'s cycles without a search: none (0); the search is one tile."""
        return 0

    def _search(self) -> tuple[Tile, float | None]:  # type: ignore[override]  # an average's cycles are None: not priced
        """The largest tile that fits (and keeps the pipeline's steps in budget), and for a max
        pooling its estimated cycles (None for an average: its division is not priced)."""
        shape = self.span(self.out.shape[1])
        budget = step_budget(self.ctx, self._moved(shape), self.vmem, len(self.units))
        tile = budgeted_tile(shape, self._fits, self._moved, budget, self.ctx.tile_limits(shape))
        if tile is None:
            need = sum(n for _, n in self._needs((1,) * len(shape)))
            alloc = self.em.allocators[self.vmem]
            raise OutOfMemoryError(f"{self.node.name}: a one-element pooling tile needs {need * self.ctx.slots} bytes of {self.vmem}; "
                                   f"{alloc.free_bytes()} free, live: {alloc.live_text()}")
        return tile, (None if self.average else self._schedule(tile).cycles())

    def _schedule(self, tile: Tile) -> Estimate:
        """The Estimate of a max pooling's tiling: each tile one step on the busiest unit."""
        return tiled(self.ctx, self._work, self.axis_classes(self.span(self.out.shape[1]), tile), 1, 1, len(self.units), self.ctx.slots)

    def _work(self, kind: Sequence[Position], block: int, first: bool, last: bool, start: int) -> Work:
        starts, extents = tuple(c[0] for c in kind), tuple(c[1] for c in kind)
        return Work(*self.piece("step", starts, extents))

    def _price_step(self, rec: _Pool, starts: Tile, extents: Tile) -> tuple[tuple[Timed, ...], ...]:
        """A tile's step, by the emission's own code on the estimate's roles: (load, compute,
        store, tail loads)."""
        bufs = {key: estimate.role(estimate.STEP, key, self.vmem, n) for key, n in self._needs(extents)}
        tail_bufs = tail_roles(self.tail, self.vmem, extents, self.node.name, estimate.STEP)
        load, compute, store = rec._step(bufs, tail_bufs, starts, extents)
        take = recorder(rec.em).take
        load()
        loads = take()
        compute()
        computed = take()
        store()
        return loads, computed, (), take()

    def run(self, rows: tuple[int, int] | None = None) -> None:
        """Emit the pooling of output rows [rows[0], rows[1]) (default: all of them)."""
        if rows is not None:
            self.rows = rows
        tile, cycles = self.tiling()
        if cycles is not None:
            self.em.notes.append(f"tiling {self.node.name}{self.rows_note()}: output tile "
                                 f"{'x'.join(map(str, tile))}: estimated {cycles:,.0f} cycles")
        per_unit: list[list[Step]] = []
        placed: list[Bufs | Slot] = []  # each slot's buffers, then the tail's
        for unit, run in zip(self.units, deal(list(self.placed_boxes(self.out.shape[1], tile)), len(self.units))):
            mine = self.on(unit)
            slots, tails = mine._place(tile) if run else ([], [])
            placed += slots
            placed += tails
            per_unit.append([mine._step(slots[i % self.ctx.slots], tails[i % self.ctx.slots], starts, extents)
                             for i, (starts, extents) in enumerate(run)])
        run_units(self.ctx, [self.ctx.home[t] for t in self.tail.stores], per_unit)
        for bufs in placed:
            for buf in bufs.values():
                self.em.release(buf)

    def _place(self, tile: Tile) -> tuple[list[Bufs], list[Slot]]:
        """Each slot's buffers and the tail's, in this unit's vector memory."""
        name, mem = self.node.name, self.vmem
        slots = [{key: self.em.alloc(mem, n, f"{name}/{key}.{s}") for key, n in self._needs(tile)} for s in range(self.ctx.slots)]
        return slots, self.tail.allocate(mem, tile, name)

    def _step(self, bufs: Bufs, tail_bufs: Slot, starts: Tile, extents: Tile) -> tuple[Action, Action, Action]:
        reads, buf_ext = tile_reads(self.axes, starts[2:], extents[2:])
        x_region = bufs["x"].region(self.x.dtype, tuple(extents[:2]) + buf_ext)
        out = bufs["out"]
        tail_local: Local = {}

        def load() -> None:
            load_window(self.ctx, self.vx, self.x, x_region, bufs["x"], self.axes, reads, starts[:2], self.fill, self.node.name)
            tail_local.update(self.tail.load(tail_bufs, starts, extents))

        def compute() -> None:
            window = window_view(x_region, self.axes, 2)
            target = bufs["sum"] if self.average else out
            result = target.region(self.acc_dtype, extents)
            cdt = "float32" if dtypes.is_float(self.acc_dtype) else "int64"
            self._vector("reduce_sum" if self.average else "reduce_max", result, (window,), cdt, (bufs["x"],), target)
            if self.average:
                self._divide(bufs, result, starts[2:], extents, reads, buf_ext)
            self.tail.compute(self.vx.name, tail_bufs, tail_local, extents, {self.out.name: out})

        def store() -> None:
            self.tail.store(tail_bufs, starts, extents, {self.out.name: out})

        return load, compute, store

    def _vector(self, fn: str, dst: Region, srcs: Sequence[Operand], cdt: str, reads: Sequence[Buf], writes: Buf) -> None:
        self.em.emit(self.vx.name, Vector(fn, dst, tuple(srcs), cdt, self.node.name), reads=reads, writes=(writes,))

    def _divide(self, bufs: Bufs, total: Region, out_starts: Tile, extents: Tile, reads: Sequence[Read], buf_ext: Tile) -> None:
        """out = total / count (pool_int quant_mode 2: (total * scale) >> rshift, half up)."""
        p, out = self.params, bufs["out"]
        out_region = out.region(self.out.dtype, extents)
        if p.get("quant_mode") == 2:
            self._vector("mul_rshift", out_region, (total, p["scale"], p["rshift"], dtypes.HALF_UP), "int64", (bufs["sum"],), out)
            return
        same = self._count(out_starts, extents[2:])
        count: Region | float
        reads_: tuple[Buf, ...]
        if same is None:  # windows of different sizes in this tile: count them like the sum
            ones = bufs["ones"].region("float32", buf_ext)
            counted = self._padded_part(ones, out_starts) if p["count_pad"] else placed(ones, self.axes, reads, 0)
            self._vector("copy", ones, (0.0,), "float32", (), bufs["ones"])
            if counted.size:
                self._vector("copy", counted, (1.0,), "float32", (), bufs["ones"])
            window = window_view(ones, self.axes, 0)  # the same counts for every batch and channel
            spread = Region(window.mem, window.addr, window.dtype, tuple(extents[:2]) + window.shape, (0, 0) + window.strides)
            count = bufs["count"].region("float32", extents)
            self._vector("reduce_sum", count, (spread,), "float32", (bufs["ones"],), bufs["count"])
            reads_ = (bufs["sum"], bufs["count"])
        else:
            count, reads_ = float(same), (bufs["sum"],)
        if dtypes.is_float(self.out.dtype):
            self._vector("div", out_region, (total, count), "float32", reads_, out)
            return
        mean = bufs["sum"].region("float32", extents)  # the integer sum is done with: the mean overwrites it
        self._vector("div", mean, (total, count), "float32", reads_, bufs["sum"])
        self._vector("round", out_region, (mean,), "float32", (bufs["sum"],), out)

    def _count(self, out_starts: Tile, outs: Tile) -> int | None:
        """The window count shared by every output of the tile, or None when they differ. A
        window's count is the product of its counts along each axis."""
        p, total = self.params, 1
        for a, o0, n, (pb, pa) in zip(self.axes, out_starts, outs, p["pads"]):
            per = set()
            for i in range(o0, o0 + n):
                start = i * a.stride - pb
                end = min(start + a.kernel, a.size + pa)
                per.add(end - start if p["count_pad"] else max(min(end, a.size) - max(start, 0), 0))
            if len(per) > 1:
                return None
            total *= per.pop()
        return total

    def _padded_part(self, ones: Region, out_starts: Tile) -> Region:
        """The part of a tile buffer that lies in the padded input (a ceil-mode overhang doesn't)."""
        shape = tuple(
            max(min(ext, a.size + pb + pa - o0 * a.stride), 0)
            for a, o0, (pb, pa), ext in zip(self.axes, out_starts, self.params["pads"], ones.shape)
        )
        return Region(ones.mem, ones.addr, ones.dtype, shape, ones.strides)

