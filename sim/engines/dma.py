"""DMA: N-d strided copies between linked memories, gathers and scatters of indexed rows, and
converting copies (a function applied on the way, as an Ascend FixPipe does): what they do to
the bytes. What they cost is isa/timing/price.py's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.errors import IndexRangeError
from isa.instructions import IndexedDma

from . import vector

if TYPE_CHECKING:
    from isa.instructions import Dma
    from sim.memory import Memory


def execute(instr: Dma, memories: dict[str, Memory]) -> None:
    if isinstance(instr, IndexedDma):
        return _indexed(instr, memories)
    if instr.fn:  # a converting DMA: the vector function of that name, applied on the way
        cdt = dtypes.np_dtype(instr.cdt)
        source = memories[instr.src.mem].view(instr.src).astype(cdt)
        return vector.store(instr.fn, [source] + [cdt.type(a) for a in instr.args], instr.dst, memories)
    memories[instr.dst.mem].view(instr.dst)[...] = memories[instr.src.mem].view(instr.src)


def _indexed(instr: IndexedDma, memories: dict[str, Memory]) -> None:
    table = memories[instr.table.mem].view(instr.table)
    rows = memories[instr.rows.mem].view(instr.rows)
    given = memories[instr.index.mem].view(instr.index).astype(np.int64)
    p, k = given.ndim - 2, given.shape[-1]
    dims = np.array(instr.table.shape[p:p + k], np.int64)
    index = np.where(given < 0, given + dims, given) if instr.wrap else given
    bad = (index < 0) | (index >= dims)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        region = instr.index
        addr = region.addr + sum(i * s for i, s in zip(at, region.strides)) * dtypes.itemsize(region.dtype)
        raise IndexRangeError(
            f"op {instr.op}: index {int(given[at])} at position {at[:-1]} is out of range for dimension "
            f"{p + at[-1]} of size {int(dims[at[-1]])} (allowed {-int(dims[at[-1]]) if instr.wrap else 0}..{int(dims[at[-1]]) - 1})",
            (region.mem, addr))
    prefix = np.indices(given.shape[:-1])[:p]
    where = tuple(prefix) + tuple(index[..., j] for j in range(k))
    if not instr.scatter:
        rows[...] = table[where]
        return
    flat = np.ravel_multi_index(where, instr.table.shape[:p + k]).reshape(-1)
    unique, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        twice = np.unravel_index(unique[counts > 1][0], instr.table.shape[:p + k])
        raise IndexRangeError(f"op {instr.op}: the scatter writes position {tuple(int(v) for v in twice)} "
                              "more than once; the order of its writes is undefined")
    table[where] = rows
