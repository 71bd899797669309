"""matrix_mul_a16 as CANN's msd-group kernel runs it on Atlas A2 for a few rows of activations (a
decode step's projections): WeightQuantBatchMatmulV2's weight_quant_batch_matmul_v2_msd_group.h
and its tiling (docs/sources.md#ascend-msd). The activations are unfolded into integer slices, so
the cube multiplies integers by the weights as stored and no dequantized float16 tile crosses the
L2, as it does in the antiquant kernel of isa/lower/templates/matmul.py (4 bytes of it a weight):

- unfold, each row of the left operand on a vector core of its own: per group of K, its largest
  magnitude a; u = x / a * f1, rounded (halves away from zero), is slice 0; then S - 1 times
  u = (u - slice) * f2, rounded, the next. int8 weights: S = 2, f1 = 127, f2 = 254; 4-bit ones:
  S = 3, f1 = 7.49, f2 = 14.98, each slice then an int4. So x ~= a * sum_j slice_j / (f1 f2^j),
  within a * 0.5 / (f1 f2^(S-1)). The slices ([S * M, K] int8, row j * M + m), each slice row's
  factor a / (f1 f2^j) per group ([G, S * M] float32) and, for the zero terms (every 4-bit
  product's, an asymmetric 8-bit one's), each row's sum over the group ([G, M]) go to a DDR workspace, as the kernel writes them to GM.
- a K step per group on each cube core, its own columns: the slices' tile and the weight tile as
  stored (int8 DDR -> L1 -> L0B; 4-bit: the packed tile into L1 by the cube's MTE2, its codes
  into L0B by MTE1 converting twice, `and` 15 and `rshift` 4, as the memories hold an element a
  byte where the cube reads two codes a byte) multiply into int32 (the cube's int8 rate: the
  slices and 4-bit codes fit int8 operands); the result goes to the core's vector core (L0C ->
  L2 -> UB, the kernel's GM workspace of C), which scales each slice row by its factor, sums the
  slices and adds them times the group's scales (and the sums times its zero terms) into a float32
  row block; after the last group it is cast to the left's dtype and stored.

CANN runs it for M <= group / 8 (IsCapable); here it is then a candidate, taken where its estimate
(the tiles' replay, isa/lower/schedule/estimate.py, plus the unfold's instructions one after another)
is below the antiquant kernel's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ... import dtypes
from ...instructions import Dma, Matmul, Region, Vector
from ..context import operand_memory
from ..memory.route import copy, route
from ..schedule import estimate, gemv
from ..schedule.estimate import Work
from ..schedule.tiling import sub_region
from .matmul import Choice, _Plan, run
from .staging import stages

if TYPE_CHECKING:
    from ...graph import Node
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group
    from .tiled import Bufs, Key

SLICES = {8: (2, 127.0, 254.0), 4: (3, 7.49, 14.98)}  # bits -> (slices, first factor, later factor): the kernel's InitScaleFactor
TINY = 2.0**-100  # the least group magnitude divided by: an all-zero group's slices are zeros
STORED_CODES = {8: "int8", 4: "uint8"}  # bits -> the dtype of the codes the cube reads


def lower_product(ctx: Lowering, group: Group) -> None:
    """The matmul template's lowering: matrix_mul_a16 by the msd kernel where it is a candidate
    (`candidate`) and its estimate is the lower, else isa/lower/templates/matmul.py's."""
    plan = _Plan(ctx, group.nodes[0])
    if candidate(plan):
        msd = _Msd(ctx, plan.node)
        found = msd.searched()
        antiquant = plan.searched()[1]
        if found is not None and found[1] < antiquant:
            choice, cycles = found
            ctx.em.notes.append(f"tiling {plan.node.name}: msd, {msd.slices} slices, output tile {choice[0]}x{choice[1]}, "
                                f"K {choice[2]} a step: estimated {cycles:,.0f} cycles (antiquant {antiquant:,.0f})")
            msd.unfold()
            run(msd, choice, msd.workspace_bufs)
            return
    run(plan, plan.tiles())


def candidate(plan: _Plan) -> bool:
    """Whether matrix_mul_a16 may run as the msd kernel: where its dequantized tile would move to
    the cube through shared memory (an Ascend A2 core), the cube multiplies int8, and, for 4-bit
    weights, the mover into its weight memory converts with `and` and `rshift`; for as few rows
    as CANN runs it for (M <= group / 8, IsCapable)."""
    if not plan.a16 or plan.b_key != "bq" or plan.batch or "int8" not in plan.matrix_unit.block_cycles:
        return False
    p = plan.node.params
    if p["group"] // 8 < plan.M:
        return False
    if p["bits"] == 4:
        way = _packed_way(plan)
        return way is not None and {"and", "rshift"} <= set(plan.ctx.chip.engines[way[1]].converts)
    return True


def _packed_way(plan: _Plan) -> tuple[str, str] | None:
    """(the memory a packed 4-bit tile loads into, the engine that moves it on into the matrix
    unit's weight memory): the last memory the weights' route stages through (an Ascend core's
    L1) and its mover; None without one."""
    chip, bmem = plan.ctx.chip, operand_memory(plan.matrix_engine, "b")
    via = stages(chip, plan.ctx.home[plan.right.name].mem, bmem)
    return (via[-1], route(chip, via[-1], bmem)[0][0]) if via else None


class _Msd(_Plan):
    """The msd kernel's plan: the matrix template's tiling, estimate and pipeline, with its own
    buffers, steps (a K block of one group) and unfold (the module docstring)."""

    def __init__(self, ctx: Lowering, node: Node) -> None:
        super().__init__(ctx, node)
        p = node.params
        self.bits, self.group = p["bits"], p["group"]
        self.slices, self.f1, self.f2 = SLICES[self.bits]
        self.rows = self.slices * self.M  # the cube's left rows: every slice of every row
        self.a16 = False  # (the antiquant kernel's dequantization is not this plan's)
        self.acc_dtype, self.codes = "int32", STORED_CODES[self.bits]
        self.operand_dtypes = ("int8", self.codes)
        self.stage_keys = tuple(f"accv.stage{k}" for k in range(len(stages(ctx.chip, operand_memory(self.matrix_engine, "c"), self.vmem))))
        self.step_keys = frozenset(("a", "b", "bp", "acc", "accv", "sc", "zt", "rf", "gs", *self.stage_keys))
        groups = self.K // self.group
        self.workspace = {  # (dtype, shape) of what the unfold leaves in DDR
            "slices": ("int8", (self.rows, self.K)), "rf": ("float32", (groups, self.rows)), "gs": ("float32", (groups, self.M))}
        self.ws: dict[str, Buf] = {key: estimate.role("fixed", f"msd.{key}", "ddr", dtypes.itemsize(dt) * math.prod(shape))
                                   for key, (dt, shape) in self.workspace.items()}

    def _packed(self) -> tuple[str, str]:
        """_packed_way of this plan's unit (its core's L1 and mover)."""
        way = _packed_way(self)
        assert way is not None, "4-bit weights load packed where there is a way (candidate)"
        return way

    def workspace_bufs(self) -> list[Buf]:
        """The workspace's DDR buffers, released after the steps."""
        return list(self.ws.values())

    # ---- tiling -----------------------------------------------------------------------------

    def searched(self) -> tuple[Choice, float] | None:  # type: ignore[override]
        """(tiling, estimated cycles): of the column widths of a matrix-vector product
        (isa/lower/schedule/gemv.py) whose buffers fit, a K step a group, the least estimate, plus
        the unfold's; None where none fits, or a row's unfold does not."""
        unit = self.matrix_unit
        limits = self.ctx.tile_limits((self.M, self.N, self.K), ("n", "c", "k"))
        line = max(1, self.ctx.chip.memories["ddr"].burst)
        units, slots = len(self.units), self.ctx.slots

        def search() -> tuple[Choice, float] | None:
            vmem = operand_memory(self.ctx.chip.engines_of("vector")[0], "")
            if not self.fits({vmem: [n for _, n in self._unfold_needs()]}):  # a row's unfold in a vector core's memory
                return None
            fitting = [(self.rows, tn, self.group, False, slots, self.rows) for tn in gemv.widths(limits[1], unit.n, line)
                       if self._fits(self.rows, tn, self.group, False, slots)]
            if not fitting:
                return None
            cycles = [self._schedule(*t, units).cycles() for t in fitting]
            best = min(range(len(fitting)), key=cycles.__getitem__)
            return fitting[best], cycles[best] + self._unfold_cycles()

        return self.ctx.search([self.node], [self.out.name], ("msd",), search)

    def _needs(self, tm: int, tn: int, tk: int, keep: bool = False) -> list[tuple[Key, str, int]]:
        """(key, memory, bytes) of a step's buffers and (y, out) its tile's (the module docstring)."""
        mx, vmem, item = self.matrix_engine, self.vmem, dtypes.itemsize(self.left.dtype)
        acc, cmem = tm * tn * 4, operand_memory(mx, "c")
        needs: list[tuple[Key, str, int]] = [("a", operand_memory(mx, "a"), tm * tk), ("b", operand_memory(mx, "b"), tk * tn)]
        needs += [("bp", self._packed()[0], tk // 2 * tn)] if self.bits == 4 else []
        needs += [("acc", cmem, acc), ("accv", vmem, acc)]
        needs += [(key, mem, acc) for key, mem in zip(self.stage_keys, stages(self.ctx.chip, cmem, vmem))]
        needs += [("sc", vmem, tn * item), ("rf", vmem, tm * 4)]
        needs += [("zt", vmem, tn * item), ("gs", vmem, self.M * 4)] if self.zeroed else []
        return needs + [("y", vmem, self.M * tn * 4), ("out", vmem, self.M * tn * item)]

    def _staged_copies(self, tm: int, tn: int, tk: int, keep: bool) -> list[tuple[str, str, int]]:
        """The slices' tile and, for int8 weights, the weight tile, each from DDR (the accumulator's
        way out has its own buffers)."""
        mx = self.matrix_engine
        copies = [("ddr", operand_memory(mx, "a"), tm * tk)]
        return copies + ([("ddr", operand_memory(mx, "b"), tk * tn)] if self.bits == 8 else [])

    def _work(self, kind: tuple, tk: int, first: bool, last: bool, k0: int, rows: int, full_tm: int,  # type: ignore[override]
              left_k: int | None = None, keep: bool = False, cut: bool = False) -> Work:
        (n0, tn), tm = kind[1], self.rows  # (the tiles' rows are the output's: the cube's are every slice's)
        load = self.piece("msd_right", tk, tn, k0, n0) + self.piece("msd_left", tm, tk, k0) + self.piece("msd_terms", tn, k0, n0)
        product = self.piece("msd_group", tm, tn, tk, first)
        finish = self.piece("msd_finish", tn) if last else ()
        store = self.piece("msd_store", tn, n0) if last else ()
        return Work(load, product, finish, store)

    def _msd_roles(self, tn: int) -> Bufs:
        return self._as_roles(self._needs(self.rows, tn, self.group))

    def _price_msd_right(self, rec: _Msd, tk: int, tn: int, k0: int, n0: int) -> None:
        rec._right(self._msd_roles(tn), k0, n0, tk, tn)

    def _price_msd_left(self, rec: _Msd, tm: int, tk: int, k0: int) -> None:
        rec._left(self._msd_roles(1), tm, tk, k0)

    def _price_msd_terms(self, rec: _Msd, tn: int, k0: int, n0: int) -> None:
        rec._terms(self._msd_roles(tn), tn, k0, n0)

    def _price_msd_group(self, rec: _Msd, tm: int, tn: int, tk: int, first: bool) -> None:
        rec._product(self._msd_roles(tn), tm, tn, tk, first)

    def _price_msd_finish(self, rec: _Msd, tn: int) -> None:
        rec._cast(self._msd_roles(tn), tn)

    def _price_msd_store(self, rec: _Msd, tn: int, n0: int) -> None:
        rec._put(self._msd_roles(tn), tn, n0)

    # ---- emission ---------------------------------------------------------------------------

    def step(self, bufs: dict, index: int, a_slot: int, fresh: bool, keep: bool, ts: int, batch_index: tuple[int, ...],
             box: tuple[int, int, int, int, int, int], first: bool, last: bool) -> tuple:
        """(load, compute, store) of one group's K block of an output tile: the step's buffers of
        its slot, y and out of the tile's."""
        _, n0, k0, _, tn, tk = box
        tm = self.rows
        slot = index % self.ctx.slots
        mine: Bufs = {key: buf for (key, s), buf in bufs.items() if s == (slot if key in self.step_keys else ts)}

        def load() -> None:
            self._right(mine, k0, n0, tk, tn)
            self._left(mine, tm, tk, k0)
            self._terms(mine, tn, k0, n0)

        def compute() -> None:
            self._product(mine, tm, tn, tk, first)
            if last:
                self._cast(mine, tn)

        def store() -> None:
            if last:
                self._put(mine, tn, n0)

        return load, compute, store

    def _right(self, b: Bufs, k0: int, n0: int, tk: int, tn: int) -> None:
        """The group's weight codes into the cube's weight memory: int8 as stored; 4-bit packed
        into L1, then its low and high nibbles into the even and odd rows by the mover."""
        home, name = self.ctx.home[self.right.name], self.node.name
        right = self.ctx.home_region(self.right.name)
        codes = b["b"]
        if self.bits == 8:
            copy(self.em, sub_region(right, (k0, n0), (tk, tn)), home, codes.region("int8", (tk, tn)), codes, name)
            return
        packed, half = b["bp"], tk // 2
        src = packed.region("uint8", (half, tn))
        copy(self.em, sub_region(right, (k0 // 2, n0), (half, tn)), home, src, packed, name)
        mover = self._packed()[1]
        for row, fn, args in ((0, "and", (15,)), (1, "rshift", (4, dtypes.DOWN))):
            dst = Region(codes.mem, codes.addr + row * tn, "uint8", (half, tn), (2 * tn, 1))
            self.em.emit(mover, Dma(src, dst, name, fn, args, "int32"), reads=(packed,), writes=(codes,))

    def _left(self, b: Bufs, tm: int, tk: int, k0: int) -> None:
        """The group's columns of every slice row, from the workspace into the cube's left memory."""
        ws = self.ws["slices"]
        src = sub_region(ws.region("int8", (self.rows, self.K)), (0, k0), (tm, tk))
        copy(self.em, src, ws, b["a"].region("int8", (tm, tk)), b["a"], self.node.name)

    def _terms(self, b: Bufs, tn: int, k0: int, n0: int) -> None:
        """The group's scales (and zero terms) over the tile's columns, its slice rows' factors
        (and rows' sums) into the vector core's memory."""
        g, groups, dt, name = k0 // self.group, self.K // self.group, self.left.dtype, self.node.name
        rows = [("sc", self.ctx.home[self.node.inputs[2]], dt, self.N, n0, tn), ("rf", self.ws["rf"], "float32", self.rows, 0, self.rows)]
        if self.zeroed:
            rows += [("zt", self.ctx.home[self.node.inputs[3]], dt, self.N, n0, tn), ("gs", self.ws["gs"], "float32", self.M, 0, self.M)]
        for key, home, dtype, width, c0, n in rows:
            src = sub_region(home.region(dtype, (groups, width)), (g, c0), (1, n))
            copy(self.em, src, home, b[key].region(dtype, (1, n)), b[key], name)

    def _product(self, b: Bufs, tm: int, tn: int, tk: int, first: bool) -> None:
        """The group's integer product, its way to the vector core, and the combine into y."""
        em, name, vx, M = self.em, self.node.name, self.vx.name, self.M
        a, codes, acc, accv = b["a"], b["b"], b["acc"], b["accv"]
        acc_r = acc.region("int32", (tm, tn))
        em.emit(self.matrix_engine.name, Matmul(a.region("int8", (tm, tk)), codes.region(self.codes, (tk, tn)), acc_r, False, name),
                reads=(a, codes), writes=(acc,))
        copy(em, acc_r, acc, accv.region("int32", (tm, tn)), accv, name, stages=[b[key] for key in self.stage_keys])
        scaled = accv.region("float32", (tm, tn))
        rf = b["rf"]
        em.emit(vx, Vector("mul", scaled, (accv.region("int32", (tm, tn)), Region(rf.mem, rf.addr, "float32", (tm, tn), (1, 0))),
                           "float32", name), reads=(accv, rf), writes=(accv,))
        total = sub_region(scaled, (0, 0), (M, tn))
        for j in range(1, self.slices):
            em.emit(vx, Vector("add", total, (total, sub_region(scaled, (j * M, 0), (M, tn))), "float32", name),
                    reads=(accv,), writes=(accv,))
        y, sc = b["y"], b["sc"]
        y_r, scale = y.region("float32", (M, tn)), Region(sc.mem, sc.addr, self.left.dtype, (M, tn), (0, 1))
        fn, srcs = ("mul", (total, scale)) if first else ("mul_add", (total, scale, y_r))
        em.emit(vx, Vector(fn, y_r, srcs, "float32", name), reads=(accv, sc) + (() if first else (y,)), writes=(y,))
        if self.zeroed:
            gs, zt = b["gs"], b["zt"]
            sums, zero = Region(gs.mem, gs.addr, "float32", (M, tn), (1, 0)), Region(zt.mem, zt.addr, self.left.dtype, (M, tn), (0, 1))
            em.emit(vx, Vector("mul_add", y_r, (sums, zero, y_r), "float32", name), reads=(gs, zt, y), writes=(y,))

    def _cast(self, b: Bufs, tn: int) -> None:
        out, y = b["out"], b["y"]
        self.em.emit(self.vx.name, Vector("copy", out.region(self.left.dtype, (self.M, tn)), (y.region("float32", (self.M, tn)),),
                                          "float32", self.node.name), reads=(y,), writes=(out,))

    def _put(self, b: Bufs, tn: int, n0: int) -> None:
        out, home = b["out"], self.ctx.home[self.out.name]
        dst = sub_region(self.ctx.home_region(self.out.name), (0, n0), (self.M, tn))
        copy(self.em, out.region(self.out.dtype, (self.M, tn)), out, dst, home, self.node.name)

    # ---- the unfold -------------------------------------------------------------------------

    def _unfold_needs(self) -> list[tuple[str, int]]:
        """(key, bytes) of a row's unfold buffers in a vector core's memory."""
        groups, item = self.K // self.group, dtypes.itemsize(self.left.dtype)
        needs = [("x", self.K * item), ("u", self.K * 4), ("s", self.slices * self.K), ("am", groups * 4), ("f", self.slices * groups * 4)]
        return needs + ([("gs", groups * 4)] if self.zeroed else [])

    def unfold(self) -> None:
        """The workspace placed in DDR, and each row unfolded into it on a vector core of its own."""
        self.ws = {key: self.em.alloc("ddr", dtypes.itemsize(dt) * math.prod(shape), f"{self.node.name}/msd.{key}")
                   for key, (dt, shape) in self.workspace.items()}
        vectors = self.ctx.chip.engines_of("vector")
        for m in range(self.M):
            vx = vectors[m % len(vectors)]
            mem = operand_memory(vx, "")
            bufs = {key: self.em.alloc(mem, n, f"{self.node.name}/msd.{key}") for key, n in self._unfold_needs()}
            self._unfold_row(bufs, vx.name, m)
            for buf in bufs.values():
                self.em.release(buf)

    def _unfold_cycles(self) -> float:
        """The unfold's estimate: one row's instructions one after another (the rows run on vector
        cores of their own), each at its price (isa/timing/price.py)."""
        rec = self.recording()
        vx = self.ctx.chip.engines_of("vector")[0]
        rec._unfold_row({key: estimate.role("fixed", key, operand_memory(vx, ""), n) for key, n in self._unfold_needs()}, vx.name, 0)
        return sum(t.step.cycles + (t.step.moved / t.step.rate if t.step.rate else 0) for t in rec.em.take())

    def _unfold_row(self, b: dict[str, Buf], vx: str, m: int) -> None:
        """Row m of the left operand unfolded on vx into the workspace (the module docstring)."""
        em, name, dt, K, M, S = self.em, self.node.name, self.left.dtype, self.K, self.M, self.slices
        groups = K // self.group
        x, u, s, am, f = b["x"], b["u"], b["s"], b["am"], b["f"]
        copy(em, sub_region(self.ctx.home_region(self.left.name), (m, 0), (1, K)), self.ctx.home[self.left.name],
             x.region(dt, (1, K)), x, name)

        def vec(fn: str, dst: Region, srcs: tuple, reads: tuple, writes: tuple) -> None:
            em.emit(vx, Vector(fn, dst, srcs, "float32", name), reads=reads, writes=writes)

        shape = (groups, self.group)
        xg, ug, amax = x.region(dt, shape), u.region("float32", shape), am.region("float32", (groups,))
        vec("abs", ug, (xg,), (x,), (u,))
        vec("reduce_max", amax, (ug,), (u,), (am,))
        vec("max", amax, (amax, TINY), (am,), (am,))
        vec("div", ug, (xg, Region(am.mem, am.addr, "float32", shape, (1, 0))), (x, am), (u,))
        vec("mul", ug, (ug, self.f1), (u,), (u,))
        for j in range(S):
            piece = Region(s.mem, s.addr + j * K, "int8", shape, (self.group, 1))
            if j:
                vec("sub", ug, (ug, Region(s.mem, s.addr + (j - 1) * K, "int8", shape, (self.group, 1))), (u, s), (u,))
                vec("mul", ug, (ug, self.f2), (u,), (u,))
            vec("round", piece, (ug,), (u,), (s,))
            vec("div", Region(f.mem, f.addr + j * groups * 4, "float32", (groups,), (1,)), (amax, self.f1 * self.f2**j), (am,), (f,))
        ws = self.ws
        copy(em, s.region("int8", (S, K)), s, Region("ddr", ws["slices"].addr + m * K, "int8", (S, K), (M * K, 1)), ws["slices"], name)
        copy(em, f.region("float32", (S, groups)), f, Region("ddr", ws["rf"].addr + m * 4, "float32", (S, groups), (M, S * M)),
             ws["rf"], name)
        if self.zeroed:
            gs = b["gs"]
            vec("reduce_sum", gs.region("float32", (groups,)), (xg,), (x,), (gs,))
            copy(em, gs.region("float32", (groups,)), gs, Region("ddr", ws["gs"].addr + m * 4, "float32", (groups,), (M,)), ws["gs"], name)
