"""The matrix template: matrix_mul, matrix_mul_v2 and fc_int tiled over M, N and K for the
matrix engine, batch by batch.

For each output tile (tm x tn) the K dimension is walked in steps of tk: the left and right
tiles of each step are loaded into the matrix engine's operand memories (two slots each with
double buffering; a transposed operand is read through strides by the DMA) and multiplied into
an accumulator tile, accumulating after the first step. The integer family first takes its zero
points off the loaded tiles (16-bit copies). A float bias goes where the matrix unit starts its
products from, where it has such a memory (an Ascend cube's BiasTable, isa/lower/bias_table.py).
After the last step the op's epilogue (bias, requantization, cast) runs as vector instructions
and the result tile is stored, or, where the accumulator's way out converts with it (an Ascend
FixPipe, isa/lower/in_flight.py), is done by the DMA that stores the accumulator itself. Tile
sizes are multiples of the matrix unit's m, n, k whose buffers fit, chosen by the lowering's
estimate of the cycles (isa/lower/estimate.py), at most the policy's limits (M is "n", N is
"c", K is "k").

A tiling may also keep the left operand's row block: the whole tm x K of it is loaded with the
first step of a row and stays (in its own slot) while the row's output tiles walk N and K, so
the left operand crosses DDR once instead of once per column block; the estimate weighs the
larger buffer against the traffic saved. Where the left tile's way into the matrix unit stages
through a larger memory (an Ascend core's L1 before L0A), the block is kept there and each step
cuts its tile from it, as Ascend kernels do.

Output tiles are dealt among the units (each core's matrix engine with its vector engine), each
tile with all its K steps on one unit; where the accumulator reaches the vector memory through
shared memory, the staging buffers are placed with the slots (as in isa/lower/conv.py).
"""

import math
from copy import copy as shallow_copy

import numpy as np

from .. import dtypes
from ..errors import OutOfMemoryError, UnsupportedError
from ..instructions import Matmul, Region, Vector, dense
from ..ops import REGISTRY
from . import bias_table
from .alloc import shortfall
from .estimate import Priced, Work, chain, drain_stall, tiled
from .in_flight import in_flight
from .pipeline import deal, run_units
from .route import STAGE_SLOTS, copy
from .staging import stages
from .tiling import broadcast_view, halvings, least, sub_region
from .vector_steps import emit_steps


def lower_matmul(ctx, group):
    plan = _Plan(ctx, group.nodes[0])
    tm, tn, tk, keep, accs = plan.tiles()
    M, K, N = plan.M, plan.K, plan.N
    tiles = [(b, m0, n0) for b in np.ndindex(*plan.batch) for m0 in range(0, M, tm) for n0 in range(0, N, tn)]
    per_unit, placed = [], []
    for u, (unit, run) in enumerate(zip(plan.units, deal(tiles, len(plan.units)))):
        if u and not run:
            continue
        mine = plan.on(unit)
        bufs = mine.place(tm, tn, tk, keep, accs)
        steps, row, lefts = [], None, 0  # the row of the left block kept, and how many were loaded
        for tile, (b, m0, n0) in enumerate(run):
            for k0 in range(0, K, tk):
                box = (m0, n0, k0, min(tm, M - m0), min(tn, N - n0), min(tk, K - k0))
                fresh = not keep or (k0 == 0 and (b, m0) != row)
                row, lefts = (b, m0), lefts + fresh
                steps.append(mine.step(bufs, len(steps), (lefts - 1) % ctx.slots, fresh, keep, tile % accs, b, box, k0 == 0, k0 + tk >= K))
        per_unit.append(steps)
        placed += bufs.values()
    run_units(ctx, [ctx.home[plan.out.name]], per_unit)
    for buf in placed:
        ctx.em.release(buf)


class _Plan(Priced):
    def __init__(self, ctx, node):
        self.ctx, self.node, self.em = ctx, node, ctx.em
        self.opdef, p = REGISTRY[node.op], node.params
        g = ctx.graph
        self.left, self.right = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
        self.out = g.tensors[node.outputs[0]]
        self.batch, self.M, self.K, self.N = self.opdef.dims(self.left.shape, self.right.shape, p)
        self.units = ctx.units("matrix", vector=True)
        self.mx, self.vx = self.units[0].matrix, self.units[0].vector
        self.acc_dtype = self.opdef.acc_dtype(self.left.dtype)
        self.asym = self.acc_dtype == "int32" and self.opdef.asymmetric(p)
        self.shifted = "lzp" in p  # the integer family: zero points off the operands, in 16 bits
        self.operand_dtypes = ("int16", "int16") if self.shifted else (self.left.dtype, self.right.dtype)
        # the bias as (home Buf of N elements, dtype); the asymmetric mode's is bias_v2, folded here offline
        has_bias = self.opdef.checked_inputs(node) == 3
        if self.asym:
            self.bias = (self._fold_bias(g), "int32")
        elif has_bias:
            self.bias = (ctx.home[node.inputs[2]], g.tensors[node.inputs[2]].dtype)
        else:
            self.bias = None
        # a float bias the products start from, in the matrix unit's bias memory (isa/lower/bias_table.py)
        self.bias_in_table = bias_table.bias_memory(self.units[0], self.bias, dtypes.is_int(self.acc_dtype)) is not None
        added = self.bias and not self.bias_in_table
        self.steps, self.temps = self.opdef.epilogue(p, self.bias[1] if added else None, self.out.dtype)
        # The epilogue reads the accumulator in the vector memory: a copy when the matrix
        # engine accumulates elsewhere (as an Ascend cube does in L0C). The result is the
        # accumulator itself when the two share a dtype.
        self.acc_key = "acc" if self.mx.operand_memory("c") == self.vx.memory else "accv"
        self.out_key = self.acc_key if self.out.dtype == self.acc_dtype else "out"
        self.flight = self._flight(self.units[0])
        if self.flight is not None:  # the store reads the accumulator, and does the epilogue on its way
            self.acc_key = self.out_key = "acc"
        self._works = {}  # the estimate's Work of a step, by kind (_work)

    def _flight(self, unit):
        """The InFlight storing unit's accumulator with the epilogue done on the way, or None."""
        return in_flight(self.ctx.chip, unit, self.steps, self.acc_dtype, self.ctx.home[self.out.name].mem)

    # ---- views of the tensors where they live ----------------------------------------------

    def _matrix(self, tensor, batch_index, trans):
        """tensor's logical matrix for one batch index (broadcast batch dimensions read index 0),
        transposed through strides when stored so."""
        full = self.ctx.home_region(tensor.name)
        lead = len(tensor.shape) - 2
        index = tuple(0 if n == 1 else i for n, i in zip(tensor.shape[:lead], batch_index[len(batch_index) - lead:]))
        item = dtypes.itemsize(tensor.dtype)
        addr = full.addr + sum(i * st for i, st in zip(index, full.strides)) * item
        shape, strides = full.shape[lead:], full.strides[lead:]
        if trans:
            shape, strides = shape[::-1], strides[::-1]
        return Region(full.mem, addr, tensor.dtype, tuple(shape), tuple(strides))

    def _fold_bias(self, g):
        """bias_v2 = bias - zp_l * sum over K of (right - zp_r), a constant bound where the bias
        it replaces lives (DDR without one)."""
        p = self.node.params
        right = g.constants[self.right.name].astype(np.int64)
        bias = g.constants[self.node.inputs[2]].astype(np.int64) if len(self.node.inputs) == 3 else 0
        folded = bias - p["left_zero_point"] * (right - p["right_zero_point"]).sum(axis=0, keepdims=True)
        data = dtypes.convert(folded, "int32").tobytes()
        mem = self.ctx.home[self.node.inputs[2]].mem if len(self.node.inputs) == 3 else "ddr"
        return self.em.bind(f"{self.node.name}.bias_v2", "const", "int32", (1, right.shape[1]), data, mem)

    # ---- sizes ------------------------------------------------------------------------------

    def _kept_mem(self):
        """Where a kept left row block lives: the last memory the left tile's route into the
        matrix unit's operand memory stages through (an Ascend core's L1), or that memory."""
        amem = self.mx.operand_memory("a")
        via = stages(self.ctx.chip, self.ctx.home[self.left.name].mem, amem)
        return via[-1] if via else amem

    def _cut(self, keep):
        """Whether each step cuts its left tile from a kept block held apart (_kept_mem)."""
        return keep and self._kept_mem() != self.mx.operand_memory("a")

    def _needs(self, tm, tn, tk, keep=False):
        """(buffer key, memory, bytes) of one slot; a kept left block spans the whole of K, in
        the operand memory or, held apart, beside each step's tile."""
        size = lambda dtype, n: n * dtypes.itemsize(dtype)  # noqa: E731
        amem, bmem, cmem, vmem = (*(self.mx.operand_memory(r) for r in "abc"), self.vx.memory)
        cut = self._cut(keep)
        needs = [("kept", self._kept_mem(), size(self.left.dtype, tm * self.K))] if cut else []
        needs += [
            ("a", amem, size(self.left.dtype, tm * (self.K if keep and not cut else tk))),
            ("b", bmem, size(self.right.dtype, tk * tn)),
            ("acc", cmem, size(self.acc_dtype, tm * tn)),
        ]
        if self.shifted:
            p = self.node.params
            needs += [("as", amem, size("int16", tm * tk)), ("bs", bmem, size("int16", tk * tn))]
            needs += [(key, vmem, size("int16", n)) for key, n in (("lzp", tk), ("rzp", tn)) if p[key] == "vector"]
        if self.bias_in_table:
            needs += bias_table.needs(self.ctx.chip, *self.bias, self.acc_dtype, self.mx.matrix.bias, tn)
        if self.flight is not None:
            return needs
        acc = size(self.acc_dtype, tm * tn)
        # an accumulator's copy in the vector memory, and the buffers its copy stages through
        in_vmem = lambda key: [("accv" + key[3:], vmem, acc)] + [(f"{key}.stage{k}", mem, acc) for k, mem in enumerate(stages(self.ctx.chip, cmem, vmem))]  # noqa: E731
        if self.acc_key != "acc":
            needs += in_vmem("acc")
        if self.asym:
            needs.append(("acc_zp", cmem, acc))
            if self.acc_key != "acc":
                needs += in_vmem("acc_zp")
        if self.bias is not None and not self.bias_in_table:
            needs.append(("bias", vmem, size(self.bias[1], tn)))
        if self.out_key == "out":
            needs.append(("out", vmem, size(self.out.dtype, tm * tn)))
        needs += [(("tmp", k), vmem, size(d, tm * tn)) for k, d in enumerate(self.temps)]
        return needs

    def _placed(self, tm, tn, tk, keep, accs):
        """(buffer key, memory, bytes, how many) of the buffers a tiling places: one per slot,
        but `accs` accumulators (with the epilogue done on the way out, one can do: the next
        tile's first operands load while it empties)."""
        return [(key, mem, n, accs if key == "acc" else self.ctx.slots) for key, mem, n in self._needs(tm, tn, tk, keep)]

    def _sizes(self, tm, tn, tk, keep=False, accs=None):
        """memory -> the sizes of every slot's buffers placed there; beside a block kept apart,
        room for the right tile's stages on its way (route.stage_buffer places them per copy)."""
        per_mem = {}
        for _, mem, n, count in self._placed(tm, tn, tk, keep, accs or self.ctx.slots):
            per_mem.setdefault(mem, []).extend([n] * count)
        if self._cut(keep):
            for mem in stages(self.ctx.chip, self.ctx.home[self.right.name].mem, self.mx.operand_memory("b")):
                per_mem.setdefault(mem, []).extend([tk * tn * dtypes.itemsize(self.right.dtype)] * self.ctx.slots)
        return per_mem

    def _fits(self, tm, tn, tk, keep, accs):
        return all(self.em.allocators[m].fits(sizes) for m, sizes in self._sizes(tm, tn, tk, keep, accs).items())

    def tiles(self):
        """(tm, tn, tk, keep, accumulators): of the candidate sizes (from the policy's limits,
        halved, as multiples of the matrix unit's m, n, k) whose buffers fit, the one of least
        estimated cycles (isa/lower/estimate.py): larger tiles reload less (the left tile once
        per column block, the right once per row block), smaller ones pipeline sooner and share
        out among the units. tk is chosen as for one unit, so the order of the sums does not
        depend on the units; then, with several, tm and tn for them. An epilogue done on the way
        out (an Ascend FixPipe's) may take one accumulator twice the size of two."""
        unit = self.mx.matrix
        limits = self.ctx.tile_limits((self.M, self.N, self.K), ("n", "c", "k"))
        depth = unit.depth(self.operand_dtypes[0])
        sizes = [halvings(n, u) for n, u in zip(limits, (unit.m, unit.n, depth))]

        keeps = (False, True) if not self.shifted else (False,)
        accs = (self.ctx.slots, 1) if self.flight is not None and self.ctx.slots > 1 else (self.ctx.slots,)

        def choose(ks, units, keeps):
            fitting = [(tm, tn, tk, keep, n) for tk in ks for tm in sizes[0] for tn in sizes[1] for keep in keeps for n in accs
                       if self._fits(tm, tn, tk, keep, n)]
            return least((self._schedule(*t, units), -math.prod(t[:3]), t) for t in fitting)

        choice = choose(sizes[2], 1, keeps)
        if choice is None:
            least_tile = (unit.m, unit.n, depth)
            raise OutOfMemoryError(f"{self.node.name}: even a {'x'.join(map(str, least_tile))} matrix tile needs {shortfall(self.em.allocators, self._sizes(*least_tile))}")
        if len(self.units) > 1:
            choice = choose([choice[2]], len(self.units), keeps)
        cycles = self._schedule(*choice, len(self.units)).cycles()
        kept = ", the left row block kept" if choice[3] else ""
        one = ", one accumulator" if choice[4] < self.ctx.slots else ""
        self.em.notes.append(f"tiling {self.node.name}: output tile {choice[0]}x{choice[1]}, K {choice[2]} a step{kept}{one}: estimated {cycles:,.0f} cycles")
        return choice

    def _schedule(self, tm, tn, tk, keep, accs, units=1):
        """The Estimate of this tiling: every output tile with its K blocks, on the busiest of
        `units` units, batch by batch. With keep, a row's left block (tm x K) is loaded once,
        with the first step of the row, and stays while the row's output tiles use it (the
        integer family, which shifts its copies per step, never keeps it)."""
        axes = [[(t,)] * (n // t) + ([(n % t,)] if n % t else []) for n, t in ((self.M, tm), (self.N, tn))]
        work, floor = (self._kept_work, self._kept_floor) if keep else (self._work, self._floor)
        return tiled(work, axes, self.K, tk, units, self.ctx.slots,
                     self.out_key == "acc", math.prod(self.batch), floor, 1 if keep else None, self._stage_slots(tm, tn, tk, keep, accs),
                     self.once(self.left, self.right), accs, -(-tm // self._part_rows(tm, tn, tk, accs, units)))

    def _stage_slots(self, tm, tn, tk, keep, accs):
        """memory -> how many staging buffers the operands' staged hops will rotate there
        (route.stage_buffer): as many as fit beside this tiling's buffers, up to STAGE_SLOTS."""
        placed = {}
        for _, mem, n, count in self._placed(tm, tn, tk, keep, accs):
            placed[mem] = placed.get(mem, 0) + n * count
        staged = {}
        copies = [(self.right, self.mx.operand_memory("b"), tk * tn)]
        if not keep:
            copies.append((self.left, self.mx.operand_memory("a"), tm * tk))
        for t, mem, n in copies:
            for via in stages(self.ctx.chip, self.ctx.home[t.name].mem, mem):
                staged[via] = max(staged.get(via, 0), n * dtypes.itemsize(t.dtype))
        return {via: max(1, min(STAGE_SLOTS, (self.em.allocators[via].free_bytes() - placed.get(via, 0)) // n)) for via, n in staged.items()}

    def _kept_work(self, busy, kind, tk, first, last, fresh):
        return self._work(busy, kind, tk, first, last, self.K if fresh else 0, self._cut(True))

    def _kept_floor(self, busy, kind, tk, first, last, fresh):
        return self._floor(busy, kind, tk, first, last, self.K if fresh else 0)

    def _floor(self, busy, kind, tk, first, last, left_k=None):
        """Estimate.floor's terms of a step: its products, and the bytes of its operand tiles
        where they come from DDR (bursts left out); left_k: the columns of the left block it
        loads (default tk)."""
        (tm,), (tn,) = kind
        operands = ((self.left, tm * (tk if left_k is None else left_k)), (self.right, tk * tn))
        nbytes_from_ddr = sum(n * dtypes.itemsize(t.dtype) for t, n in operands if self.ctx.home[t.name].mem == "ddr")
        price = self.pricer(busy)
        return [price.matmul(self.mx.name, tm, tk, tn, self.operand_dtypes[0])] * (2 if self.asym else 1), nbytes_from_ddr / price.ddr_rate

    def _work(self, busy, kind, tk, first, last, left_k=None, cut=False):
        """The estimate.Work of one K block of an output tile of kind ((tm,), (tn,)); left_k:
        the columns of the left block it loads (default tk; a kept block's K or none); cut:
        whether it cuts its left tile from a block kept apart (_cut)."""
        left_k = tk if left_k is None else left_k
        key = (busy, kind, tk, first, last, left_k, cut)
        if key in self._works:
            return self._works[key]
        price = self.pricer(busy)
        (tm,), (tn,) = kind
        p, vx = self.node.params, self.vx
        amem, bmem, cmem, vmem = (*(self.mx.operand_memory(r) for r in "abc"), vx.memory)
        zero = (0,) * len(self.batch)
        left = sub_region(self._matrix(self.left, zero, p.get("left_trans", False)), (0, 0), (tm, left_k))
        right = sub_region(self._matrix(self.right, zero, p.get("right_trans", False)), (0, 0), (tk, tn))
        load = price.copy(right, dense(bmem, 0, self.right.dtype, (tk, tn)))
        kmem = self._kept_mem() if cut else amem
        if left_k:  # after the right tile: its slot's last reader is no later than the right's
            load += price.copy(left, dense(kmem, 0, self.left.dtype, (tm, left_k)))
        if cut:
            load += price.copy(sub_region(dense(kmem, 0, self.left.dtype, (tm, self.K)), (0, 0), (tm, tk)), dense(amem, 0, self.left.dtype, (tm, tk)))
        if self.shifted:
            load += [price.vector(vx.name, tm * tk, "int16", "sub"), price.vector(vx.name, tk * tn, "int16", "sub")]
        fills = []
        if first and self.bias:
            table = dense(self.mx.matrix.bias, 0, self.acc_dtype, (1, tn)) if self.bias_in_table else dense(vmem, 0, self.bias[1], (1, tn))
            fills = price.copy(dense(self.bias[0].mem, 0, self.bias[1], (1, tn)), table)
        passes = 2 if self.asym else 1
        product = [price.matmul(self.mx.name, tm, tk, tn, self.operand_dtypes[0])] * passes
        finish, store = [], []
        out = sub_region(self._matrix(self.out, zero, False), (0, 0), (tm, tn))
        if last and self.flight is not None:
            store = price.copy(dense(cmem, 0, self.acc_dtype, (tm, tn)), out)
        elif last:
            if self.acc_key != "acc":
                for _ in range(passes):
                    finish += price.copy(dense(cmem, 0, self.acc_dtype, (tm, tn)), dense(vmem, 0, self.acc_dtype, (tm, tn)))
            inputs = [self.acc_dtype] + ([self.bias[1]] if self.bias and not self.bias_in_table else []) + ([self.acc_dtype] if self.asym else [])
            finish += price.steps(vx.name, self.steps, inputs, self.out.dtype, self.temps, tm * tn)
            store = price.copy(dense(vmem, 0, self.out.dtype, (tm, tn)), out)
        work = self._works[key] = Work(chain(load), chain(product), chain(finish), chain(store), chain(fills))
        return work

    # ---- emission ---------------------------------------------------------------------------

    def on(self, unit):
        """This product with its tiles run by unit's engines."""
        mine = shallow_copy(self)
        mine.mx, mine.vx, mine.flight = unit.matrix, unit.vector, self._flight(unit)
        return mine

    def place(self, tm, tn, tk, keep, accs):
        name = self.node.name
        bufs = {
            (key, s): self.em.alloc(mem, n, f"{name}/{key if isinstance(key, str) else f'tmp{key[1]}'}.{s}")
            for key, mem, n, count in self._placed(tm, tn, tk, keep, accs)
            for s in range(count)
        }
        rows = self._part_rows(tm, tn, tk, accs, len(self.units))
        for s in range(accs if rows < tm else 0):
            self.em.split(bufs["acc", s], tuple(r * tn * dtypes.itemsize(self.acc_dtype) for r in range(rows, tm, rows)))
        if self.asym:  # one element of zp_r, read with stride 0 as a whole right tile
            mem = self.mx.operand_memory("b")
            if mem != self.vx.memory:
                raise UnsupportedError(f"{name}: the matrix unit's right operand memory {mem} is not the vector memory {self.vx.memory}")
            self.zero_point = bufs["zp", 0] = self.em.alloc(mem, dtypes.itemsize(self.right.dtype), f"{name}/zp_r")
            zp = self.zero_point.region(self.right.dtype, (1,))
            self.em.emit(self.vx.name, Vector("copy", zp, (self.node.params["right_zero_point"],), "int64", name), writes=(self.zero_point,))
        return bufs

    def step(self, bufs, index, a_slot, fresh, keep, ts, batch_index, box, first, last):
        """(load, compute, store) of one K block of an output tile: the right tile goes in the
        step's slot, the left in a_slot, loaded when fresh: its tm x tk tile, or with keep the
        row's whole tm x K block, whose columns k0:k0+tk the step multiplies; the tile's own
        buffers (its accumulator, ...) are those of slot ts."""
        ctx, em, node, p = self.ctx, self.em, self.node, self.node.params
        m0, n0, k0, tm, tn, tk = box
        ab = index % ctx.slots
        cut = self._cut(keep)
        a, b, acc = bufs["a", a_slot if keep and not cut else ab], bufs["b", ab], bufs["acc", ts]
        kept_buf = bufs["kept", a_slot] if cut else a
        kept = kept_buf.region(self.left.dtype, (tm, self.K)) if keep else None
        a_r = sub_region(kept, (0, k0), (tm, tk)) if keep and not cut else a.region(self.left.dtype, (tm, tk))
        b_r = b.region(self.right.dtype, (tk, tn))
        acc_r = acc.region(self.acc_dtype, (tm, tn))
        left = self._matrix(self.left, batch_index, p.get("left_trans", False))
        right = self._matrix(self.right, batch_index, p.get("right_trans", False))
        out = self._matrix(self.out, batch_index, False)
        a_in, b_in = (bufs["as", ab], bufs["bs", ab]) if self.shifted else (a, b)
        a_m = a_in.region(self.operand_dtypes[0], (tm, tk)) if self.shifted else a_r
        b_m = b_in.region(self.operand_dtypes[1], (tk, tn))
        parts = self._acc_parts(acc, tm, tn)

        def load():
            copy(em, sub_region(right, (k0, n0), (tk, tn)), ctx.home[self.right.name], b_r, b, node.name)
            if fresh:
                src, dst = (sub_region(left, (m0, 0), (tm, self.K)), kept) if keep else (sub_region(left, (m0, k0), (tm, tk)), a_r)
                copy(em, src, ctx.home[self.left.name], dst, kept_buf, node.name)
            if cut:
                copy(em, sub_region(kept, (0, k0), (tm, tk)), kept_buf, a_r, a, node.name)
            if self.shifted:
                self._shift(bufs, ab, a_r, b_r, k0, n0, tm, tn, tk)
            if first and self.bias_in_table:
                bias_table.load(em, lambda key: bufs[key, ts], *self.bias, self.N, n0, tn, self.acc_dtype, self.mx.core, node.name)
            elif first and self.bias is not None:
                src_buf, dtype = self.bias
                dst = bufs["bias", ts]
                src = sub_region(src_buf.region(dtype, (1, self.N)), (0, n0), (1, tn))
                copy(em, src, src_buf, dst.region(dtype, (1, tn)), dst, node.name)

        def compute():
            table = bufs["bias", ts] if first and self.bias_in_table else None
            for r0, rows, held in parts if first or last else [(0, tm, acc.parts or (acc,))]:
                a_p, acc_p = sub_region(a_m, (r0, 0), (rows, tk)), sub_region(acc_r, (r0, 0), (rows, tn))
                row = table and bias_table.row(table, acc_p.shape, self.acc_dtype)
                reads = (a_in, b_in) + (held if not first else ()) + ((table,) if table else ())
                em.emit(self.mx.name, Matmul(a_p, b_m, acc_p, not first, node.name, bias=row), reads=reads, writes=held)
            if self.asym:  # the second partial product: left times a matrix of zp_r
                zp, acc_zp = self.zero_point, bufs["acc_zp", ts]
                zp_r = Region(zp.mem, zp.addr, self.right.dtype, (tk, tn), (0, 0))
                acc_zp_r = acc_zp.region(self.acc_dtype, (tm, tn))
                em.emit(self.mx.name, Matmul(a_r, zp_r, acc_zp_r, not first, node.name),
                        reads=(a, zp) + ((acc_zp,) if not first else ()), writes=(acc_zp,))
            if last and self.flight is None:
                for key in ("acc", "acc_zp") if self.asym else ("acc",):
                    if self.acc_key != "acc":
                        here, there = bufs[key, ts], bufs["accv" + key[3:], ts]
                        staged = [bufs[f"{key}.stage{k}", ts] for k in range(len(stages(ctx.chip, here.mem, there.mem)))]
                        copy(em, here.region(self.acc_dtype, (tm, tn)), here, there.region(self.acc_dtype, (tm, tn)), there, node.name,
                             stages=staged)
                self._epilogue(bufs, ts, tm, tn)

        def store():
            if last:
                result = bufs[self.out_key, ts]
                dst = sub_region(out, (m0, n0), (tm, tn))
                if self.flight is not None:
                    for r0, rows, held in parts:
                        self.flight.emit(em, sub_region(acc_r, (r0, 0), (rows, tn)), held, sub_region(dst, (r0, 0), (rows, tn)),
                                         ctx.home[self.out.name], node.name)
                else:
                    copy(em, result.region(self.out.dtype, (tm, tn)), result, dst, ctx.home[self.out.name], node.name)

        return load, compute, store

    def _part_rows(self, tm, tn, tk, accs, units):
        """The rows of each part one accumulator that FixPipe empties (the epilogue done on the
        way) is filled and drained in; tm: in one. A tile's last product then runs part by part,
        FixPipe draining each part as the cube finishes it and goes on with the next, and the
        next tile's first product too, each part waiting only for its own rows to be drained,
        as Ascend's unitFlag lets the cube and FixPipe do block by block (Ascend C Mmad and
        Fixpipe). Of halvings down to the matrix unit's m rows, the one that loses the fewest
        cycles: the wait for the drain (drain_stall) and the products' extra issues. With two
        accumulators the next tile does not wait for the drain at all."""
        if self.flight is None or accs > 1:
            return tm
        price, m = self.pricer(units), self.mx.matrix.m
        store = sum(op.cycles for op in self._work(units, ((tm,), (tn,)), tk, False, True).store)
        whole = price.matmul(self.mx.name, tm, tk, tn, self.operand_dtypes[0]).cycles

        def lost(rows):
            product = sum(price.matmul(self.mx.name, min(rows, tm - r), tk, tn, self.operand_dtypes[0]).cycles for r in range(0, tm, rows))
            return drain_stall(product, store, -(-tm // rows)) + 2 * (product - whole)

        return min(halvings(tm, m), key=lambda rows: (lost(rows), -rows))

    def _acc_parts(self, acc, tm, tn):
        """(first row, rows, Bufs) of the accumulator's parts that a tile of tm x tn fills, one
        per part where the parts fall on its rows (a whole tile), else one naming them all."""
        row = tn * dtypes.itemsize(self.acc_dtype)
        starts = [0]
        for part in acc.parts[:-1]:
            starts.append(starts[-1] + part.size // row if part.size % row == 0 else tm)
        if len(starts) == 1 or starts[-1] >= tm:
            return [(0, tm, acc.parts or (acc,))]
        return [(r, end - r, (part,)) for r, end, part in zip(starts, starts[1:] + [tm], acc.parts)]

    def _shift(self, bufs, slot, a_r, b_r, k0, n0, tm, tn, tk):
        """as = a - lzp (lzp over K), bs = b - rzp (rzp over N), in 16 bits on the vector unit."""
        p, em, name = self.node.params, self.em, self.node.name
        for key, src, dst_key, start, n, strides in (("lzp", a_r, "as", k0, tk, (0, 1)), ("rzp", b_r, "bs", n0, tn, (0, 1))):
            zero, reads = p[key], ()
            if zero == "vector":
                table = self.node.inputs[p[key + "_input"]]
                length = self.K if key == "lzp" else self.N
                buf = bufs[key, slot]
                copy(em, sub_region(self.ctx.home[table].region("int16", (length,)), (start,), (n,)), self.ctx.home[table],
                     buf.region("int16", (n,)), buf, name)
                zero, reads = Region(buf.mem, buf.addr, "int16", src.shape, strides), (buf,)
            src_buf = bufs["a" if key == "lzp" else "b", slot]
            dst = bufs[dst_key, slot]
            em.emit(self.vx.name, Vector("sub", dst.region("int16", src.shape), (src, zero), "int64", name),
                    reads=(src_buf,) + reads, writes=(dst,))

    def _epilogue(self, bufs, ts, tm, tn):
        acc = bufs[self.acc_key, ts]
        inputs = [(acc.region(self.acc_dtype, (tm, tn)), acc)]
        if self.bias is not None and not self.bias_in_table:
            bias = bufs["bias", ts]
            inputs.append((broadcast_view(bias.region(self.bias[1], (1, tn)), (tm, tn)), bias))
        if self.asym:
            acc_zp = bufs[self.acc_key + "_zp", ts]
            inputs.append((acc_zp.region(self.acc_dtype, (tm, tn)), acc_zp))
        out = bufs[self.out_key, ts]
        temps = [(bufs[("tmp", k), ts].region(d, (tm, tn)), bufs[("tmp", k), ts]) for k, d in enumerate(self.temps)]
        emit_steps(self.em, self.vx.name, self.node.name, self.steps, inputs, (out.region(self.out.dtype, (tm, tn)), out), temps)
