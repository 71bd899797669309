"""DMA: N-d strided copies between linked memories, and gathers and scatters of indexed rows.

cycles = latency + ceil(bytes_moved / bandwidth), where
- latency is the engine's plus each endpoint memory's;
- bytes_moved is the larger of the two sides, each side rounding every contiguous run of
  bytes up to its memory's burst (so strided and tiny transfers cost what they cost); a
  zero-stride dimension re-reads the same bytes (a broadcast), which the engine fetches once;
  a gather or scatter moves each indexed row as its own runs and reads its indices first;
- bandwidth is the least of the engine's and each endpoint memory's, a memory that is both
  source and destination counting twice. Overlapping transfers share memory bandwidth
  (sim/bandwidth.py); this is the uncontended figure.
"""

import math

import numpy as np

from isa import dtypes
from isa.errors import IndexRangeError
from isa.instructions import IndexedDma, Region


def runs(region):
    """(number of contiguous runs, bytes per run) of the distinct elements a region touches
    (its zero-stride dimensions left out)."""
    dims = [(n, s) for n, s in zip(region.shape, region.strides) if s != 0 and n != 1]
    size = 1
    for n, _ in dims:
        size *= n
    run = 1
    for n, stride in reversed(dims):
        if stride != run:
            break
        run *= n
    return size // run, run * dtypes.itemsize(region.dtype)


def side_bytes(region, burst):
    count, run = runs(region)
    return count * (-(-run // burst) * burst)


def bytes_moved(instr, chip):
    m = chip.memories
    if not isinstance(instr, IndexedDma):
        return max(side_bytes(instr.src, m[instr.src.mem].burst), side_bytes(instr.dst, m[instr.dst.mem].burst))
    t, k = instr.table, instr.index.shape[-1]
    p = len(instr.index.shape) - 2
    row = Region(t.mem, t.addr, t.dtype, t.shape[p + k:], t.strides[p + k:])  # one indexed row in the table
    count = instr.rows.size // max(row.size, 1)
    table_side = count * side_bytes(row, m[t.mem].burst)
    return max(side_bytes(instr.rows, m[instr.rows.mem].burst), table_side) + side_bytes(instr.index, m[instr.index.mem].burst)


def _endpoints(instr):
    """The memories a transfer touches: a gather or scatter reads its indices first."""
    return (instr.src.mem, instr.dst.mem) + ((instr.index.mem,) if isinstance(instr, IndexedDma) else ())


def latency(instr, chip, engine):
    return engine.latency + sum(chip.memories[mem].latency for mem in _endpoints(instr))


def port_use(instr):
    """memory -> how many of the transfer's endpoints are in it."""
    use = {}
    for mem in _endpoints(instr):
        use[mem] = use.get(mem, 0) + 1
    return use


def bandwidth(instr, chip, engine):
    """Uncontended bytes per cycle."""
    return min([engine.bandwidth] + [chip.memories[m].bandwidth / n for m, n in port_use(instr).items()])


def cycles(instr, chip, engine):
    return latency(instr, chip, engine) + math.ceil(bytes_moved(instr, chip) / bandwidth(instr, chip, engine))


def execute(instr, memories):
    if isinstance(instr, IndexedDma):
        return _indexed(instr, memories)
    memories[instr.dst.mem].view(instr.dst)[...] = memories[instr.src.mem].view(instr.src)


def _indexed(instr, memories):
    table = memories[instr.table.mem].view(instr.table)
    rows = memories[instr.rows.mem].view(instr.rows)
    given = memories[instr.index.mem].view(instr.index).astype(np.int64)
    p, k = given.ndim - 2, given.shape[-1]
    dims = np.array(instr.table.shape[p:p + k], np.int64)
    index = np.where(given < 0, given + dims, given) if instr.wrap else given
    bad = (index < 0) | (index >= dims)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise IndexRangeError(
            f"op {instr.op}: index {int(given[at])} at position {at[:-1]} is out of range for dimension "
            f"{p + at[-1]} of size {int(dims[at[-1]])} (allowed {-int(dims[at[-1]]) if instr.wrap else 0}..{int(dims[at[-1]]) - 1})"
        )
    prefix = np.indices(given.shape[:-1])[:p]
    where = tuple(prefix) + tuple(index[..., j] for j in range(k))
    if not instr.scatter:
        rows[...] = table[where]
        return
    flat = np.ravel_multi_index(where, instr.table.shape[:p + k]).reshape(-1)
    unique, counts = np.unique(flat, return_counts=True)
    if (counts > 1).any():
        twice = np.unravel_index(unique[counts > 1][0], instr.table.shape[:p + k])
        raise IndexRangeError(f"op {instr.op}: the scatter writes position {tuple(int(v) for v in twice)} more than once; the order of its writes is undefined")
    table[where] = rows
