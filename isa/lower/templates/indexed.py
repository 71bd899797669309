"""The indexed template: gathers and scatters as IndexedDma transfers, in which the DMA engine
reads the indices from memory and moves each addressed row (gather, scatter_nd).

The op gives three views of its DDR tensors (OpDef.views): the table, the indices and the rows.
- A gather is one IndexedDma from table to rows when an engine links DDR to DDR. Otherwise the
  rows are gathered into on-chip memory (the first hop of the route from DDR to DDR) and copied
  on along the route, in chunks the memories on the way can hold.
- A scatter first copies the data to the output. Without a reduction it is then one scatter of
  every update row: the engine faults on an index written twice rather than leave the result to
  the order of the writes. Where the update rows stage through on-chip memory, chunks keep every
  row and cut the row's elements first, so each chunk still sees every index (only when not one
  element of every row fits are the rows cut, and a repeat across two chunks then goes unseen).
- With a reduction the update rows are taken one at a time, in order: the output row is gathered
  into the vector unit's memory, combined there with the update row (loaded with others in a
  chunk) and scattered back. The emitter's buffer hazards order each row's gather after the
  previous row's scatter, so repeated indices combine in order.

Chunks are boxes of the rows' iteration space (isa/lower/templates/staging.py), outer dimensions cut
first; every region of a chunk is the sub-box of the op's region that the box covers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ... import dtypes
from ...errors import UnsupportedError
from ...instructions import IndexedDma, Vector
from ...ops import REGISTRY
from ..context import operand_memory
from ..memory.route import copy, route
from ..schedule.tiling import nbytes, sub_region
from .staging import chunks, held_whole, staged_copy, stages, view_region

if TYPE_CHECKING:

    from chips.schema import Chip

    from ...instructions import Region
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group


def lower_indexed(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    opdef = REGISTRY[node.op]
    tensors = [ctx.graph.tensors[t] for t in node.inputs]
    table, index, rows = opdef.views([t.shape for t in tensors], node.params)
    out = node.outputs[0]
    if not opdef.scatter:
        x, idx = node.inputs
        access = Access(ctx, node.name, view_region(ctx, x, table), ctx.home[x], view_region(ctx, idx, index), ctx.home[idx],
                        wrap=node.params.get("wrap", False))
        gather_rows(ctx, access, view_region(ctx, out, rows), ctx.home[out])
        return
    data, idx, upd = node.inputs
    staged_copy(ctx, node.name, ctx.home_region(data), ctx.home[data], ctx.home_region(out), ctx.home[out])
    access = Access(ctx, node.name, view_region(ctx, out, table), ctx.home[out], view_region(ctx, idx, index), ctx.home[idx], wrap=True)
    fn = opdef.combine(node.params)
    if fn is None:
        scatter_rows(ctx, access, view_region(ctx, upd, rows), ctx.home[upd])
    else:
        _combine(ctx, access, fn, view_region(ctx, upd, rows), ctx.home[upd])


class Access:
    """An indexed table in DDR: its region and buffer, the index region and buffer, and where a
    box of the rows' iteration space P + (n,) + Q reads or writes them."""

    def __init__(self, ctx: Lowering, op: str, table: Region, table_buf: Buf, index: Region, index_buf: Buf, wrap: bool = False) -> None:
        self.ctx, self.op, self.wrap = ctx, op, wrap
        self.table, self.table_buf, self.index, self.index_buf = table, table_buf, index, index_buf
        self.p, self.k = len(index.shape) - 2, index.shape[-1]

    def part(self, starts: tuple[int, ...], extents: tuple[int, ...]) -> tuple[Region, Region]:
        """(table, index) regions a box of the rows reads or writes."""
        p, k = self.p, self.k
        indexed = self.table.shape[p:p + k]
        table = sub_region(self.table, starts[:p] + (0,) * k + starts[p + 1:], extents[:p] + indexed + extents[p + 1:])
        return table, sub_region(self.index, starts[:p + 1] + (0,), extents[:p + 1] + (k,))

    def gather(self, starts: tuple[int, ...], extents: tuple[int, ...], dst: Region, dst_buf: Buf) -> None:
        """Gather the rows of a box into dst (any memory): the first hop from DDR is the
        indexed transfer, into a staging buffer when more hops follow (route.copy)."""
        table, index = self.part(starts, extents)
        copy(self.ctx.em, table, self.table_buf, dst, dst_buf, self.op, index=(index, self.index_buf), wrap=self.wrap)

    def scatter(self, starts: tuple[int, ...], extents: tuple[int, ...], src: Region, src_buf: Buf) -> None:
        """Scatter src (any memory) to the rows of a box: the last hop into DDR is the indexed
        transfer, from a staging buffer when hops come before it."""
        em = self.ctx.em
        table, index = self.part(starts, extents)
        hops = route(em.chip, src.mem, "ddr")
        here, here_buf = (src, src_buf) if len(hops) == 1 else self._stage(hops[-1][1], src, "scatter")
        if here_buf is not src_buf:
            copy(em, src, src_buf, here, here_buf, self.op)
        instr = IndexedDma(table, index, here, True, self.wrap, self.op)
        em.emit(hops[-1][0], instr, reads=(here_buf, self.index_buf), writes=(self.table_buf,))
        if here_buf is not src_buf:
            em.release(here_buf)

    def _stage(self, mem: str, like: Region, what: str) -> tuple[Region, Buf]:
        """A buffer in mem for a region like `like`, and that region in it."""
        buf = self.ctx.em.alloc(mem, like.nbytes, f"{self.op}/{what}.{mem}")
        return buf.region(like.dtype, like.shape), buf


# ---- what a chunk holds on chip ----------------------------------------------------------

def _gathered_through(chip: Chip, dst: str) -> list[str]:
    """The on-chip memories an `Access.gather` into dst holds a chunk in."""
    hops = route(chip, "ddr", dst)
    return [] if len(hops) == 1 else [hops[0][2]] + stages(chip, hops[0][2], dst)


def _scattered_through(chip: Chip, src: str) -> list[str]:
    """The on-chip memories an `Access.scatter` from src holds a chunk in."""
    hops = route(chip, src, "ddr")
    return [] if len(hops) == 1 else stages(chip, src, hops[-1][1]) + [hops[-1][1]]


# ---- the transfers -----------------------------------------------------------------------

def gather_rows(ctx: Lowering, access: Access, rows: Region, rows_buf: Buf) -> None:
    needs = held_whole(_gathered_through(ctx.chip, "ddr"), rows.dtype)
    for starts, extents in chunks(ctx, rows.shape, needs, access.op):
        access.gather(starts, extents, sub_region(rows, starts, extents), rows_buf)


def scatter_rows(ctx: Lowering, access: Access, rows: Region, rows_buf: Buf) -> None:
    needs = held_whole(_scattered_through(ctx.chip, "ddr"), rows.dtype)
    for starts, extents in chunks(ctx, rows.shape, needs, access.op, rows_whole=True):
        access.scatter(starts, extents, sub_region(rows, starts, extents), rows_buf)


def _combine(ctx: Lowering, access: Access, fn: str, updates: Region, updates_buf: Buf) -> None:
    """out[index[i]] = fn(out[index[i]], updates[i]) for each row i in order, on the vector unit.
    A chunk holds a box of update rows and one output row in the vector unit's memory."""
    em, dtype = ctx.em, updates.dtype
    engine = ctx.engine("vector")
    per_lane = engine.vector.per_lane if engine.vector is not None else {}
    if dtype not in per_lane:
        raise UnsupportedError(f"op {access.op}: combining {dtype} rows ({fn}) needs the vector unit, which has no {dtype} on chip "
                               f"{ctx.chip.name} (it has {', '.join(per_lane)})")
    mem = operand_memory(engine, "")
    loads, row_stages = stages(ctx.chip, "ddr", mem), _gathered_through(ctx.chip, mem) + _scattered_through(ctx.chip, mem)

    def needs(extents: tuple[int, ...]) -> list[tuple[str, int]]:
        chunk, row = nbytes(dtype, extents), nbytes(dtype, extents[1:])
        return [(mem, chunk), (mem, row)] + [(m, chunk) for m in loads] + [(m, row) for m in row_stages]

    cdt = "float32" if dtypes.is_float(dtype) else "int64"
    for starts, extents in chunks(ctx, updates.shape, needs, access.op):
        chunk = em.alloc(mem, nbytes(dtype, extents), f"{access.op}/updates")
        row_buf = em.alloc(mem, nbytes(dtype, extents[1:]), f"{access.op}/row")
        loaded = chunk.region(dtype, extents)
        copy(em, sub_region(updates, starts, extents), updates_buf, loaded, chunk, access.op)
        one = (1,) + extents[1:]
        row = row_buf.region(dtype, one)
        for r in range(extents[0]):
            at = (starts[0] + r,) + starts[1:]
            access.gather(at, one, row, row_buf)
            update = sub_region(loaded, (r,) + (0,) * (len(extents) - 1), one)
            em.emit(engine.name, Vector(fn, row, (row, update), cdt, access.op), reads=(row_buf, chunk), writes=(row_buf,))
            access.scatter(at, one, row, row_buf)
        em.release(row_buf)
        em.release(chunk)
