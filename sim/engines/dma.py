"""DMA: N-d strided copies between linked memories, and gathers and scatters of indexed rows.

cycles = latency + ceil(bytes_moved / bandwidth) (the arithmetic is isa/costs.py's, which the
lowering's estimate shares), where
- latency is the engine's plus each endpoint memory's;
- bytes_moved is the larger of the two sides, each side rounding every contiguous run of
  bytes up to its memory's burst (so strided and tiny transfers cost what they cost); a
  zero-stride dimension re-reads the same bytes (a broadcast), which the engine fetches once;
  a gather or scatter moves each indexed row as its own runs and reads its indices first; a
  converting DMA's narrower side carries its width's share of them (`shares`);
- bandwidth is the least of the engine's (which counts the bytes it writes) and each endpoint
  memory's, a memory that is both source and destination counting twice. Overlapping
  transfers share memory bandwidth (sim/bandwidth.py); this is the uncontended figure.

An engine runs its transfers in order; one that keeps several in flight (`in_flight` in the
chip YAML, as a DMA queue with outstanding requests does) starts a transfer's latency while
the ones before it still move their bytes, which still move one transfer after another
(sim/machine.py, _Flight).
"""

import math

import numpy as np

from isa import dtypes
from isa.costs import ports, side_bytes, side_shares, transfer_bandwidth, transfer_bytes, transfer_latency
from isa.errors import IndexRangeError
from isa.instructions import IndexedDma, Region

from . import vector


def bytes_moved(instr, chip):
    m = chip.memories
    if not isinstance(instr, IndexedDma):
        return transfer_bytes(instr.src, instr.dst, m)
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
    return transfer_latency(engine, chip.memories, _endpoints(instr))


def shares(instr):
    """The share of bytes_moved each endpoint (_endpoints) carries: a converting DMA's narrower
    side fewer (isa/costs.py, side_shares); a gather's or scatter's indices are read whole."""
    return (1.0, 1.0, 1.0) if isinstance(instr, IndexedDma) else side_shares(instr.src, instr.dst)


def port_use(instr, endpoint_shares):
    """memory -> how many of the transfer's endpoints are in it, each counting its share
    (`shares`)."""
    return ports(_endpoints(instr), endpoint_shares)


def bandwidth(instr, chip, engine):
    """Uncontended bytes per cycle."""
    return transfer_bandwidth(engine, chip.memories, _endpoints(instr), shares(instr))


def cycles(instr, chip, engine):
    return latency(instr, chip, engine) + math.ceil(bytes_moved(instr, chip) / bandwidth(instr, chip, engine))


def execute(instr, memories):
    if isinstance(instr, IndexedDma):
        return _indexed(instr, memories)
    if instr.fn:  # a converting DMA: the vector function of that name, applied on the way
        cdt = dtypes.np_dtype(instr.cdt)
        source = memories[instr.src.mem].view(instr.src).astype(cdt)
        return vector.store(instr.fn, [source] + [cdt.type(a) for a in instr.args], instr.dst, memories)
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
