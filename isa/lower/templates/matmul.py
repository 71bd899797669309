"""The matrix template: matrix_mul, matrix_mul_v2 and fc_int tiled over M, N and K for the
matrix engine, batch by batch.

For each output tile (tm x tn) the K dimension is walked in steps of tk: the left and right
tiles of each step are loaded into the matrix engine's operand memories (two slots each with
double buffering; a transposed operand is read through strides by the DMA) and multiplied into
an accumulator tile, accumulating after the first step. A right operand lying as rows of K (a
permute of its last two axes read through, as an unfused q @ k^T over a token-major key cache;
isa/lower/templates/place.py) loads in that order, whole rows, and the matrix unit reads the
tile transposed (_right_rows): BM1684X's TIU multiplies by a transposed right matrix
(TPU-Kernel's tpu_bdc_fp_mm_R_trans, MM2_NT) and an Ascend cube's MTE1 transposes as it loads
L0B from L1 (CANN's LoadDataWithTranspose); priced as the plain product, as no source gives
these modes a rate of their own. The integer family first takes its zero
points off the loaded tiles (16-bit copies); matrix_mul_a16 dequantizes its int8 or packed int4
weight tile in local memory (isa/ops/weight_only.py) before the product, the load, the
dequantization and the product of a tile pipelined as a weight-only kernel pipelines them: the
packed tile and its scales are loaded with the step's loads; where the vector unit is an engine of
its own, it dequantizes with the loads too (step i + 1's tile as soon as it lands, ahead of step
i's epilogue), and where it is the matrix unit's own engine (a Sophgo TIU) with the step's
compute, just before the product, so that the engine multiplies step i while the DMA loads step
i + 1 rather than waiting for that load to dequantize it first. Where the vector memory is not the
matrix unit's operand memory (an Ascend AIV's UB and the cube's L0B), the dequantized tile then
moves there along the chip's route, through staging buffers placed with the slots (on A2, UB ->
L2 -> L1 -> L0B: CANN's WeightQuantBatchMatmulV2 writes it to a GM workspace the cube reads); for
a few rows there it may run as CANN's msd kernel instead (isa/lower/templates/msd.py, which lowers
the template's ops and chooses).
A float bias goes where the matrix unit starts its products from, where it has such a memory
(an Ascend cube's BiasTable, isa/lower/templates/bias_table.py).
After the last step the op's epilogue (bias, requantization, cast) runs as vector instructions
and the result tile is stored, or, where the accumulator's way out converts with it (an Ascend
FixPipe, isa/lower/templates/in_flight.py), is done by the DMA that stores the accumulator itself. Tile
sizes are multiples of the matrix unit's m, n, k whose buffers fit, chosen by the lowering's
estimate of the cycles (isa/lower/schedule/estimate.py), at most the policy's limits (M is "n", N is
"c", K is "k").

A tiling may also keep the left operand's row block: the whole tm x K of it is loaded with the
first step of a row and stays (in its own slot) while the row's output tiles walk N and K, so
the left operand crosses DDR once instead of once per column block; the estimate weighs the
larger buffer against the traffic saved. Where the left tile's way into the matrix unit stages
through a larger memory (an Ascend core's L1 before L0A), the block is kept there and each step
cuts its tile from it, as Ascend kernels do.

Output tiles are dealt among the units (each core's matrix engine with its vector engine), each
tile with all its K steps on one unit; where the accumulator reaches the vector memory through
shared memory, the staging buffers are placed with the slots (as in isa/lower/templates/conv.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ... import costs, dtypes
from ...instructions import Matmul, Region, Vector
from ...ops import REGISTRY, weight_only
from ..context import operand_memory
from ..memory.route import STAGE_SLOTS, copy, hop_floor
from ..schedule import estimate, gemv
from ..schedule.estimate import Estimate, Work, tiled
from ..schedule.tiling import halvings, sub_region
from ..templates import bias_table
from .staging import stages
from .tiled import Bufs, Key, Tiled, per_memory

if TYPE_CHECKING:
    from chips.schema import Engine

    from ...graph import Node, Tensor
    from ...ops.matrix import MatrixMul
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.pipeline import Step as PipelineStep
    from ..templates.rows import Position

    Action = Callable[[], None]  # one of a pipeline step's load, compute and store

Need = tuple[Key, str, int]  # (buffer key, memory, bytes)
Choice = tuple[int, int, int, bool, int, int]  # (tm, tn, tk, keep the left block, accumulators, rows of an accumulator's part)
Box = tuple[int, int, int, int, int, int]  # (m0, n0, k0, tm, tn, tk) of a step
Dealt = tuple[tuple[int, ...], int, int]  # (batch index, m0, n0) of an output tile
Slotted = dict[tuple[Key, int], "Buf"]  # (key, slot) -> the Buf placed (_Plan.place)


def run(plan: _Plan, choice: Choice, later: Callable[[], list[Buf]] = list) -> None:
    """The plan's steps in this tiling, dealt among its units; what later() gives is released after
    them (isa/lower/templates/msd.py's workspace)."""
    ctx = plan.ctx
    tm, tn, tk, keep, accs, rows = choice
    M, K, N = plan.M, plan.K, plan.N
    tiles = [(b, m0, n0) for b in np.ndindex(*plan.batch) for m0 in range(0, M, tm) for n0 in range(0, N, tn)]

    def unit_steps(mine: _Plan, run: list[Dealt]) -> tuple[list[PipelineStep], list[Buf]]:
        bufs = mine.place(tm, tn, tk, keep, accs, rows)
        steps: list[PipelineStep] = []
        row, lefts = None, 0  # the row of the left block kept, and how many were loaded
        for tile, (b, m0, n0) in enumerate(run):
            for k0 in range(0, K, tk):
                box = (m0, n0, k0, min(tm, M - m0), min(tn, N - n0), min(tk, K - k0))
                fresh = not keep or (k0 == 0 and (b, m0) != row)
                row, lefts = (b, m0), lefts + fresh
                steps.append(mine.step(bufs, len(steps), (lefts - 1) % ctx.slots, fresh, keep, tile % accs, b, box, k0 == 0, k0 + tk >= K))
        return steps, list(bufs.values())

    plan.run_dealt(tiles, unit_steps, [ctx.home[plan.out.name]], later)


class _Plan(Tiled):
    bias_lead = (1,)  # the bias is a row: (1, N)
    step_keys = frozenset(("a", "b", "as", "bs", "lzp", "rzp", "bu", "sc", "zt", "bq"))
    mx: Engine
    opdef: MatrixMul

    def __init__(self, ctx: Lowering, node: Node) -> None:
        self.ctx, self.node, self.em = ctx, node, ctx.em
        self.opdef, p = REGISTRY[node.op], node.params
        g = ctx.graph
        self.left, self.right = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
        self.out = g.tensors[node.outputs[0]]
        self.batch, self.M, self.K, self.N = self.opdef.dims(self.left.shape, self.right.shape, p)
        self.out_channels = self.N
        self.units = ctx.units("matrix", vector=True)
        self.mx, self.vx = self.units[0].mx, self.units[0].vx
        self.acc_dtype = self.opdef.acc_dtype(self.left.dtype)
        self.asym = self.acc_dtype == "int32" and self.opdef.asymmetric(p)
        self.zp_dtype = self.right.dtype
        self.shifted = "lzp" in p  # the integer family: zero points off the operands, in 16 bits
        self.a16 = node.op == "matrix_mul_a16"  # weight-only quantized: the right tile dequantized on chip
        self.per_byte = weight_only.PER_BYTE[p["bits"]] if self.a16 else 1  # right elements a stored byte
        self.zeroed = self.a16 and len(node.inputs) > 3  # matrix_mul_a16 with zero terms (every 4-bit one)
        self.dequant_ahead = self.a16 and self.mx.name != self.vx.name  # dequantized with the loads (module docstring)
        # where the vector memory is not the matrix unit's right operand memory (an Ascend AIV's UB
        # and the cube's L0B), the dequantized tile moves there (_a16_needs): bq, the product's operand
        self.b_key = "bq" if self.a16 and self.vmem != operand_memory(self.mx, "b") else "bs" if self.a16 else "b"
        self.step_keys = _Plan.step_keys | self._a16_keys()
        self.operand_dtypes = ("int16", "int16") if self.shifted else (self.left.dtype, self.left.dtype if self.a16 else self.right.dtype)
        # the bias as (home Buf of N elements, dtype); the asymmetric mode's is bias_v2, folded here offline
        if self.asym:
            right = g.constants[self.right.name].astype(np.int64)
            self.init_bias((self._fold_bias((right - p["right_zero_point"]).sum(axis=0, keepdims=True)), "int32"), True)
        else:
            self.init_bias(self._given_bias(), dtypes.is_int(self.acc_dtype))
        steps, temps = self.opdef.epilogue(p, self.added_bias, self.out.dtype)
        self.init_epilogue(steps, temps, self.out.name, steps)

    # ---- views of the tensors where they live ----------------------------------------------

    def _matrix(self, tensor: Tensor, batch_index: tuple[int, ...], trans: bool) -> Region:
        """tensor's logical matrix for one batch index (broadcast batch dimensions read index 0),
        transposed through strides when stored so (worked out once per home: every step asks)."""
        key = (tensor.name, batch_index, trans, self.ctx.home[tensor.name])
        memo = self.__dict__.setdefault("_matrices", {})
        if key not in memo:
            memo[key] = self._matrix_of(tensor, batch_index, trans)
        return memo[key]

    def _matrix_of(self, tensor: Tensor, batch_index: tuple[int, ...], trans: bool) -> Region:
        full = self.ctx.home_region(tensor.name)
        lead = len(tensor.shape) - 2
        index = tuple(0 if n == 1 else i for n, i in zip(tensor.shape[:lead], batch_index[len(batch_index) - lead:]))
        item = dtypes.itemsize(tensor.dtype)
        addr = full.addr + sum(i * st for i, st in zip(index, full.strides)) * item
        shape, strides = full.shape[lead:], full.strides[lead:]
        if trans:
            shape, strides = shape[::-1], strides[::-1]
        return Region(full.mem, addr, tensor.dtype, tuple(shape), tuple(strides))

    # ---- sizes ------------------------------------------------------------------------------

    def _right_rows(self) -> bool:
        """Whether the right operand's K x N matrix lies as N rows of K (its home read through a
        transposing permute): then a tile loads as tn rows of tk and the product reads it
        transposed. matrix_mul_a16's packed codes and the integer family's shifted tiles are
        loaded as they are read."""
        memo = self.__dict__.setdefault("_rows", {})
        home = self.ctx.home[self.right.name]
        if home not in memo:
            strides = self.ctx.home_region(self.right.name).strides
            memo[home] = not (self.a16 or self.shifted) and strides[-1] != 1 and strides[-2] == 1
        return bool(memo[home])

    def _kept_mem(self) -> str:
        """Where a kept left row block lives: the last memory the left tile's route into the
        matrix unit's operand memory stages through (an Ascend core's L1), or that memory."""
        amem = operand_memory(self.mx, "a")
        via = stages(self.ctx.chip, self.ctx.home[self.left.name].mem, amem)
        return via[-1] if via else amem

    def _b_mem(self) -> str:
        """Where the right tile loads: the matrix unit's operand memory, or matrix_mul_a16's packed
        tile the vector memory, where it is dequantized."""
        return self.vmem if self.a16 else operand_memory(self.mx, "b")

    def _right_way(self, tk: int, tn: int) -> tuple[str, str, int]:
        """(from, to, bytes) of the right tile's last copy into the matrix unit's operand memory:
        its load from home, or matrix_mul_a16's dequantized tile from the vector memory."""
        bmem = operand_memory(self.mx, "b")
        if self.b_key == "bq":
            return self.vmem, bmem, tk * tn * dtypes.itemsize(self.left.dtype)
        return self.ctx.home[self.right.name].mem, bmem, tk * tn // self.per_byte * dtypes.itemsize(self.right.dtype)

    def _cut(self, keep: bool) -> bool:
        """Whether each step cuts its left tile from a kept block held apart (_kept_mem)."""
        return keep and self._kept_mem() != operand_memory(self.mx, "a")

    def _needs(self, tm: int, tn: int, tk: int, keep: bool = False) -> list[Need]:
        """(buffer key, memory, bytes) of one slot; a kept left block spans the whole of K, in
        the operand memory or, held apart, beside each step's tile."""

        def size(dtype: str, n: int) -> int:
            return n * dtypes.itemsize(dtype)

        amem, bmem, cmem, vmem = operand_memory(self.mx, "a"), operand_memory(self.mx, "b"), operand_memory(self.mx, "c"), self.vmem
        cut = self._cut(keep)
        needs: list[Need] = [("kept", self._kept_mem(), size(self.left.dtype, tm * self.K))] if cut else []
        needs += [
            ("a", amem, size(self.left.dtype, tm * (self.K if keep and not cut else tk))),
            ("b", self._b_mem(), size(self.right.dtype, (self._parts(tk)[0][3] if self.a16 else tk) * tn // self.per_byte)),
            ("acc", cmem, size(self.acc_dtype, tm * tn)),
        ]
        if self.a16:
            needs += self._a16_needs(tk, tn, bmem, vmem)
        if self.shifted:
            p = self.node.params
            needs += [("as", amem, size("int16", tm * tk)), ("bs", bmem, size("int16", tk * tn))]
            needs += [(key, vmem, size("int16", n)) for key, n in (("lzp", tk), ("rzp", tn)) if p[key] == "vector"]
        return needs + self._epilogue_needs(size(self.acc_dtype, tm * tn), tn, tm * tn)

    def _placed(self, tm: int, tn: int, tk: int, keep: bool, accs: int) -> list[tuple[Key, str, int, int]]:
        """(buffer key, memory, bytes, how many) of the buffers a tiling places: one per slot,
        but `accs` accumulators (with the epilogue done on the way out, one can do: the next
        tile's first operands load while it empties)."""
        return [(key, mem, n, accs if key == "acc" else self.ctx.slots) for key, mem, n in self._needs(tm, tn, tk, keep)]

    def _sizes(self, tm: int, tn: int, tk: int, keep: bool = False, accs: int | None = None) -> dict[str, list[int]]:
        """memory -> the sizes of every slot's buffers placed there; beside a block kept apart,
        room for the right tile's stages on its way (Emitter.stage_buffer places them per copy)."""
        per_mem = per_memory((mem, n, count) for _, mem, n, count in self._placed(tm, tn, tk, keep, accs or self.ctx.slots))
        if self._cut(keep) and self.b_key != "bq":  # (matrix_mul_a16's moved tile stages in buffers of its own)
            src, dst, nbytes = self._right_way(tk, tn)
            for mem in stages(self.ctx.chip, src, dst):
                per_mem.setdefault(mem, []).extend([nbytes] * self.ctx.slots)
        return per_mem

    def _fits(self, tm: int, tn: int, tk: int, keep: bool, accs: int) -> bool:
        return self.fits(self._sizes(tm, tn, tk, keep, accs))

    def _search(self) -> Callable[[], tuple[Choice, float]]:
        """The search of (tm, tn, tk, keep, accumulators, part rows): of the candidate sizes
        (from the policy's limits, halved, as multiples of the matrix unit's m, n, k) whose buffers fit, the one of
        least estimated cycles (isa/lower/schedule/estimate.py): larger tiles reload less (the left tile
        once per column block, the right once per row block), smaller ones pipeline sooner and
        share out among the units. tk is chosen as for one unit, so the order of the sums does not
        depend on the units; then, with several, tm and tn for them. An epilogue done on the way
        out (an Ascend FixPipe's) may take one accumulator twice the size of two, filled and
        drained in parts of rows (_parts)."""
        unit = self.matrix_unit
        limits = self.ctx.tile_limits((self.M, self.N, self.K), ("n", "c", "k"))
        depth = unit.depth(self.operand_dtypes[0])
        sizes = [halvings(n, u) for n, u in zip(limits, (unit.m, unit.n, depth))]

        keeps = (False, True) if not self.shifted else (False,)
        accs = (self.ctx.slots, 1) if self.flight is not None and self.ctx.slots > 1 else (self.ctx.slots,)

        def choose(ks: list[int] | None, units: int, only: Callable[[tuple], int] | None) -> tuple[Choice, float] | None:
            """Every candidate is bounded from its shape; whether its buffers fit is asked only
            of those whose floors can still win (tiling.least)."""
            grid = [(tm, tn, tk, keep, n, rows) for tk in ks or sizes[2] for tm in sizes[0] for tn in sizes[1] for keep in keeps
                    for n in accs for rows in self._part_choices(tm, n)]
            ties = (np.array([-math.prod(t[:3]) for t in grid]), np.array([-t[5] for t in grid]))
            return self._least(grid, self._floors(grid, units), ties, units, lambda t: self._fits(*t[:5]), only)

        def search() -> tuple[Choice, float]:
            found = self._for_units(choose, lambda c: c[2])
            if found is None:
                least_tile = (unit.m, unit.n, depth)
                raise self._none_fits(f"a {'x'.join(map(str, least_tile))} matrix tile", self._sizes(*least_tile))
            return found

        def stream() -> tuple[Choice, float]:
            """The least estimate of the column widths of a matrix-vector product, each with the
            largest K block that fits (isa/lower/schedule/gemv.py)."""
            tm = limits[0]
            fitting: list[Choice] = []
            line = max(1, self.ctx.chip.memories["ddr"].burst // dtypes.itemsize(self.right.dtype))
            for tn in gemv.widths(limits[1], unit.n, line):
                fit = next(((tm, tn, tk, keep, self.ctx.slots, tm) for tk in gemv.blocks(limits[2], depth) for keep in reversed(keeps)
                            if self._fits(tm, tn, tk, keep, self.ctx.slots)), None)
                fitting += [fit] if fit else []
            if not fitting:
                return search()
            cycles = [self._schedule(*t, len(self.units)).cycles() for t in fitting]
            best = min(range(len(fitting)), key=cycles.__getitem__)
            return fitting[best], cycles[best]

        gemv_rows = self.M * math.prod(self.batch)
        return stream if gemv.is_gemv(gemv_rows, unit.m) and not self.shifted else search

    def searched(self) -> tuple[Choice, float]:
        """(the tiling of least estimate, its estimated cycles) (tiles)."""
        return self.ctx.search([self.node], [self.out.name], (), self._search())

    def tiles(self) -> Choice:
        """The tiling of least estimate (_search), noted with its cycles."""
        choice, cycles = self.searched()
        kept = ", the left row block kept" if choice[3] else ""
        one = ", one accumulator" if choice[4] < self.ctx.slots else ""
        parts = f" in parts of {choice[5]} rows" if choice[5] < choice[0] else ""
        self.em.notes.append(f"tiling {self.node.name}: output tile {choice[0]}x{choice[1]}, K {choice[2]} a step{kept}{one}{parts}: "
                             f"estimated {cycles:,.0f} cycles")
        return choice

    def _part_choices(self, tm: int, accs: int) -> list[int]:
        """The rows of each part an accumulator may be filled and drained in: where FixPipe
        empties one accumulator (the epilogue done on the way), a tile's last product may run
        part by part, FixPipe draining each part as the cube finishes it, and the next tile's
        first product too, each part waiting only for its own rows, as Ascend's unitFlag lets
        the cube and FixPipe do block by block (Ascend C Mmad and Fixpipe): halvings of tm down to
        the matrix unit's m rows. Otherwise the whole tile in one."""
        if self.flight is None or accs > 1:
            return [tm]
        m = self.matrix_unit.m
        return [rows for rows in halvings(tm, m) if rows % m == 0 or rows == tm]

    def _schedule(self, tm: int, tn: int, tk: int, keep: bool, accs: int, rows: int, units: int = 1) -> Estimate:
        """The Estimate of this tiling: every output tile with its K blocks, on the busiest of
        `units` units, batch by batch. With keep, a row's left block (tm x K) is loaded once,
        with the first step of the row, and stays while the row's output tiles use it (the
        integer family, which shifts its copies per step, never keeps it)."""
        cached = self.ctx.chip.cache is not None  # where a tile is decides what hits: each position its own class
        axes = [[(s if cached or n - s < t else 0, min(t, n - s)) for s in range(0, n, t)] for n, t in ((self.M, tm), (self.N, tn))]
        cut = self._cut(keep)

        def work(kind: Sequence[Position], tk_: int, first: bool, last: bool, k0: int, fresh: bool = True) -> Work:
            """A step's Work; with keep, a fresh one (estimate.tiled's reuse) loads the row's left block, all of K."""
            if keep:
                return self._work(kind, tk_, first, last, k0, rows, tm, self.K if fresh else 0, True, cut)
            return self._work(kind, tk_, first, last, k0, rows, tm)

        return tiled(self.ctx, work, axes, self.K, tk, units, self.ctx.slots, math.prod(self.batch), 1 if keep else None,
                     self._stage_slots(tm, tn, tk, keep, accs), self.once(self.left, self.right), accs, cores=self.unit_cores(units))

    def _schedule_of(self, choice: Choice, units: int) -> Estimate:
        return self._schedule(*choice, units)

    def _stage_slots(self, tm: int, tn: int, tk: int, keep: bool, accs: int) -> dict[str, int]:
        """memory -> how many staging buffers the operands' staged hops will rotate there
        (Emitter.stage_buffer): as many as fit beside this tiling's buffers, up to STAGE_SLOTS."""
        placed: dict[str, int] = {}
        for _, mem, n, count in self._placed(tm, tn, tk, keep, accs):
            placed[mem] = placed.get(mem, 0) + n * count
        staged: dict[str, int] = {}
        for src, mem, n in self._staged_copies(tm, tn, tk, keep):
            for via in stages(self.ctx.chip, src, mem):
                staged[via] = max(staged.get(via, 0), n)
        return {via: max(1, min(STAGE_SLOTS, (self.em.allocators[via].free_bytes() - placed.get(via, 0)) // n))
                for via, n in staged.items()}

    def _staged_copies(self, tm: int, tn: int, tk: int, keep: bool) -> list[tuple[str, str, int]]:
        """(source memory, destination memory, bytes) of a step's copies that stage on their way."""
        copies = [self._right_way(tk, tn)] if self.b_key != "bq" else []  # (matrix_mul_a16's moved tile: its own buffers)
        if not keep:
            copies.append((self.ctx.home[self.left.name].mem, operand_memory(self.mx, "a"), tm * tk * dtypes.itemsize(self.left.dtype)))
        return copies

    def _floors(self, choices: Sequence[Choice], units: int) -> np.ndarray:
        """Lower bounds of the tilings' estimated cycles, from their shapes alone, as an array
        over the candidates: the products (isa/costs.py's formula summed over every tile and
        block, its factors worked out once per extent; with several units, the busiest has at
        least its share), or with one unit the bytes of the operand tiles that come from DDR at
        DDR's bandwidth (bursts left out); where the estimate's bounds hold, also the matrix
        unit's path (Estimate._products_path): the first step's tiles load (their first hop,
        route.hop_floor) before its first product, and the products follow one another."""
        unit, dtype = self.matrix_unit, self.operand_dtypes[0]

        def sizes(n: int, t: int) -> list[tuple[int, int]]:
            return [(t, n // t)] + ([(n % t, 1)] if n % t else [])

        def factors(column: int, factor: Callable[[int], tuple[int, int]]) -> np.ndarray:
            """(how many, folds or cycles) of each candidate's extent in `column`, as rows."""
            extents = [c[column] for c in choices]
            known = {t: factor(t) for t in set(extents)}
            return np.array([known[t] for t in extents], np.int64).reshape(-1, 2).T

        m = factors(0, lambda t: costs.matmul_rows(sizes(self.M, t), unit.m))
        n = factors(1, lambda t: costs.matmul_rows(sizes(self.N, t), unit.n))
        k = factors(2, lambda t: costs.matmul_depths(sizes(self.K, t), unit, dtype))
        batch = math.prod(self.batch)
        total = costs.matmul_combined(m, k, n, self.mx.issue_latency)  # type: ignore[arg-type]  # its arithmetic takes arrays too
        products = batch * (2 if self.asym else 1) * np.asarray(total, np.int64)
        if units > 1:
            return products / units
        home = self.ctx.home
        loaded = np.zeros(len(choices), np.int64)
        if home[self.right.name].mem == "ddr":  # once per row block
            loaded += m[0] * self.K * self.N // self.per_byte * dtypes.itemsize(self.right.dtype)
        if home[self.left.name].mem == "ddr":  # once per column block, or once kept
            keep = np.array([c[3] for c in choices], bool)
            loaded += np.where(keep, 1, n[0]) * self.M * self.K * dtypes.itemsize(self.left.dtype)
        loaded *= batch
        if self.ctx.chip.cache is not None:
            loaded = np.minimum(loaded, self.once(self.left, self.right))
        most = np.maximum(products.astype(float), loaded / self.ctx.chip.memories["ddr"].bandwidth)
        if not estimate.bounds_hold(self.ctx.chip, units):
            return most
        # the matrix unit's path (Estimate._products_path): the first step's tiles load before its first product
        tm, tn, tk = (np.array([c[j] for c in choices], np.int64) for j in range(3))
        keep = np.array([c[3] for c in choices], bool)
        lead = np.zeros(len(choices))
        left = tm * np.where(keep, self.K, tk) * dtypes.itemsize(self.left.dtype)  # a kept block: all of K
        right = tk * tn // self.per_byte * dtypes.itemsize(self.right.dtype)
        for tensor, mem, nbytes in ((self.left, operand_memory(self.mx, "a"), left), (self.right, self._b_mem(), right)):
            src = home[tensor.name].mem
            if src != mem:
                lead = np.maximum(lead, hop_floor(self.ctx.chip, src, mem, 1, nbytes)[1])  # type: ignore[arg-type]  # its arithmetic takes arrays too
        return np.maximum(most, products + lead)

    def _work(self, kind: Sequence[Position], tk: int, first: bool, last: bool, k0: int, rows: int, full_tm: int,
              left_k: int | None = None, keep: bool = False, cut: bool = False) -> Work:
        """The estimate.Work of the K block from k0 of an output tile of kind ((m0, tm), (n0,
        tn)); rows: the rows of the accumulator's parts (of a full tile of full_tm rows); left_k:
        the columns of the left block it loads (default tk; a kept block's K or none); keep: the
        left block is kept (in its own buffer, or cut from a block kept apart)."""
        (m0, tm), (n0, tn) = kind
        left_k = tk if left_k is None else left_k
        load = self._right_piece(tk, tn, k0, n0)
        if left_k:  # after the right tile: its slot's last reader is no later than the right's
            load += self.piece("left", tm, left_k, keep, cut, m0, 0 if keep else k0)
        if cut:
            load += self.piece("cut", tm, tk)
        if self.shifted:
            load += self.piece("shift", tm, tn, tk)
        dequant = self.piece("dequant", tk, tn, k0) if self.a16 else ()
        if self.a16:
            load += self.piece("scales", tk, tn, k0, n0) + (dequant if self.dequant_ahead else ())
        fills = self.piece("bias", tn, n0) if first and self.bias is not None else ()
        product = () if self.dequant_ahead else dequant
        product += self.piece("product", tm, tn, tk, first, last, rows, full_tm, keep and not cut)
        finish = store = ()
        if last:
            finish = self.piece("finish", tm, tn) if self.flight is None else ()
            store = self.piece("store", tm, tn, rows, full_tm, m0, n0)
        return Work(load, product, finish, store, fills)

    def _right_piece(self, tk: int, tn: int, k0: int, n0: int) -> tuple:
        """The right tile's load from (k0, n0): recorded at the first place of its shape and moved
        to each other's bytes, as a copy costs the same at any address but for the ddr regions
        the cache reads (isa/timing/price.py), which move with it (a GEMV's every tile is one)."""
        first = self.__dict__.setdefault("_right_first", {}).setdefault((tk, tn, k0 % self.per_byte), (k0, n0))
        recorded = self.piece("right", tk, tn, *first)
        right = self._matrix(self.right, (0,) * len(self.batch), self.node.params.get("right_trans", False))
        delta = (sub_region(right, (k0 // self.per_byte, n0), (1, 1)).addr
                 - sub_region(right, (first[0] // self.per_byte, first[1]), (1, 1)).addr)
        return recorded if not delta else tuple(t._replace(step=estimate.moved(t.step, delta)) for t in recorded)

    # ---- the estimate's pieces: the emission's own code on roles (isa/lower/schedule/estimate.py) ------

    def _roles(self, tn: int, full_tm: int, rows: int | None = None, keep: bool = False) -> Bufs:
        """A tile's buffers as the estimate's roles, by their `place` keys: slot buffers by step,
        the tile's own by tile (its accumulator in parts of `rows` rows of a full tile of full_tm),
        a kept left block by the tiles that load it."""
        kept = ("kept", "a") if keep and not self._cut(keep) else ("kept",)
        out = self._as_roles(self._needs(full_tm, tn, self.K, keep), kept)  # (a whole K: matrix_mul_a16's every part)
        if rows is not None and rows < full_tm:  # in parts, as `place` splits it
            self.recording().em.split(out["acc"], self._acc_splits(full_tm, tn, rows))
        return out

    def _price_right(self, rec: _Plan, tk: int, tn: int, k0: int, n0: int) -> None:
        right = rec._matrix(self.right, (0,) * len(self.batch), self.node.params.get("right_trans", False))
        rec._load_right({(key, 0): buf for key, buf in self._roles(tn, 1).items()}, 0, right, k0, n0, tk, tn)

    def _price_left(self, rec: _Plan, tm: int, k: int, keep: bool, cut: bool, m0: int, k0: int) -> None:
        bufs = self._roles(1, tm, keep=keep)
        dst = bufs["kept"] if cut else bufs["a"]
        left = sub_region(rec._matrix(self.left, (0,) * len(self.batch), self.node.params.get("left_trans", False)), (m0, k0), (tm, k))
        copy(rec.em, left, self.ctx.home[self.left.name], dst.region(self.left.dtype, (tm, k)), dst, self.node.name)

    def _price_cut(self, rec: _Plan, tm: int, tk: int) -> None:
        bufs = self._roles(1, tm, keep=True)
        kept = bufs["kept"].region(self.left.dtype, (tm, self.K))
        copy(rec.em, sub_region(kept, (0, 0), (tm, tk)), bufs["kept"],
             bufs["a"].region(self.left.dtype, (tm, tk)), bufs["a"], self.node.name)

    def _price_shift(self, rec: _Plan, tm: int, tn: int, tk: int) -> None:
        bufs = self._roles(tn, tm)
        slot = {(key, 0): buf for key, buf in bufs.items()}
        rec._shift(slot, 0, bufs["a"].region(self.left.dtype, (tm, tk)), bufs["b"].region(self.right.dtype, (tk, tn)), 0, 0, tm, tn, tk)

    def _price_scales(self, rec: _Plan, tk: int, tn: int, k0: int, n0: int) -> None:
        bufs = self._roles(tn, 1)
        rec._load_scales({(key, 0): buf for key, buf in bufs.items()}, 0, k0, n0, tk, tn)

    def _price_dequant(self, rec: _Plan, tk: int, tn: int, k0: int) -> None:
        bufs = self._roles(tn, 1)
        rec._dequant({(key, 0): buf for key, buf in bufs.items()}, 0, k0, tk, tn)

    def _price_bias(self, rec: _Plan, tn: int, n0: int) -> None:
        rec._load_bias(self._roles(tn, 1), n0, tn)

    def _price_product(self, rec: _Plan, tm: int, tn: int, tk: int, first: bool, last: bool, rows: int, full_tm: int, kept_a: bool) -> None:
        bufs = self._roles(tn, full_tm, rows, kept_a)
        a = bufs["a"]
        a_r = sub_region(a.region(self.left.dtype, (tm, self.K)), (0, 0), (tm, tk)) if kept_a else a.region(self.left.dtype, (tm, tk))
        rec.zero_point = bufs.get("zp_r")
        rec._products(bufs, a, a_r, tm, tn, tk, first, last)

    def _price_finish(self, rec: _Plan, tm: int, tn: int) -> None:
        rec._finish(self._roles(tn, tm), (tm, tn))

    def _price_store(self, rec: _Plan, tm: int, tn: int, rows: int, full_tm: int, m0: int, n0: int) -> None:
        bufs = self._roles(tn, full_tm, rows)
        out = sub_region(rec._matrix(self.out, (0,) * len(self.batch), False), (m0, n0), (tm, tn))
        rec._store(bufs, out, tm, tn)

    # ---- emission ---------------------------------------------------------------------------

    def place(self, tm: int, tn: int, tk: int, keep: bool, accs: int, rows: int) -> Slotted:
        """Each slot's buffers (`accs` accumulators, split in parts of `rows` rows), and the
        asymmetric mode's zp_r element."""
        bufs = self.place_buffers((key, s, mem, n) for key, mem, n, count in self._placed(tm, tn, tk, keep, accs) for s in range(count))
        for s in range(accs if rows < tm else 0):
            self.em.split(bufs["acc", s], self._acc_splits(tm, tn, rows))
        for buf in self.place_zero_point():
            bufs["zp_r", 0] = buf
        return bufs

    def _acc_splits(self, tm: int, tn: int, rows: int) -> tuple[int, ...]:
        """Where a tm x tn accumulator splits into parts of `rows` rows (Emitter.split's offsets)."""
        return tuple(r * tn * dtypes.itemsize(self.acc_dtype) for r in range(rows, tm, rows))

    def step(self, bufs: Slotted, index: int, a_slot: int, fresh: bool, keep: bool, ts: int, batch_index: tuple[int, ...], box: Box,
             first: bool, last: bool) -> tuple[Action, Action, Action]:
        """(load, compute, store) of one K block of an output tile: the right tile goes in the
        step's slot, the left in a_slot, loaded when fresh: its tm x tk tile, or with keep the
        row's whole tm x K block, whose columns k0:k0+tk the step multiplies; the tile's own
        buffers (its accumulator, ...) are those of slot ts."""
        ctx, em, node, p = self.ctx, self.em, self.node, self.node.params
        m0, n0, k0, tm, tn, tk = box
        ab = index % ctx.slots
        cut = self._cut(keep)
        a, b = bufs["a", a_slot if keep and not cut else ab], bufs["b", ab]
        kept_buf = bufs["kept", a_slot] if cut else a
        kept = kept_buf.region(self.left.dtype, (tm, self.K)) if keep else None
        a_r = sub_region(kept, (0, k0), (tm, tk)) if kept is not None and not cut else a.region(self.left.dtype, (tm, tk))
        b_r = b.region(self.right.dtype, (tk // self.per_byte, tn))
        left = self._matrix(self.left, batch_index, p.get("left_trans", False))
        right = self._matrix(self.right, batch_index, p.get("right_trans", False))
        out = self._matrix(self.out, batch_index, False)
        tile: Bufs = {key: buf for (key, s), buf in bufs.items() if s == ts}
        tile.update({"a": a, "b": b})
        tile.update({key: bufs[key, ab] for key in ("as", "bs", "bq") if (key, ab) in bufs})

        def load() -> None:
            self._load_right(bufs, ab, right, k0, n0, tk, tn)
            if fresh:
                dst = kept if kept is not None else a_r  # the row's whole left block, or the step's tile
                src = sub_region(left, (m0, 0 if kept is not None else k0), dst.shape)
                copy(em, src, ctx.home[self.left.name], dst, kept_buf, node.name)
            if cut and kept is not None:
                copy(em, sub_region(kept, (0, k0), (tm, tk)), kept_buf, a_r, a, node.name)
            if self.shifted:
                self._shift(bufs, ab, a_r, b_r, k0, n0, tm, tn, tk)
            if self.a16:
                self._load_scales(bufs, ab, k0, n0, tk, tn)
            if self.dequant_ahead:
                self._dequant(bufs, ab, k0, tk, tn)
            if first and self.bias is not None:
                self._load_bias(tile, n0, tn)

        def compute() -> None:
            if self.a16 and not self.dequant_ahead:
                self._dequant(bufs, ab, k0, tk, tn)
            self._products(tile, a, a_r, tm, tn, tk, first, last)
            if last and self.flight is None:
                self._finish(tile, (tm, tn))

        def store() -> None:
            if last:
                self._store(tile, sub_region(out, (m0, n0), (tm, tn)), tm, tn)

        return load, compute, store

    def _products(self, tile: Bufs, a: Buf, a_r: Region, tm: int, tn: int, tk: int, first: bool, last: bool) -> None:
        """The step's products into the tile's accumulator: part by part on a tile's first and
        last step where the accumulator is in parts, else whole; the asymmetric mode's second
        product (the left tile times a matrix of zp_r)."""
        em, name = self.em, self.node.name
        a_in, b_in = (tile["as"], tile["bs"]) if self.shifted else (a, tile[self.b_key])
        a_m = a_in.region(self.operand_dtypes[0], (tm, tk)) if self.shifted else a_r
        b_m = _transposed(b_in.region(self.operand_dtypes[1], (tn, tk))) if self._right_rows() else \
            b_in.region(self.operand_dtypes[1], (tk, tn))
        acc = tile["acc"]
        acc_r = acc.region(self.acc_dtype, (tm, tn))
        table = tile["bias"] if first and self.bias_in_table else None
        for r0, rows, held in self._acc_parts(acc, (tm, tn)) if first or last else [(0, tm, acc.parts or (acc,))]:
            a_p, acc_p = sub_region(a_m, (r0, 0), (rows, tk)), sub_region(acc_r, (r0, 0), (rows, tn))
            row = bias_table.row(table, acc_p.shape, self.acc_dtype) if table is not None else None
            reads = (a_in, b_in) + (held if not first else ()) + ((table,) if table else ())
            em.emit(self.mx.name, Matmul(a_p, b_m, acc_p, not first, name, bias=row), reads=reads, writes=held)
        if self.asym:
            zp_r, zp = self._zero_point_block((tk, tn))
            acc_zp = tile["acc_zp"]
            em.emit(self.mx.name, Matmul(a_r, zp_r, acc_zp.region(self.acc_dtype, (tm, tn)), not first, name),
                    reads=(a, zp) + ((acc_zp,) if not first else ()), writes=(acc_zp,))

    def _store(self, tile: Bufs, dst: Region, tm: int, tn: int) -> None:
        """The result tile to `dst`: by the accumulator's way out, part by part, with the epilogue
        done on the way; or copied from the vector memory."""
        if self.flight is not None:
            self._store_flown(tile, dst, (tm, tn))
            return
        result = tile[self.result_key]
        copy(self.em, result.region(self.out.dtype, (tm, tn)), result, dst, self.ctx.home[self.out.name], self.node.name)

    def _shift(self, bufs: Bufs, slot: int, a_r: Region, b_r: Region, k0: int, n0: int, tm: int, tn: int, tk: int) -> None:
        """as = a - lzp (lzp over K), bs = b - rzp (rzp over N), in 16 bits on the vector unit."""
        em, name = self.em, self.node.name
        for key, src, dst_key, start, n in (("lzp", a_r, "as", k0, tk), ("rzp", b_r, "bs", n0, tn)):
            zero, reads = self._zero_operand(key, self.K if key == "lzp" else self.N, start, n, bufs.get((key, slot)), src.shape, 1)
            src_buf = bufs["a" if key == "lzp" else "b", slot]
            dst = bufs[dst_key, slot]
            em.emit(self.vx.name, Vector("sub", dst.region("int16", src.shape), (src, zero), "int64", name),
                    reads=(src_buf,) + reads, writes=(dst,))

    def _a16_needs(self, tk: int, tn: int, bmem: str, vmem: str) -> list[Need]:
        """matrix_mul_a16's slot buffers: the dequantized tile (bs), the unpacked 4-bit codes (bu),
        the rows of scales (sc) and zero terms (zt) a K block of tk spans; where the vector memory
        is not the matrix unit's, the dequantized tile there (bq) and its stages on the way."""
        p, item = self.node.params, dtypes.itemsize(self.left.dtype)
        needs: list[Need] = []
        for sfx, vx, _, rows in self._parts(tk):
            mem, groups = operand_memory(vx, ""), min(self.K // p["group"], (rows - 1) // p["group"] + 2)
            needs += [("b" + sfx, mem, rows * tn // self.per_byte * dtypes.itemsize(self.right.dtype))] if sfx else []
            needs += [("bs" + sfx, mem, rows * tn * item), ("sc" + sfx, mem, groups * tn * item)]
            needs += [("bu" + sfx, mem, rows * tn)] if p["bits"] == 4 else []
            needs += [("zt" + sfx, mem, groups * tn * item)] if self.zeroed else []
            if self.b_key == "bq":  # its part of the tile on its way to the matrix unit's operand memory
                needs += [(f"bq.stage{k}{sfx}", via, rows * tn * item) for k, via in enumerate(stages(self.ctx.chip, mem, bmem))]
        return needs + ([("bq", bmem, tk * tn * item)] if self.b_key == "bq" else [])

    def _parts(self, tk: int) -> list[tuple[str, Engine, int, int]]:
        """(key suffix, vector engine, first row, rows) of the K rows of a step's right tile each
        vector engine loads and dequantizes: where the tile moves to the matrix unit (an Ascend
        cube core), split among the core's vector cores, as CANN's kernel splits the weight over
        a cube core's two AIVs (chips/ascend910b.yaml); else all of it on the unit's."""
        vecs = self._part_engines()
        rows = -(-tk // (len(vecs) * self.per_byte)) * self.per_byte
        return [(_part_suffix(j), vx, j * rows, min(rows, tk - j * rows)) for j, vx in enumerate(vecs) if j * rows < tk]

    def _part_engines(self) -> list[Engine]:
        """The vector engines that share a step's right tile (_parts): the core's, where the tile moves."""
        return self.ctx.chip.engines_of("vector", self.mx.core) if self.b_key == "bq" else [self.vx]

    def _a16_keys(self) -> set[str]:
        """The keys of _a16_needs' slot buffers of every part (_parts), where the tile moves."""
        if self.b_key != "bq":
            return set()
        way = len(stages(self.ctx.chip, self.vmem, operand_memory(self.mx, "b")))
        return {key + _part_suffix(j) for j in range(len(self._part_engines()))
                for key in ("b", "bs", "sc", "bu", "zt", *(f"bq.stage{k}" for k in range(way)))}

    def _load_right(self, bufs: Bufs, slot: int, right: Region, k0: int, n0: int, tk: int, tn: int) -> None:
        """The step's right tile from its home (`right`, the whole matrix) into the slot, part by
        part (_parts) for matrix_mul_a16."""
        pb, home = self.per_byte, self.ctx.home[self.right.name]
        for sfx, _, r0, rows in self._parts(tk) if self.a16 else [("", self.vx, 0, tk)]:
            b = bufs["b" + sfx, slot]
            src = sub_region(right, ((k0 + r0) // pb, n0), (rows // pb, tn))
            if self._right_rows():
                copy(self.em, _transposed(src), home, b.region(self.right.dtype, (tn, rows)), b, self.node.name)
            else:
                copy(self.em, src, home, b.region(self.right.dtype, (rows // pb, tn)), b, self.node.name)

    def _scale_terms(self, bufs: Bufs, slot: int, sfx: str = "") -> list[tuple[Buf, str]]:
        """(slot buffer, constant) of the scales and the zero terms, if any (of part sfx)."""
        terms = [(bufs["sc" + sfx, slot], self.node.inputs[2])]
        return terms + ([(bufs["zt" + sfx, slot], self.node.inputs[3])] if self.zeroed else [])

    def _groups(self, k0: int, tk: int) -> tuple[int, int]:
        """The groups a K block of tk from k0 spans: (first, one past the last)."""
        group = self.node.params["group"]
        return k0 // group, (k0 + tk - 1) // group + 1

    def _load_scales(self, bufs: Bufs, slot: int, k0: int, n0: int, tk: int, tn: int) -> None:
        """The rows of scales (and zero terms) of the groups each part of the K block spans, into the slot."""
        dt, group = self.left.dtype, self.node.params["group"]
        for sfx, _, r0, rows in self._parts(tk):
            g0, g1 = self._groups(k0 + r0, rows)
            for buf, tensor in self._scale_terms(bufs, slot, sfx):
                home = self.ctx.home[tensor]
                src = sub_region(home.region(dt, (self.K // group, self.N)), (g0, n0), (g1 - g0, tn))
                copy(self.em, src, home, buf.region(dt, (g1 - g0, tn)), buf, self.node.name)

    def _dequant(self, bufs: Bufs, slot: int, k0: int, tk: int, tn: int) -> None:
        """The slot's right tile dequantized, part by part (_parts), each on its vector engine."""
        for sfx, vx, r0, rows in self._parts(tk):
            self._dequant_part(bufs, slot, sfx, vx.name, k0, r0, rows, tk, tn)

    def _dequant_part(self, bufs: Bufs, slot: int, sfx: str, vx: str, k0: int, r0: int, tk: int, full: int, tn: int) -> None:
        """bs = rows r0 .. r0 + tk of the step's right tile (of `full` rows from k0) dequantized in
        the left's dtype on vx: 4-bit codes unpacked first (and 15, rshift 4), then each group's
        rows times its row of scales (plus its zero term); then moved to bq where it lives apart."""
        p, em, name, dt = self.node.params, self.em, self.node.name, self.left.dtype
        group, item, k0 = p["group"], dtypes.itemsize(dt), k0 + r0
        b, bs = bufs["b" + sfx, slot], bufs["bs" + sfx, slot]
        codes, codes_buf = b.region(self.right.dtype, (tk, tn)), b
        if p["bits"] == 4:
            bu, half = bufs["bu" + sfx, slot], tk // 2
            packed = b.region("uint8", (half, tn))
            rows = [Region(bu.mem, bu.addr + k * tn, "uint8", (half, tn), (2 * tn, 1)) for k in (0, 1)]
            em.emit(vx, Vector("and", rows[0], (packed, 15), "int32", name), reads=(b,), writes=(bu,))
            em.emit(vx, Vector("rshift", rows[1], (packed, 4, dtypes.DOWN), "int32", name), reads=(b,), writes=(bu,))
            codes, codes_buf = bu.region("uint8", (tk, tn)), bu
        g0, g1 = self._groups(k0, tk)
        terms = [buf for buf, _ in self._scale_terms(bufs, slot, sfx)]
        out = bs.region(dt, (tk, tn))
        for g in range(g0, g1):
            lo, hi = max(k0, g * group) - k0, min(k0 + tk, (g + 1) * group) - k0
            rows = [Region(buf.mem, buf.addr + (g - g0) * tn * item, dt, (hi - lo, tn), (0, 1)) for buf in terms]
            fn = "mul" if len(rows) == 1 else "mul_add"
            block = (sub_region(codes, (lo, 0), (hi - lo, tn)), *rows)
            em.emit(vx, Vector(fn, sub_region(out, (lo, 0), (hi - lo, tn)), block, "float32", name),
                    reads=(codes_buf, *terms), writes=(bs,))
        if self.b_key == "bq":
            bq, bmem = bufs["bq", slot], operand_memory(self.mx, "b")
            staged = [bufs[f"bq.stage{k}{sfx}", slot] for k in range(len(stages(self.ctx.chip, bs.mem, bmem)))]
            copy(em, out, bs, sub_region(bq.region(dt, (full, tn)), (r0, 0), (tk, tn)), bq, name, stages=staged)


def _part_suffix(j: int) -> str:
    """The key suffix of part j's slot buffers (_Plan._parts): none for the first."""
    return "" if j == 0 else f".{j}"


def _transposed(region: Region) -> Region:
    """A 2-d region read with its axes swapped."""
    return region._replace(shape=region.shape[::-1], strides=region.strides[::-1])
