"""The attention template: scaled dot-product attention (isa/ops/attention.py) as flash-attention
kernels run it (Dao et al., FlashAttention-2; Ascend's FlashAttentionScore; TPU-MLIR's FAttention):
the scores never leave the chip.

A query tile (tm rows of one KV head's group: one query head's positions, or several whole heads
when a head has fewer rows than a tile) is loaded once into the matrix unit's left operand memory
and stays while the keys and values stream past in blocks of tn. For each block:

    S = Q @ K^T                  matrix unit, float32 accumulator
    S = scale x S (+ mask)       vector unit (the mask tile loaded beside the block)
    m' = max(m, rowmax(S))       online softmax: the running row maximum,
    S = exp(S - m')              the block's probabilities against it,
    l = l x exp(m - m') + rowsum(S)          the running row sum, and the output rescaled:
    O = O x exp(m - m') + S @ V  (where the accumulator is the vector memory, the product
                                  accumulates into O itself; elsewhere it is added by the vector unit)

and after the last block O / l is stored. A key block is tn of the keys' rows where they lie
token-major (a key cache kept as Hugging Face and CANN's ReshapeAndCache keep it), which the
product reads transposed (a Region of strides (1, D): BM1684X's MM2_NT, an Ascend cube's
transposing load into L0B, priced as the plain product, isa/lower/templates/matmul.py), or a
(D, tn) block of keys stored transposed (key_transposed). Where the matrix unit's accumulator or operand
memories are not the vector unit's (an Ascend cube core and its vector core), S and P move
between them on chip, through the shared L2 where the direct route would pass through DDR. With
a constant mask, a block whose mask is all zero is not masked, and one whose mask hides every
position (of rows that see some key elsewhere) is skipped: exp underflows to exactly 0 there, as
a causal kernel skips the blocks above the diagonal.

A block is two stages, its scores (S, the softmax steps, P on its way to the matrix unit) and its
accumulation (P @ V into O). With two slots, where the matrix and vector units are two engines,
they are software-pipelined as flash-attention kernels pipeline the cube and the vector unit
(FlashAttention-2's and Ascend's FlashAttentionScore "cube computes the next S while the vector
unit does this softmax"): block i + 1's scores are emitted before block i's accumulation, block
i + 2's query, key and mask tiles once block i's scores have read their slot and its values once
block i's accumulation has, so the matrix unit computes S of the next block while the vector unit
works on this one's, rather than each unit waiting for the other's whole chain of moves. What
both stages hold is double-buffered: the running sum and each block's rescale factor, O per query
tile. On one engine for both (a Sophgo TIU) there is nothing to overlap between the stages: a
block runs whole, the next block's loads emitted before it. The query tiles are dealt among
the units (each core's matrix engine with its vector engine) in runs of equal work: a causal
mask leaves the last positions' tiles several times the first ones' blocks.

A decode step (flash-decoding; CANN's IncreFlashAttention; vLLM's PagedAttention): the keys and
values come in segments (the cache read where it lies, or a paged cache's blocks, each tile
gathered through its block table's entry at run time (`_load`), and the new tokens'), blocks
never straddling one's edge; a KV group's every query row is one tile, so the
cache is read once per KV head; the few tiles' long chains of blocks are cut into parts the units
do apart, each leaving its O (not divided by l), m and l in the memory every core reaches, and a
unit's vector engine combines a tile's parts after (key_parts, combine).
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from ... import dtypes
from ...errors import OutOfMemoryError
from ...instructions import Matmul, Region, Vector, dense
from ..context import local_memory, operand_memory
from ..memory.alloc import shortfall
from ..memory.route import copy, route
from ..schedule.tiling import halvings, sub_region
from .cache import paged_read

if TYPE_CHECKING:
    from ...graph import Node, Tensor
    from ..context import Lowering, Unit
    from ..emit import Buf
    from ..schedule.fusion import Group

    Visit = tuple[int, int, str]  # a key block a query tile visits: (first key, keys, kind: "mask" or "none")
    Source = tuple[Region | float, "Buf | None"]  # a vector step's operand and the buffer holding it (a scalar: None)

T = TypeVar("T")

F32 = "float32"
MASKED = -65504.0  # a mask value at or below this (float16's lowest) hides its position: exp(it) is 0 in float32
MAX_ROWS, MAX_KEYS = 128, 128  # the largest query tile and key block tried
DECODE_KEYS = 1024  # the largest key block tried for a tile of a KV group's every row (a decode step): its scores are few
#                    rows, and a longer block spreads a block's fixed costs (its instructions and waits) over more keys
#                    (bm1686's 2048-long float16 cache of 32 heads: 1.33x its DDR floor in blocks of 128, 1.04x in
#                    blocks of 1024, the keys token-major or transposed alike)
ROWS = 8  # row values a unit keeps: the running max (this block's and the last), the running sum (two query tiles'),
#           a block's max and sum, its rescale factor (two blocks')


class QueryTile(NamedTuple):
    """Query rows of one KV head's group: `heads` query heads from `head`, positions `pos` .. `pos` + `rows` - 1."""

    batch: int
    kv: int
    head: int
    heads: int
    pos: int
    rows: int

    @property
    def size(self) -> int:
        return self.heads * self.rows


class Block(NamedTuple):
    """A key block a query tile visits, as a unit's pipeline emits it."""

    t: int  # the query tile's place in the unit's run
    tile: QueryTile
    j: int  # the block's place among the tile's
    blocks: int  # the blocks the tile visits
    c0: int  # its first key
    tc: int  # its keys
    kind: str  # "mask" (add the mask tile) or "none"
    slot: int  # the buffers' slot it uses


def lower_attention(ctx: Lowering, group: Group) -> None:
    plan = _Plan(ctx, group.nodes[0])
    tm, tn, slots = plan.tiles()
    items = plan.items(tm)
    plan.visits.update((it, plan._row_blocks(it, tn)) for it in items)
    units = ctx.units("matrix", vector=True)
    plan.parts = plan.key_parts(items, len(units))
    pieces = [(it, p) for it in items for p in range(plan.parts)]
    runs = [(u, r) for u, r in zip(units, deal_work(pieces, [len(plan.piece(*pc)) for pc in pieces], len(units))) if r]
    out = ctx.home[plan.out.name]
    partials = plan.partials(items, tm)
    with ctx.em.disjoint([out, *partials]) if len(runs) > 1 else nullcontext():
        for unit, run in runs:
            plan.emit(unit, run, tm, tn, slots)
    for buf in plan.placed:  # released once every unit is emitted: no unit reuses another's addresses
        ctx.em.release(buf)
    if plan.parts > 1:
        plan.combine(units, items)
    ctx.em.notes.append(f"attention {plan.node.name}: query tiles of {tm} rows, key blocks of {tn}, {slots} slot(s), "
                        f"{plan.skipped} of {plan.blocks} blocks skipped by the mask, on {len(runs)} unit(s)"
                        + (f", each tile's keys in {plan.parts} parts combined" if plan.parts > 1 else ""))


def memories(unit: Unit) -> tuple[str, str, str, str]:
    """The memories of the matrix unit's left and right operands and accumulator, and of the vector unit's."""
    a, b, c = (operand_memory(unit.mx, r) for r in "abc")
    return a, b, c, operand_memory(unit.vx, "")


def mk_dtype(mask: Tensor | None) -> str:
    """The dtype of the mask a masked block adds: a block is masked only where the op has one."""
    assert mask is not None
    return mask.dtype


def deal_work(items: list[T], work: list[int], n: int) -> list[list[T]]:
    """items cut into n runs of consecutive ones whose works (a number per item) are as equal
    as a cut between items makes them: each run ends where the running total comes nearest its
    share of the whole. Consecutive, so that a unit's query tiles share their key heads."""
    total, done = sum(work), 0
    runs: list[list[T]] = []
    run: list[T] = []
    for item, w in zip(items, work):
        if run and len(runs) < n - 1 and abs(done - total * (len(runs) + 1) / n) <= abs(done + w - total * (len(runs) + 1) / n):
            runs.append(run)
            run = []
        run.append(item)
        done += w
    runs.append(run)
    return runs + [[] for _ in range(n - len(runs))]


class _Plan:
    def __init__(self, ctx: Lowering, node: Node):
        self.ctx, self.em, self.node = ctx, ctx.em, node
        g = ctx.graph
        parts = node.params.get("segments", 1)
        self.q = g.tensors[node.inputs[0]]
        self.ks = [g.tensors[t] for t in node.inputs[1:1 + parts]]
        self.vs = [g.tensors[t] for t in node.inputs[1 + parts:1 + 2 * parts]]
        self.mask: Tensor | None = g.tensors[node.inputs[-1]] if len(node.inputs) == 2 + 2 * parts else None
        self.out = g.tensors[node.outputs[0]]
        self.scale, self.key_t = node.params["scale"], node.params["key_transposed"]
        self.B, self.H, self.M, self.D = self.q.shape
        self.Hkv = self.ks[0].shape[1]
        self.group = self.H // self.Hkv
        self.starts = [int(n) for n in np.cumsum([0] + [v.shape[2] for v in self.vs])]  # each segment's first key, then the keys' count
        self.N, self.Dv = self.starts[-1], self.vs[0].shape[3]
        self.mask_from = self.N - (self.mask.shape[-1] if self.mask is not None else 0)  # the first key the mask covers
        self.dtype = self.q.dtype
        known = g.constants.get(self.mask.name) if self.mask is not None else None
        self.mask_values = None if known is None else known.reshape((1,) * (4 - known.ndim) + known.shape)
        # the segments that are blocks of a paged cache, gathered through their block table's entries
        self.paged = {t.name: through for t in self.ks + self.vs if (through := paged_read(ctx, t.name)) is not None}
        self.skipped = self.blocks = 0
        self.visits: dict[QueryTile, list[Visit]] = {}
        self.placed: list[Buf] = []  # every unit's buffers, released once all are emitted
        self.stages: dict[tuple, Buf] = {}  # a unit's staging buffers by what they stage
        self.b: dict[str, list[Buf]] = {}  # a unit's buffers by key, one a slot
        self.parts = 1  # the parts each query tile's keys are cut into (key_parts)
        self.run_parts: list[int] = []  # the part of its tile's keys each query tile of a unit's run is
        self.index: dict[QueryTile, int] = {}  # a query tile's place among the tiles, where the keys are cut
        self.held: list[Buf] = []  # the parts' outputs, row maxima and row sums (partials)
        self.tm = 0

    # ---- tiling -------------------------------------------------------------------------------

    def items(self, tm: int) -> list[QueryTile]:
        """Every QueryTile: a head's positions in tiles of tm, or as many whole heads as fill tm."""
        per = max(1, min(self.group, tm // self.M)) if tm > self.M else 1
        out: list[QueryTile] = []
        for b in range(self.B):
            for kv in range(self.Hkv):
                for h0 in range(kv * self.group, (kv + 1) * self.group, per):
                    hk = min(per, (kv + 1) * self.group - h0)
                    out += [QueryTile(b, kv, h0, hk, p0, min(tm, self.M - p0)) for p0 in range(0, self.M, tm)] if per == 1 else \
                        [QueryTile(b, kv, h0, hk, 0, self.M)]
        return out

    def _needs(self, unit: Unit, tm: int, tn: int, slots: int) -> dict[str, list[int]]:
        """memory -> buffer sizes of one unit's tiling."""
        amem, bmem, cmem, vmem = memories(unit)
        op, item = self.dtype, dtypes.itemsize
        need: dict[str, list[int]] = {}

        def add(mem: str, n: int, count: int) -> None:
            need.setdefault(mem, []).extend([n] * count)

        add(amem, tm * self.D * item(op), 2)  # the query tile, the next one loading
        add(bmem, self.D * tn * item(op), slots)
        add(bmem, tn * self.Dv * item(op), slots)
        add(cmem, tm * tn * 4, slots)
        direct = cmem == vmem
        if not direct:
            add(vmem, tm * tn * 4, slots)
            add(cmem, tm * self.Dv * 4, slots)
            add(vmem, tm * self.Dv * 4, 1)
        if op != F32:  # P cast: one, or where the matrix unit reads it there, one a slot
            add(vmem, tm * tn * item(op), 1 if vmem != amem else slots)
        if vmem != amem:
            add(amem, tm * tn * item(op), slots)
        if self.mask is not None:
            add(vmem, tm * tn * item(self.mask.dtype), slots)
        add(vmem, tm * self.Dv * 4, 2)  # O, the next tile's
        add(vmem, tm * 4, ROWS)
        if self.out.dtype != F32:
            add(vmem, tm * self.Dv * item(self.out.dtype), 1)
        return need

    def _fits(self, unit: Unit, tm: int, tn: int, slots: int) -> bool:
        return all(self.em.allocators[m].fits(s) for m, s in self._needs(unit, tm, tn, slots).items())

    def tiles(self) -> tuple[int, int, int]:
        """(tm, tn, slots): of the query tiles whose buffers fit with some key block beside
        double-buffered blocks (else single ones): where one holds a KV group's every row (a
        decode step) and the keys take more than a block, that one, the keys then shared among
        the units (key_parts); else the largest that still gives every unit a tile, or where none
        does the smallest (a short prompt's few long chains of blocks would leave most cores
        idle), with the largest key block that fits it; tm a multiple of the matrix unit's rows."""
        units = self.ctx.units("matrix", vector=True)
        unit = units[0]
        m = unit.mx.matrix.m if unit.mx.matrix is not None else 1
        rows = min(MAX_ROWS, max(self.M, min(self.group * self.M, MAX_ROWS)))
        for slots in (2, 1):
            fitting = [(tm, tn) for tm in halvings(rows, m)
                       for tn in [next((tn for tn in halvings(min(self.N, MAX_KEYS), 16) if self._fits(unit, tm, tn, slots)), 0)] if tn]
            if fitting:
                if fitting[0][0] == self.group * self.M and fitting[0][1] < self.N:  # a KV group's rows in one tile:
                    tm = fitting[0][0]  # the units share its keys (key_parts), in blocks as long as fit (DECODE_KEYS)
                    return tm, next(tn for tn in halvings(min(self.N, DECODE_KEYS), 16) if self._fits(unit, tm, tn, slots)), slots
                tm, tn = next((f for f in fitting if len(self.items(f[0])) >= len(units)), fitting[-1])
                return tm, tn, slots
        raise OutOfMemoryError(f"{self.node.name}: even a 1-row query tile and a 1-key block need "
                               f"{shortfall(self.em.allocators, self._needs(unit, 1, 1, 1))}")

    def _block_kind(self, item: QueryTile, c0: int, tc: int) -> str:
        """"mask" (add the mask tile), "none" (no mask there) or "skip" (every position hidden)."""
        if self.mask is None or c0 < self.mask_from:
            return "none"
        if self.mask_values is None:
            return "mask"
        tile = self._mask_values(item)[..., c0 - self.mask_from:c0 - self.mask_from + tc]
        if not tile.any():
            return "none"
        return "skip" if (tile <= MASKED).all() else "mask"

    def _mask_values(self, item: QueryTile) -> np.ndarray:
        mv: np.ndarray | None = self.mask_values
        assert mv is not None  # asked of a constant mask alone
        heads = slice(item.head, item.head + item.heads) if mv.shape[1] > 1 else slice(0, 1)
        return mv[item.batch if mv.shape[0] > 1 else 0, heads, item.pos:item.pos + item.rows, :]

    def _row_blocks(self, item: QueryTile, tn: int) -> list[Visit]:
        """(first key, keys, kind) of the blocks a query tile visits, each within one segment and
        on one side of the mask's first key; blocks hidden by the mask are left out unless a row
        would then see nothing."""
        edges = sorted({*self.starts, self.mask_from})
        blocks = [(c0, min(tn, hi - c0)) for lo, hi in itertools.pairwise(edges) for c0 in range(lo, hi, tn)]
        kinds = [self._block_kind(item, c0, tc) for c0, tc in blocks]
        self.blocks += len(blocks)
        if "skip" in kinds and self.mask_from == 0 and (self._mask_values(item) <= MASKED).all(axis=-1).any():
            kinds = ["mask" if k == "skip" else k for k in kinds]
        self.skipped += kinds.count("skip")
        return [(c0, tc, k) for (c0, tc), k in zip(blocks, kinds) if k != "skip"]

    def key_parts(self, items: list[QueryTile], units: int) -> int:
        """Into how many parts each query tile's key blocks are cut, each part a piece of work a
        unit does alone and the parts' outputs combined after (flash-decoding; CANN's
        IncreFlashAttention splits a decode step's keys over the cores): where the tiles hold
        their KV groups' every row (a decode step: a few tiles of long chains of blocks), the
        count whose pieces dealt to the units give the busiest the fewest blocks, a part's
        partial output and its combine counted as a block; else 1."""
        if len(items) != self.B * self.Hkv or units == 1:
            return 1
        fewest = min(len(self.visits[it]) for it in items)

        def busiest(parts: int) -> int:
            work = [len(self.piece(it, p, parts)) + (parts > 1) for it in items for p in range(parts)]
            return max(sum(work[i] for i in run) for run in deal_work(list(range(len(work))), work, units))

        return min(range(1, min(fewest, units) + 1), key=lambda parts: (busiest(parts), parts))

    def piece(self, it: QueryTile, part: int, parts: int | None = None) -> list[Visit]:
        """The key blocks of part `part` of a query tile's `parts` (default: the plan's) equal runs."""
        blocks, parts = self.visits[it], parts or self.parts
        return blocks[len(blocks) * part // parts:len(blocks) * (part + 1) // parts]

    def partials(self, items: list[QueryTile], tm: int) -> list[Buf]:
        """Where the parts of a tile's keys leave their output (float32, not yet divided by the
        row sum), row maxima and row sums for the combine: in the on-chip memory every core
        reaches where it holds them, else in DDR. None when the keys are not cut."""
        if self.parts == 1:
            return []
        count = len(items) * self.parts
        shared = local_memory(self.ctx.chip)
        sizes = (count * tm * self.Dv * 4, count * tm * 4, count * tm * 4)
        mem = shared if shared and self.em.allocators[shared].fits(list(sizes)) else "ddr"
        self.index = {it: k for k, it in enumerate(items)}
        self.held = [self.em.alloc(mem, n, f"{self.node.name}/{what}") for n, what in
                     zip(sizes, ("partial_o", "partial_max", "partial_sum"))]
        self.tm = tm
        return self.held

    # ---- emission -----------------------------------------------------------------------------

    def emit(self, unit: Unit, run: list[tuple[QueryTile, int]], tm: int, tn: int, slots: int) -> None:
        """Emit a unit's query tiles (each a part of its keys): its buffers placed (_place), then
        their blocks in an order that overlaps them as the unit's engines allow (_in_turn, _overlapped)."""
        self.stages = {}
        self.unit, self.b = unit, self._place(unit, tm, tn, slots)
        self.run_parts = [p for _, p in run]
        steps: list[Block] = []
        for t, (it, p) in enumerate(run):
            blocks = self.piece(it, p)
            for j, (c0, tc, kind) in enumerate(blocks):
                steps.append(Block(t, it, j, len(blocks), c0, tc, kind, len(steps) % slots))
        if slots == 1 or unit.mx.name == unit.vx.name:
            self._in_turn(steps, slots - 1)
        else:
            self._overlapped(steps)

    def _place(self, unit: Unit, tm: int, tn: int, slots: int) -> dict[str, list[Buf]]:
        """key -> the unit's buffers of that key (one per slot, or as many as the key rotates);
        sets `direct`: the scores accumulate where the vector unit reads them."""
        em, name = self.em, self.node.name
        amem, bmem, cmem, vmem = memories(unit)
        op, item = self.dtype, dtypes.itemsize

        def alloc(mem: str, n: int, what: str, count: int) -> list[Buf]:
            made = [em.alloc(mem, n, f"{name}/{what}.{s}") for s in range(count)]
            self.placed.extend(made)
            return made

        b = {
            "q": alloc(amem, tm * self.D * item(op), "q", 2),
            "k": alloc(bmem, self.D * tn * item(op), "k", slots),
            "v": alloc(bmem, tn * self.Dv * item(op), "v", slots),
            "s_acc": alloc(cmem, tm * tn * 4, "scores", slots),
            "o": alloc(vmem, tm * self.Dv * 4, "o", 2),
            "rows": alloc(vmem, tm * 4, "row", ROWS),
        }
        self.direct = cmem == vmem
        if not self.direct:
            b["s"] = alloc(vmem, tm * tn * 4, "scores_v", slots)
            b["pv_acc"] = alloc(cmem, tm * self.Dv * 4, "pv", slots)
            b["pv"] = alloc(vmem, tm * self.Dv * 4, "pv_v", 1)
        else:
            b["s"] = b["s_acc"]
        if op != F32:
            b["p"] = alloc(vmem, tm * tn * item(op), "p", 1 if vmem != amem else slots)
        if vmem != amem:
            b["p_a"] = alloc(amem, tm * tn * item(op), "p_a", slots)
        if self.mask is not None:
            b["mask"] = alloc(vmem, tm * tn * item(self.mask.dtype), "mask", slots)
        if self.out.dtype != F32:
            b["out"] = alloc(vmem, tm * self.Dv * item(self.out.dtype), "out", 1)
        return b

    def _in_turn(self, steps: list[Block], ahead: int) -> None:
        """With one slot, or one engine for both stages (a Sophgo TIU: nothing to overlap between
        them): each block whole, the next block's loads (ahead 1: with two slots) before it."""
        for step in steps[:ahead]:
            self._load_scores(step)
            self._load_value(step)
        for i, step in enumerate(steps):
            if i + ahead < len(steps):
                self._load_scores(steps[i + ahead])
                self._load_value(steps[i + ahead])
            self._scores(step)
            self._accumulate(step)

    def _overlapped(self, steps: list[Block]) -> None:
        """Two slots: block i + 1's scores before block i's accumulation; block i + 2's query,
        key and mask tiles once block i's scores have read their slot, its values once block i's
        accumulation has."""
        for i, step in enumerate(steps[:2]):
            self._load_scores(step)
            self._load_value(step)
            if i == 0:
                self._scores(step)
        for i, step in enumerate(steps):
            if i + 2 < len(steps):
                self._load_scores(steps[i + 2])
            if i + 1 < len(steps):
                self._scores(steps[i + 1])
            self._accumulate(step)
            if i + 2 < len(steps):
                self._load_value(steps[i + 2])

    def _copy(self, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, key: str, slot: int = 0,
              index: tuple[Region, Buf] | None = None) -> None:
        """src to dst along the chip's DMA links, through the on-chip shared memory (an L2) where
        the direct route would pass through DDR, staging in buffers of this unit's own for each
        (key, slot): units that staged at shared addresses would wait for one another. With
        `index`, src is a table whose rows the first hop gathers by it (route.copy)."""
        chip = self.ctx.chip
        shared = local_memory(chip)
        via_ddr = any(to == "ddr" for _, _, to in route(chip, src.mem, dst.mem)[:-1])
        if via_ddr and shared and src.mem != shared and dst.mem != shared:
            mid_buf = self._stage((key, slot, "mid"), shared, dst.nbytes)
            mid = dense(shared, mid_buf.addr, dst.dtype, dst.shape)
            self._copy_staged(src, src_buf, mid, mid_buf, (key, slot, 0), index)
            self._copy_staged(mid, mid_buf, dst, dst_buf, (key, slot, 1))
            return
        self._copy_staged(src, src_buf, dst, dst_buf, (key, slot, 0), index)

    def _copy_staged(self, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, key: tuple,
                     index: tuple[Region, Buf] | None = None) -> None:
        hops = route(self.ctx.chip, src.mem, dst.mem)
        stages = [self._stage((*key, k), to, dst.nbytes) for k, (_, _, to) in enumerate(hops[:-1])]
        copy(self.em, src, src_buf, dst, dst_buf, self.node.name, stages=stages or None, index=index)

    def _stage(self, key: tuple, mem: str, nbytes: int) -> Buf:
        """The unit's staging buffer for `key` in mem, placed at its first use (a tile's largest)."""
        buf = self.stages.get(key)
        if buf is None or buf.size < nbytes:
            buf = self.em.alloc(mem, nbytes, f"{self.node.name}/stage.{mem}")
            self.stages[key] = buf
            self.placed.append(buf)
        return buf

    def _q_region(self, it: QueryTile) -> Region:
        b, _, h0, hk, p0, pr = it
        return sub_region(self.ctx.home_region(self.q.name), (b, h0, p0, 0), (1, hk, pr, self.D))

    def _load_scores(self, blk: Block) -> None:
        """What a block's scores read: its key tile (and mask tile), and with the tile's first block its query tile."""
        t, it, j, _, c0, tc, kind, slot = blk
        bb, kv, h0, hk, p0, pr = it
        b, home = self.b, self.ctx.home
        if j == 0:
            q = b["q"][t % 2]
            self._copy(self._q_region(it), home[self.q.name], dense(q.mem, q.addr, self.dtype, (1, hk, pr, self.D)), q, "q", t % 2)
        key, _, c0 = self._segment(c0)
        if self.key_t:  # stored transposed: a (D, tc) tile; else token-major, tc rows the product reads transposed
            self._load(key, (bb, kv, 0, c0), (1, 1, self.D, tc), b["k"][slot], "k", slot)
        else:
            self._load(key, (bb, kv, c0, 0), (1, 1, tc, self.D), b["k"][slot], "k", slot)
        if kind == "mask":
            mask = self.mask
            assert mask is not None  # a block is masked only where the op has a mask
            mk = b["mask"][slot]
            full = self.ctx.home_region(mask.name)
            if len(full.shape) == 2:
                full = Region(full.mem, full.addr, full.dtype, (1, 1) + full.shape, (0, 0) + full.strides)
            at = (bb if full.shape[0] > 1 else 0, h0 if full.shape[1] > 1 else 0, p0, blk.c0 - self.mask_from)
            src = sub_region(full, at, (1, hk, pr, tc))
            src = Region(src.mem, src.addr, src.dtype, src.shape, tuple(0 if n == 1 else s for n, s in zip(full.shape, src.strides)))
            self._copy(src, home[mask.name], dense(mk.mem, mk.addr, mask.dtype, (1, hk, pr, tc)), mk, "mask", slot)

    def _load_value(self, blk: Block) -> None:
        """What a block's accumulation reads: its value tile."""
        it, c0, tc, slot = blk.tile, blk.c0, blk.tc, blk.slot
        _, value, c0 = self._segment(c0)
        self._load(value, (it.batch, it.kv, c0, 0), (1, 1, tc, self.Dv), self.b["v"][slot], "v", slot)

    def _load(self, t: Tensor, starts: tuple[int, ...], extents: tuple[int, ...], dst: Buf, key: str, slot: int) -> None:
        """A box of key or value segment t into dst, dense: copied where it lies, or for a block of
        a paged cache gathered through its block table's entry (isa/lower/templates/cache.py)."""
        to = dense(dst.mem, dst.addr, self.dtype, extents)
        through = self.paged.get(t.name)
        if through is None:
            self._copy(sub_region(self.ctx.home_region(t.name), starts, extents), self.ctx.home[t.name], to, dst, key, slot)
            return
        table, index = through.part(starts, extents)
        self._copy(table, through.table_buf, to, dst, key, slot, (index, through.index_buf))

    def _segment(self, c0: int) -> tuple[Tensor, Tensor, int]:
        """(key, value, the block's first key within them) of the segment holding key c0."""
        s = int(np.searchsorted(self.starts, c0, side="right")) - 1
        return self.ks[s], self.vs[s], c0 - self.starts[s]

    def _row_values(self, t: int, j: int, slot: int) -> tuple[Buf, Buf, Buf, Buf, Buf, Buf]:
        """(m_old, m_new, l, block max, block sum, alpha) of a block: the running max alternates
        by block, the running sum by query tile, the rescale factor by slot (the next block's
        scores are computed before this block's accumulation reads it)."""
        rows = self.b["rows"]
        return rows[j % 2], rows[(j + 1) % 2], rows[2 + t % 2], rows[4], rows[5], rows[6 + slot % 2]

    def _vec(self, fn: str, dst: Region, dst_buf: Buf, *srcs: Source) -> None:
        self.em.emit(self.unit.vx.name, Vector(fn, dst, tuple(r for r, _ in srcs), F32, self.node.name),
                     reads=tuple(buf for _, buf in srcs if buf is not None), writes=(dst_buf,))

    def _scores(self, blk: Block) -> None:
        """A block's first stage: S = Q @ K^T, scaled and masked, the running max and sum and the
        rescale factor updated, P = exp(S - m) in the operands' dtype and on its way to the
        matrix unit's left operand memory."""
        t, it, j, _, _, tc, kind, slot = blk
        em, name, b, vec = self.em, self.node.name, self.b, self._vec
        op, rt, first = self.dtype, it.size, j == 0
        q, k = b["q"][t % 2], b["k"][slot]
        q_r = dense(q.mem, q.addr, op, (rt, self.D))
        k_r = dense(k.mem, k.addr, op, (self.D, tc)) if self.key_t else \
            Region(k.mem, k.addr, op, (self.D, tc), (1, self.D))
        s_acc = b["s_acc"][slot]
        s_acc_r = dense(s_acc.mem, s_acc.addr, F32, (rt, tc))
        em.emit(self.unit.mx.name, Matmul(q_r, k_r, s_acc_r, False, name), reads=(q, k), writes=(s_acc,))
        s = b["s"][slot]
        s_r = dense(s.mem, s.addr, F32, (rt, tc))
        if not self.direct:
            self._copy(s_acc_r, s_acc, s_r, s, "s", slot)
        m_old, m_new, l_buf, bmax, bsum, alpha = self._row_values(t, j, slot)
        col = lambda buf: Region(buf.mem, buf.addr, F32, (rt, tc), (1, 0))  # noqa: E731 - a row value across the block
        row = lambda buf: dense(buf.mem, buf.addr, F32, (rt,))  # noqa: E731
        if kind == "mask":
            mk = b["mask"][slot]
            vec("mul_add", s_r, s, (s_r, s), (self.scale, None), (dense(mk.mem, mk.addr, mk_dtype(self.mask), (rt, tc)), mk))
        else:
            vec("mul", s_r, s, (s_r, s), (self.scale, None))
        if first:
            vec("reduce_max", row(m_new), m_new, (s_r, s))
        else:
            vec("reduce_max", row(bmax), bmax, (s_r, s))
            vec("max", row(m_new), m_new, (row(m_old), m_old), (row(bmax), bmax))
        vec("sub", s_r, s, (s_r, s), (col(m_new), m_new))
        vec("exp", s_r, s, (s_r, s))
        vec("reduce_sum", row(l_buf if first else bsum), l_buf if first else bsum, (s_r, s))
        if not first:
            vec("sub", row(alpha), alpha, (row(m_old), m_old), (row(m_new), m_new))
            vec("exp", row(alpha), alpha, (row(alpha), alpha))
            vec("mul_add", row(l_buf), l_buf, (row(l_buf), l_buf), (row(alpha), alpha), (row(bsum), bsum))
        if op != F32:
            p_buf = b["p"][slot % len(b["p"])]
            em.emit(self.unit.vx.name, Vector("copy", dense(p_buf.mem, p_buf.addr, op, (rt, tc)), (s_r,), F32, name),
                    reads=(s,), writes=(p_buf,))
        if "p_a" in b:
            p, p_buf = self._p(it, tc, slot, False)
            pa = b["p_a"][slot]
            self._copy(p, p_buf, dense(pa.mem, pa.addr, op, (rt, tc)), pa, "p", slot)

    def _p(self, it: QueryTile, tc: int, slot: int, in_a: bool = True) -> tuple[Region, Buf]:
        """(region, buffer) of a block's P: in the scores' slot (float32 operands), in the cast
        buffer, or, in_a, where the matrix unit reads it."""
        b, op, rt = self.b, self.dtype, it.size
        key = "p_a" if in_a and "p_a" in b else "p" if op != F32 else "s"
        buf = b[key][slot % len(b[key])]
        return dense(buf.mem, buf.addr, F32 if key == "s" else op, (rt, tc)), buf

    def _accumulate(self, blk: Block) -> None:
        """A block's second stage: O = O x alpha + P @ V (the product accumulating into O where
        the accumulator is the vector memory), and after the last block O / l stored."""
        t, it, j, count, _, tc, _, slot = blk
        em, name, b, vec = self.em, self.node.name, self.b, self._vec
        mx, rt, first = self.unit.mx.name, it.size, j == 0
        _, _, l_buf, _, _, alpha = self._row_values(t, j, slot)
        o, v = b["o"][t % 2], b["v"][slot]
        o_r = dense(o.mem, o.addr, F32, (rt, self.Dv))
        o_col = Region(alpha.mem, alpha.addr, F32, (rt, self.Dv), (1, 0))
        p, p_buf = self._p(it, tc, slot)
        v_r = dense(v.mem, v.addr, self.dtype, (tc, self.Dv))
        if self.direct:
            if not first:
                vec("mul", o_r, o, (o_r, o), (o_col, alpha))
            em.emit(mx, Matmul(p, v_r, o_r, not first, name), reads=(p_buf, v) + ((o,) if not first else ()), writes=(o,))
        else:
            acc = b["pv_acc"][slot]
            acc_r = dense(acc.mem, acc.addr, F32, (rt, self.Dv))
            em.emit(mx, Matmul(p, v_r, acc_r, False, name), reads=(p_buf, v), writes=(acc,))
            pv = b["pv"][0]
            pv_r = dense(pv.mem, pv.addr, F32, (rt, self.Dv))
            self._copy(acc_r, acc, pv_r, pv, "pv", slot)
            if first:
                vec("copy", o_r, o, (pv_r, pv))
            else:
                vec("mul_add", o_r, o, (o_r, o), (o_col, alpha), (pv_r, pv))
        if j == count - 1 and self.parts > 1:
            self._store_partial(it, self.run_parts[t], o, o_r, self._row_values(t, j, slot)[1], l_buf)
        elif j == count - 1:
            self._store(it, o, o_r, l_buf)

    def _store(self, it: QueryTile, o: Buf, o_r: Region, l_buf: Buf) -> None:
        """O / l in the output's dtype, to the output's home."""
        em, name = self.em, self.node.name
        bb, _, h0, hk, p0, pr = it
        rt = it.size
        res = self.b["out"][0] if "out" in self.b else o
        res_r = dense(res.mem, res.addr, self.out.dtype, (rt, self.Dv))
        l_col = Region(l_buf.mem, l_buf.addr, F32, (rt, self.Dv), (1, 0))
        em.emit(self.unit.vx.name, Vector("div", res_r, (o_r, l_col), F32, name), reads=(o, l_buf), writes=(res,))
        dst = sub_region(self.ctx.home_region(self.out.name), (bb, h0, p0, 0), (1, hk, pr, self.Dv))
        self._copy(dense(res.mem, res.addr, self.out.dtype, (1, hk, pr, self.Dv)), res, dst, self.ctx.home[self.out.name], "out")


    def _partial(self, k: int, it: QueryTile) -> tuple[Region, Region, Region]:
        """The regions of piece k's partial output, row maxima and row sums."""
        o, m, l_buf = self.held
        rt = it.size
        return (o.region(F32, (rt, self.Dv), k * self.tm * self.Dv * 4), m.region(F32, (rt,), k * self.tm * 4),
                l_buf.region(F32, (rt,), k * self.tm * 4))

    def _store_partial(self, it: QueryTile, part: int, o: Buf, o_r: Region, m: Buf, l_buf: Buf) -> None:
        """A part of a tile's keys done: its O (not divided by l), row maxima and row sums out for the combine."""
        rt = it.size
        dst = self._partial(self.index[it] * self.parts + part, it)
        for src, buf, to, held, key in ((o_r, o, dst[0], self.held[0], "partial_o"),
                                        (dense(m.mem, m.addr, F32, (rt,)), m, dst[1], self.held[1], "partial_max"),
                                        (dense(l_buf.mem, l_buf.addr, F32, (rt,)), l_buf, dst[2], self.held[2], "partial_sum")):
            self._copy(src, buf, to, held, key)

    def combine(self, units: list[Unit], items: list[QueryTile]) -> None:
        """Each tile's parts combined on a unit's vector engine (the tiles dealt round the units),
        as flash-decoding's reduction does: with M the largest of the parts' row maxima m_i,
        O = sum_i exp(m_i - M) O_i / sum_i exp(m_i - M) l_i, to the output's home."""
        em, name, rt = self.em, self.node.name, self.tm
        runs = [(u, items[k::len(units)]) for k, u in enumerate(units) if items[k::len(units)]]
        placed: list[Buf] = []
        with em.disjoint([self.ctx.home[self.out.name]]) if len(runs) > 1 else nullcontext():
            for unit, run in runs:
                self.unit, self.stages, vmem = unit, {}, operand_memory(unit.vx, "")
                acc, part = (em.alloc(vmem, rt * self.Dv * 4, f"{name}/combine.{w}") for w in ("o", "part"))
                rows = [em.alloc(vmem, rt * 4, f"{name}/combine.row") for _ in range(6)]
                self.b = {"out": [em.alloc(vmem, rt * self.Dv * dtypes.itemsize(self.out.dtype), f"{name}/combine.out")]} \
                    if self.out.dtype != F32 else {}
                placed += [acc, part, *rows, *self.b.get("out", [])]
                for it in run:
                    self._combine(it, acc, part, rows)
                placed += list(self.stages.values())
        for buf in [*placed, *self.held]:
            em.release(buf)

    def _combine(self, it: QueryTile, acc: Buf, part: Buf, rows: list[Buf]) -> None:
        """One tile's parts combined into acc, divided and stored."""
        vec, r, rt = self._vec, it.size, it.size
        big, mi, lsum, li, a, b = rows
        row = lambda buf: dense(buf.mem, buf.addr, F32, (rt,))  # noqa: E731
        col = lambda buf: Region(buf.mem, buf.addr, F32, (rt, self.Dv), (1, 0))  # noqa: E731 - a row value across a row of O
        acc_r, part_r = (dense(x.mem, x.addr, F32, (r, self.Dv)) for x in (acc, part))
        for p in range(self.parts):
            o_src, m_src, l_src = self._partial(self.index[it] * self.parts + p, it)
            first = p == 0
            self._copy(o_src, self.held[0], acc_r if first else part_r, acc if first else part, "combine_o")
            self._copy(m_src, self.held[1], row(big if first else mi), big if first else mi, "combine_max")
            self._copy(l_src, self.held[2], row(lsum if first else li), lsum if first else li, "combine_sum")
            if first:
                continue
            vec("max", row(b), b, (row(big), big), (row(mi), mi))  # the new maximum, in b for now
            vec("sub", row(a), a, (row(big), big), (row(b), b))
            vec("sub", row(mi), mi, (row(mi), mi), (row(b), b))
            vec("copy", row(big), big, (row(b), b))
            vec("exp", row(a), a, (row(a), a))  # exp(M - M'): the running sums' factor
            vec("exp", row(b), b, (row(mi), mi))  # exp(m_i - M'): the part's
            vec("mul", acc_r, acc, (acc_r, acc), (col(a), a))
            vec("mul_add", acc_r, acc, (part_r, part), (col(b), b), (acc_r, acc))
            vec("mul", row(li), li, (row(li), li), (row(b), b))
            vec("mul_add", row(lsum), lsum, (row(lsum), lsum), (row(a), a), (row(li), li))
        self._store(it, acc, acc_r, lsum)
