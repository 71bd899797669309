"""The reduction template: reduce, softmax, softmax_int, batch_norm, hw_avg and hw_mul.

A tile keeps every reduced axis of the op's input 0 whole and the tiles split the other (kept)
axes; a tile that cannot hold its reduced axes whole is an OutOfMemoryError. The DMA places a
tile in local memory with the kept axes first and the reduced ones last, densely (a strided
write on the local side; DDR is read in its own order, so the bursts are those of a plain
load), and the store writes results back the same way. So:

- a reduction's source is the tile itself, its trailing dimensions the reduced ones (the
  `reduce_*` vector functions' convention), and its destination a dense tile of the kept
  axes; every output element is reduced over the same contiguous run of local memory whatever
  the tile's size, so tiles that split the kept axes give identical numbers;
- a reduced result is read back over the whole tile through zero strides on the reduced axes
  (softmax's x - max and / sum, batch_norm's per-channel factors).

Tables (softmax_int's exp table) and hw_avg's H x W product are placed once, before the
tiles; everything else is per tile, in two slots when double buffering, through the pipeline.
Each op's steps are in its plan class below; the vector unit does all the arithmetic.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from copy import copy as shallow_copy
from typing import TYPE_CHECKING

from ... import dtypes
from ...errors import OutOfMemoryError, UnsupportedError
from ...instructions import Region, Vector
from ...ops import REGISTRY
from ...ops.norm import stat_factor
from ..context import operand_memory, vector_memories
from ..memory.route import copy
from ..schedule.pipeline import deal, run_units, step_budget
from ..schedule.tiling import boxes, budgeted_tile, dim_names, nbytes, sub_region

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...graph import Node
    from ..context import Lowering, Unit
    from ..emit import Buf
    from ..schedule.fusion import Group

    Operand = tuple[Region, Buf]  # a tile's region and the buffer holding it
    Bufs = dict[str, Buf]  # a tile's buffers by key
    Sizes = list[tuple[str, int]]  # (buffer key, bytes)
    Action = Callable[[], None]  # one of a pipeline step's load, compute and store

F32, I64 = "float32", "int64"


def lower_reduce(ctx: Lowering, group: Group) -> None:
    if len(group.nodes) != 1:  # nothing fuses with a reduction (it is no fusion head: catalog.py)
        raise UnsupportedError(f"reduction template: group {group.nodes[0].name} has {len(group.nodes)} nodes; it runs one")
    node = group.nodes[0]
    plan = PLANS[node.op](ctx, node, group.stores)
    em, units = ctx.em, ctx.units("vector")
    mem = operand_memory(units[0].vx, "")
    alloc = em.allocators[mem]
    first = _prepared(plan, units[0])
    kshape = plan.lay.kshape
    fits = lambda t: all(em.allocators[m].fits([n for _, n in plan.buffers(t)] * ctx.slots) for m in vector_memories(units))  # noqa: E731
    budget = step_budget(ctx, plan.moved(kshape), mem, len(units))
    names = dim_names(len(plan.x.shape))
    tile = budgeted_tile(kshape, fits, plan.moved, budget, ctx.tile_limits(kshape, [names[i] for i in plan.lay.kept]))
    if tile is None:
        one = (1,) * len(kshape)
        need = sum(n for _, n in plan.buffers(one)) * ctx.slots
        raise OutOfMemoryError(
            f"{node.op} {node.name}: a tile keeps the reduced axes {list(plan.lay.axes)} of {plan.x.name}{list(plan.x.shape)} whole "
            f"({plan.lay.count} elements); even one kept element needs {need} bytes of {mem} "
            f"({ctx.slots} slot(s) of {', '.join(f'{k} {n}' for k, n in plan.buffers(one))}); "
            f"{alloc.free_bytes()} free, live: {alloc.live_text()}"
        )

    def step(mine: _Plan, once: Bufs, slots: list[Bufs], i: int, starts: tuple[int, ...],
             extents: tuple[int, ...]) -> tuple[Action, Action, Action]:
        bufs = {**once, **slots[i % ctx.slots]}
        return (lambda: mine.load(bufs, starts, extents), lambda: mine.compute(bufs, extents), lambda: mine.store(bufs, starts, extents))

    per_unit: list[list[tuple[Action, Action, Action]]] = []
    placed: list[Bufs] = []
    for k, (unit, run) in enumerate(zip(units, deal(list(boxes(kshape, tile)), len(units)))):
        if k and not run:
            continue
        mine, once = first if k == 0 else _prepared(plan, unit)
        slots = [{key: em.alloc(operand_memory(unit.vx, ""), n, f"{node.name}/{key}.{s}") for key, n in plan.buffers(tile)}
                 for s in range(ctx.slots)]
        placed += slots + [once]
        per_unit.append([step(mine, once, slots, i, s, e) for i, (s, e) in enumerate(run)])
    run_units(ctx, [ctx.home[t] for t in group.stores], per_unit)
    for bufs in placed:
        for buf in bufs.values():
            em.release(buf)


def _prepared(plan: _Plan, unit: Unit) -> tuple[_Plan, Bufs]:
    """(plan run by unit's vector engine, its buffers placed once for every tile, loaded)."""
    mine = shallow_copy(plan)
    mine.vx = unit.vx.name
    once = {key: plan.em.alloc(operand_memory(unit.vx, ""), n, f"{plan.node.name}/{key}") for key, n in plan.once()}
    mine.prepare(once)
    return mine, once


class Layout:
    """How a tile of a tensor of `shape` sits in local memory: the kept axes in their order,
    then the reduced `axes`, dense."""

    def __init__(self, shape: Sequence[int], axes: Sequence[int]) -> None:
        self.shape, self.axes = tuple(shape), tuple(axes)
        self.kept = tuple(i for i in range(len(shape)) if i not in self.axes)
        self.order = self.kept + self.axes
        self.kshape = tuple(shape[i] for i in self.kept)
        self.rshape = tuple(shape[i] for i in self.axes)
        self.count = math.prod(self.rshape)

    def full(self, buf: Buf, dtype: str, kext: tuple[int, ...]) -> Region:
        """The tile (kept extents, then the reduced axes whole)."""
        return buf.region(dtype, tuple(kext) + self.rshape)

    def spread(self, region: Region) -> Region:
        """A region of the kept extents read over the whole tile: zero strides on the reduced axes."""
        return Region(region.mem, region.addr, region.dtype, region.shape + self.rshape, region.strides + (0,) * len(self.rshape))

    def natural(self, region: Region) -> Region:
        """A tile region in the tensor's own axis order (what the DMA copies)."""
        back = [self.order.index(i) for i in range(len(self.shape))]
        return Region(region.mem, region.addr, region.dtype, tuple(region.shape[i] for i in back), tuple(region.strides[i] for i in back))

    def box(self, kstarts: tuple[int, ...], kext: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(starts, extents) in the tensor of the tile at kept starts and extents."""
        starts, extents = [0] * len(self.shape), list(self.shape)
        for j, i in enumerate(self.kept):
            starts[i], extents[i] = kstarts[j], kext[j]
        return tuple(starts), tuple(extents)


class _Plan(ABC):
    """What one op loads, computes and stores per tile. Subclasses set `loads` and `stores`
    ((tensor name, "full" or "kept", buffer key)) and the buffers and steps."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        self.ctx, self.em, self.node, self.p = ctx, ctx.em, node, node.params
        g = ctx.graph
        self.x = g.tensors[node.inputs[0]]
        self.ins = [g.tensors[t] for t in node.inputs]
        self.outs = [g.tensors[t] for t in node.outputs]
        self.lay = Layout(self.x.shape, REGISTRY[node.op].reduced_axes(self.x.shape, node.params))
        self.vx = ctx.engine("vector").name
        self.stored = set(stores)
        self.loads: list[tuple[str, str, str]] = []  # (tensor, "full" | "kept", buffer key)
        self.stores: list[tuple[str, str, str]] = []

    # ---- sizes ------------------------------------------------------------------------------

    def once(self) -> Sizes:
        """(key, bytes) of buffers placed once for every tile."""
        return []

    @abstractmethod
    def buffers(self, kext: Sequence[int]) -> Sizes:
        """(key, bytes) of one slot's buffers for a tile of kept extents kext."""

    def full_bytes(self, dtype: str, kext: Sequence[int]) -> int:
        return nbytes(dtype, tuple(kext) + self.lay.rshape)

    def moved(self, kext: Sequence[int]) -> int:
        """Bytes a tile loads and stores."""
        total = 0
        for name, how, _ in self.loads + [s for s in self.stores if s[0] in self.stored]:
            dtype = self.ctx.graph.tensors[name].dtype
            total += self.full_bytes(dtype, kext) if how == "full" else nbytes(dtype, kext)
        return total

    # ---- one tile ---------------------------------------------------------------------------

    def prepare(self, once: Bufs) -> None:  # noqa: B027  # a default that the ops with tables override
        """Work done once before the tiles (loads of tables and what is computed from them)."""

    def load(self, bufs: Bufs, kstarts: tuple[int, ...], kext: tuple[int, ...]) -> None:
        for name, how, key in self.loads:
            there, local = self._pair(name, how, bufs[key], kstarts, kext)
            copy(self.em, there, self.ctx.home[name], local, bufs[key], self.node.name)

    def store(self, bufs: Bufs, kstarts: tuple[int, ...], kext: tuple[int, ...]) -> None:
        for name, how, key in self.stores:
            if name in self.stored:
                there, local = self._pair(name, how, bufs[key], kstarts, kext)
                copy(self.em, local, bufs[key], there, self.ctx.home[name], self.node.name)

    def _pair(self, name: str, how: str, buf: Buf, kstarts: tuple[int, ...], kext: tuple[int, ...]) -> tuple[Region, Region]:
        """(home region, local region) of tensor `name`'s part in a tile: "full" is a tile of
        input 0's shape (placed reduced axes last), "kept" one of the kept axes only (a
        reduction's result, a per-channel vector), which at home are in their own order."""
        t = self.ctx.graph.tensors[name]
        if how == "full":
            starts, extents = self.lay.box(kstarts, kext)
            return sub_region(self.ctx.home_region(name), starts, extents), self.lay.natural(self.lay.full(buf, t.dtype, kext))
        kept = self.ctx.home[name].region(t.dtype, self.lay.kshape)
        return sub_region(kept, kstarts, kext), buf.region(t.dtype, tuple(kext))

    @abstractmethod
    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        """The op on a tile of kept extents kext, from its loaded buffers into its result's."""

    # ---- emission helpers -------------------------------------------------------------------

    def full(self, bufs: Bufs, key: str, dtype: str, kext: tuple[int, ...]) -> Operand:
        return self.lay.full(bufs[key], dtype, kext), bufs[key]

    def kept(self, bufs: Bufs, key: str, dtype: str, kext: tuple[int, ...]) -> Operand:
        return bufs[key].region(dtype, tuple(kext)), bufs[key]

    def spread(self, operand: Operand) -> Operand:
        region, buf = operand
        return self.lay.spread(region), buf

    def vector(self, fn: str, dst: Operand, srcs: Sequence[Operand | float], cdt: str) -> None:
        """dst = fn(*srcs): dst a (Region, Buf), srcs (Region, Buf) pairs or numbers."""
        regions = tuple(s[0] if isinstance(s, tuple) else s for s in srcs)
        reads = tuple(s[1] for s in srcs if isinstance(s, tuple))
        self.em.emit(self.vx, Vector(fn, dst[0], regions, cdt, self.node.name), reads=reads, writes=(dst[1],))


# ---- reduce ----------------------------------------------------------------------------------

REDUCE_FNS = {"REDUCE_SUM": "reduce_sum", "REDUCE_MEAN": "reduce_sum", "REDUCE_MAX": "reduce_max",
              "REDUCE_MIN": "reduce_min", "REDUCE_PROD": "reduce_prod"}


class _Reduce(_Plan):
    """SUM / MAX / MIN / PROD straight into the result; MEAN is a sum, then times 1 / count
    (floats, in float32) or divided by count (integers, exactly: the quotient rounded half to
    even). Integer sums are exact (int64); an integer product is computed in float32 and
    saturated, which is exact for 8- and 16-bit results: with no zero factor every partial
    product is at most the final one in magnitude (each factor is an integer >= 1 in
    magnitude), so it is exact below 2^24 and stays far above the saturation bound above it,
    with its sign exact; a zero factor gives 0 or NaN, and NaN stores as 0."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.out = self.outs[0]
        self.method, self.dtype = self.p["method"], self.x.dtype
        self.floats = dtypes.is_float(self.dtype)
        self.acc = None  # the mean's accumulator dtype, when it is not the result's
        if self.method == "REDUCE_MEAN":
            if self.floats:
                self.acc = None if self.dtype == F32 else F32
            else:
                lo, hi = dtypes.int_range(self.dtype)
                self.acc = "int32" if self.lay.count * max(-lo, hi) <= 2**31 - 1 else I64
        self.loads = [(self.x.name, "full", "x")]
        self.stores = [(self.out.name, "kept", "out")]

    def buffers(self, kext: Sequence[int]) -> Sizes:
        out = [("x", self.full_bytes(self.dtype, kext)), ("out", nbytes(self.dtype, kext))]
        return out + ([("acc", nbytes(self.acc, kext))] if self.acc else [])

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        x = self.full(bufs, "x", self.dtype, kext)
        out = self.kept(bufs, "out", self.dtype, kext)
        fn, n = REDUCE_FNS[self.method], self.lay.count
        cdt = F32 if self.floats or self.method == "REDUCE_PROD" else I64
        if self.method != "REDUCE_MEAN":
            self.vector(fn, out, (x,), cdt)
            return
        acc = self.kept(bufs, "acc", self.acc, kext) if self.acc else out
        self.vector("reduce_sum", acc, (x,), cdt)
        if self.floats:
            self.vector("mul", out, (acc, 1 / n), F32)
        else:
            self.vector("div", out, (acc, n), I64)  # the exact quotient, stored rounded half to even


# ---- softmax ---------------------------------------------------------------------------------

class _Softmax(_Plan):
    """m = max(x); e = exp(x - m); y = e / sum(e), in float32 (a float32 x is worked in place)."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.dtype = self.x.dtype
        self.loads = [(self.x.name, "full", "x")]
        self.stores = [(self.outs[0].name, "full", "x")]

    def buffers(self, kext: Sequence[int]) -> Sizes:
        out = [("x", self.full_bytes(self.dtype, kext)), ("m", nbytes(F32, kext)), ("s", nbytes(F32, kext))]
        return out + ([("e", self.full_bytes(F32, kext))] if self.dtype != F32 else [])

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        x = self.full(bufs, "x", self.dtype, kext)
        e = self.full(bufs, "x" if self.dtype == F32 else "e", F32, kext)
        m, s = self.kept(bufs, "m", F32, kext), self.kept(bufs, "s", F32, kext)
        self.vector("reduce_max", m, (x,), F32)
        self.vector("sub", e, (x, self.spread(m)), F32)
        self.vector("exp", e, (e,), F32)
        self.vector("reduce_sum", s, (e,), F32)
        self.vector("div", x, (e, self.spread(s)), F32)


# ---- softmax_int -----------------------------------------------------------------------------

class _SoftmaxInt(_Plan):
    """The seed's formula over C, one step each: max over C; d = max - x (0..255, written over
    x as UINT8); t = table[d]; the sum of t; prob = t / sum; prob * scale; round (halves away
    from zero) to INT32; + zero_point, saturated to the input dtype, written over x."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.dtype, self.table = self.x.dtype, self.ins[1]
        self.loads = [(self.x.name, "full", "x")]
        self.stores = [(self.outs[0].name, "full", "x")]

    def once(self) -> Sizes:
        return [("table", self.table.nbytes)]

    def prepare(self, once: Bufs) -> None:
        buf = once["table"]
        copy(self.em, self.ctx.home_region(self.table.name), self.ctx.home[self.table.name], buf.region(F32, (256,)), buf, self.node.name)

    def buffers(self, kext: Sequence[int]) -> Sizes:
        return [("x", self.full_bytes(self.dtype, kext)), ("t", self.full_bytes(F32, kext)),
                ("max", nbytes(self.dtype, kext)), ("sum", nbytes(F32, kext))]

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        x = self.full(bufs, "x", self.dtype, kext)
        d = self.full(bufs, "x", "uint8", kext)
        t, q = self.full(bufs, "t", F32, kext), self.full(bufs, "t", "int32", kext)
        mx, s = self.kept(bufs, "max", self.dtype, kext), self.kept(bufs, "sum", F32, kext)
        table = (bufs["table"].region(F32, (256,)), bufs["table"])
        self.vector("reduce_max", mx, (x,), I64)
        self.vector("sub", d, (self.spread(mx), x), I64)
        self.vector("lut", t, (d, table), F32)
        self.vector("reduce_sum", s, (t,), F32)
        self.vector("div", t, (t, self.spread(s)), F32)
        self.vector("mul", t, (t, self.p["scale"]), F32)
        self.vector("round", q, (t,), F32)
        self.vector("add", x, (q, self.p["zero_point"]), I64)


# ---- batch_norm ------------------------------------------------------------------------------

class _BatchNorm(_Plan):
    """Per channel tile: the statistics (the given ones times the scale factor, or the batch's:
    sum / count, then the sum of (x - mean)^2 / count), a = gamma / sqrt(variance + epsilon),
    then y = (x - mean) * a + beta, worked in place over x."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.affine = len(node.inputs) == 5
        self.global_stats = self.p["use_global_stats"]
        names = node.inputs
        self.loads = [(names[0], "full", "x")]
        if self.global_stats:
            self.loads += [(names[1], "kept", "mean"), (names[2], "kept", "var")]
        if self.affine:
            self.loads += [(names[3], "kept", "gamma"), (names[4], "kept", "beta")]
        self.stores = [(self.outs[0].name, "full", "x"), (self.outs[1].name, "kept", "mean"), (self.outs[2].name, "kept", "var")]

    def buffers(self, kext: Sequence[int]) -> Sizes:
        out = [("x", self.full_bytes(F32, kext))] + [(k, nbytes(F32, kext)) for k in ("mean", "var", "a")]
        if self.affine:
            out += [("gamma", nbytes(F32, kext)), ("beta", nbytes(F32, kext))]
        return out + ([("sq", self.full_bytes(F32, kext))] if not self.global_stats else [])

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        x = self.full(bufs, "x", F32, kext)
        mean, var, a = (self.kept(bufs, k, F32, kext) for k in ("mean", "var", "a"))
        if self.global_stats:
            factor = stat_factor(self.p["scale"])
            if factor != 1.0:
                self.vector("mul", mean, (mean, factor), F32)
                self.vector("mul", var, (var, factor), F32)
            self.vector("sub", x, (x, self.spread(mean)), F32)
        else:
            inv = 1 / self.lay.count
            sq = self.full(bufs, "sq", F32, kext)
            self.vector("reduce_sum", mean, (x,), F32)
            self.vector("mul", mean, (mean, inv), F32)
            self.vector("sub", x, (x, self.spread(mean)), F32)
            self.vector("square", sq, (x,), F32)
            self.vector("reduce_sum", var, (sq,), F32)
            self.vector("mul", var, (var, inv), F32)
        self.vector("add", a, (var, self.p["epsilon"]), F32)
        self.vector("sqrt", a, (a,), F32)
        self.vector("div", a, (self.kept(bufs, "gamma", F32, kext) if self.affine else 1.0, a), F32)
        if self.affine:
            self.vector("mul_add", x, (x, self.spread(a), self.spread(self.kept(bufs, "beta", F32, kext))), F32)
        else:
            self.vector("mul", x, (x, self.spread(a)), F32)


# ---- hw_avg and hw_mul -----------------------------------------------------------------------

class _HwAvg(_Plan):
    """hw = reduce_prod(tensor_hw) once (an INT32); per tile q = float(x) / hw, then mode 1
    rounds half up exactly as floor(q) + (q - floor(q) >= 0.5) (q - floor(q) is exact in
    float32), mode 2 half away from zero (the `round` function)."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.hw, self.mode, self.dtype = self.ins[1], self.p["mode"], self.x.dtype
        self.loads = [(self.x.name, "full", "x")]
        self.stores = [(self.outs[0].name, "full", "q" if self.mode == 0 else "x")]

    def once(self) -> Sizes:
        return [("hw", self.hw.nbytes), ("area", 4)]

    def prepare(self, once: Bufs) -> None:
        hw, area = once["hw"], once["area"]
        copy(self.em, self.ctx.home_region(self.hw.name), self.ctx.home[self.hw.name], hw.region(self.hw.dtype, (2,)), hw, self.node.name)
        self.vector("reduce_prod", (area.region("int32", ()), area), ((hw.region(self.hw.dtype, (2,)), hw),), I64)

    def buffers(self, kext: Sequence[int]) -> Sizes:
        out = [("x", self.full_bytes(self.dtype, kext)), ("q", self.full_bytes(F32, kext))]
        return out + ([("r", self.full_bytes(F32, kext))] if self.mode == 1 else [])

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        x, q = self.full(bufs, "x", self.dtype, kext), self.full(bufs, "q", F32, kext)
        area = bufs["area"]
        hw = (Region(area.mem, area.addr, "int32", tuple(kext), (0,) * len(kext)), area)
        self.vector("div", q, (x, hw), F32)
        if self.mode == 2:
            self.vector("round", x, (q,), F32)
        elif self.mode == 1:
            r = self.full(bufs, "r", F32, kext)
            self.vector("floor", r, (q,), F32)
            self.vector("sub", q, (q, r), F32)
            self.vector("ge", q, (q, 0.5), F32)
            self.vector("add", x, (r, q), F32)


class _HwMul(_Plan):
    """The INT32 product of the two entries (saturating), times scale in float32."""

    def __init__(self, ctx: Lowering, node: Node, stores: list[str]) -> None:
        super().__init__(ctx, node, stores)
        self.loads = [(self.x.name, "full", "x")]
        self.stores = [(self.outs[0].name, "kept", "out")]

    def buffers(self, kext: Sequence[int]) -> Sizes:
        return [("x", self.full_bytes(self.x.dtype, kext)), ("area", nbytes("int32", kext)), ("out", nbytes(F32, kext))]

    def compute(self, bufs: Bufs, kext: tuple[int, ...]) -> None:
        area = self.kept(bufs, "area", "int32", kext)
        self.vector("reduce_prod", area, (self.full(bufs, "x", self.x.dtype, kext),), I64)
        self.vector("mul", self.kept(bufs, "out", F32, kext), (area, self.p["scale"]), F32)


PLANS: dict[str, Callable[[Lowering, Node, list[str]], _Plan]] = {
    "reduce": _Reduce, "softmax": _Softmax, "softmax_int": _SoftmaxInt, "batch_norm": _BatchNorm, "hw_avg": _HwAvg, "hw_mul": _HwMul}
