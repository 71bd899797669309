"""What an instruction costs on its engine, worked out once per distinct instruction: a `Step`.

The arithmetic is isa/costs.py's; this module applies it to instructions. The machine
(sim/machine.py) prices every instruction of a program with `price`, and the lowering's
estimate (isa/lower/schedule/estimate.py) prices the instructions of a candidate tiling with it too, so
both spend the same cycles on the same instruction.

- DMA: latency + ceil(bytes_moved / bandwidth), where latency is the engine's plus each
  endpoint memory's; bytes_moved is the larger of the two sides, each rounding every contiguous
  run up to its memory's burst (a zero-stride dimension re-reads the same bytes, fetched once);
  a gather or scatter moves each indexed row as its own runs and reads its indices first; a
  converting DMA's narrower side carries its width's share of the bytes. The latency is spent
  first; the bytes then move through the shared-bandwidth arbiter (isa/timing/bandwidth.py) at
  most at the engine's rate.
- vector: issue_latency + ceil(elements / (lanes * per_lane[dtype])) * op_cycles[fn], dtype the
  widest operand's (the destination's on a tie), elements a reduction's source's.
- matrix: issue_latency + ceil(M/m) * ceil(N/n) * (ceil(K/k) * block_cycles[dtype] + fill_drain),
  the max of the two terms where the unit hides the drain (isa/costs.py), dtype the left
  operand's; a convolution's product at conv_block_cycles[dtype] where the chip gives it. An
  R x C output-stationary systolic array (m=R, n=C, k=1, block_cycles=1, fill_drain=R+C-2) gives
  SCALE-Sim's published count folds * (K + R + C - 2) - 1 but for its -1.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from .. import costs, dtypes
from ..instructions import REDUCTIONS, TABLE_OPERANDS, Dma, IndexedDma, Instr, Matmul, Region, Vector

if TYPE_CHECKING:
    from chips.schema import Chip, Engine


class Step(NamedTuple):
    """An instruction as the engine loop spends it (isa/timing/core.py)."""

    kind: str  # "dma", "vector", "matrix" or "scalar"
    cycles: float  # a compute instruction's cycles; a transfer's latency, before its bytes move
    moved: int = 0  # a transfer's bytes_moved
    use: dict | None = None  # a transfer's memory -> endpoints in it (each counting its share of the bytes)
    name: str = ""  # what the trace calls it: the function, "matmul", "dma", "gather"...
    nbytes: int = 0  # the bytes it writes (the trace's)
    src: str = ""  # the memory a transfer reads ("" for compute)
    dst: str = ""  # the memory it writes
    ops: int = 0  # arithmetic operations (2*M*K*N for a product, the elements for a vector function)
    shares: tuple | None = None  # a transfer's (read, written) shares of bytes_moved
    rate: float = 0.0  # the most bytes_moved per cycle its engine allows
    read: Region | None = None  # the ddr region a transfer reads, for the cache of ddr (None: none, or bypassing it)
    write: Region | None = None  # the ddr region it writes, likewise
    dtype: str = ""  # the dtype a vector or matrix instruction is priced in


def price(chip: Chip, engine: Engine, instr: Instr) -> Step:
    """The Step of a dma, vector or matrix instruction on `engine` (a chips Engine)."""
    if isinstance(instr, (Dma, IndexedDma)):
        return _dma(chip, engine, instr)
    if isinstance(instr, Vector):
        return Step("vector", vector_cycles(instr, engine),
                    name=instr.fn, nbytes=instr.dst.nbytes, dst=instr.dst.mem, ops=vector_elements(instr),
                    dtype=vector_dtype(instr))
    assert isinstance(instr, Matmul), f"{instr.kind} instructions are not priced"
    M, K, N = instr.dims()
    return Step("matrix", matrix_cycles(instr, engine), name="matmul", nbytes=instr.c.nbytes, dst=instr.c.mem, ops=2 * M * K * N,
                dtype=instr.a.dtype)


def _dma(chip: Chip, engine: Engine, instr: Dma | IndexedDma) -> Step:
    moved = bytes_moved(instr, chip)
    shares = dma_shares(instr, chip, moved)
    if isinstance(instr, IndexedDma):  # an indexed transfer bypasses the cache
        name, read, write = ("scatter" if instr.scatter else "gather"), None, None
    else:
        name = f"dma.{instr.fn}" if instr.fn else "dma"
        read = instr.src if instr.src.mem == "ddr" else None
        write = instr.dst if instr.dst.mem == "ddr" else None
    return Step("dma", dma_latency(instr, chip, engine), moved, costs.ports(_endpoints(instr), shares), name, instr.dst.nbytes,
                instr.src.mem, instr.dst.mem, 0, shares[:2],
                costs.engine_cap(engine.rate(instr.src.mem, instr.dst.mem), shares), read, write)


def bytes_moved(instr: Dma | IndexedDma, chip: Chip) -> int:
    m = chip.memories
    if not isinstance(instr, IndexedDma):
        return costs.transfer_bytes(instr.src, instr.dst, m)
    t, k = instr.table, instr.index.shape[-1]
    p = len(instr.index.shape) - 2
    row = Region(t.mem, t.addr, t.dtype, t.shape[p + k:], t.strides[p + k:])  # one indexed row in the table
    count = instr.rows.size // max(row.size, 1)
    table_side = count * costs.side_bytes(row, m[t.mem].burst)
    return max(costs.side_bytes(instr.rows, m[instr.rows.mem].burst), table_side) + costs.side_bytes(instr.index, m[instr.index.mem].burst)


def _endpoints(instr: Dma | IndexedDma) -> tuple[str, ...]:
    """The memories a transfer touches: a gather or scatter reads its indices first."""
    return (instr.src.mem, instr.dst.mem) + ((instr.index.mem,) if isinstance(instr, IndexedDma) else ())


def dma_latency(instr: Dma | IndexedDma, chip: Chip, engine: Engine) -> int:
    return costs.transfer_latency(engine, chip.memories, _endpoints(instr))


def dma_shares(instr: Dma | IndexedDma, chip: Chip, moved: int | None = None) -> tuple:
    """The share of bytes_moved each endpoint (_endpoints) carries: a converting DMA's narrower
    side fewer (isa/costs.py, side_shares); a gather's or scatter's rows go through the table's
    and the rows' memories as a copy's bytes do, and its indices, read whole, through theirs:
    a paged cache's block of 32 KB read by one 4-byte table entry loads its memory with the
    block and the entry, not twice the block. `moved`: its bytes_moved, where known."""
    if not isinstance(instr, IndexedDma):
        return costs.side_shares(instr.src, instr.dst)
    index = costs.side_bytes(instr.index, chip.memories[instr.index.mem].burst) / (moved or bytes_moved(instr, chip))
    return (1.0 - index, 1.0 - index, index)


def dma_cycles(instr: Dma | IndexedDma, chip: Chip, engine: Engine) -> int:
    """A transfer's cycles alone: its latency and its bytes at the uncontended bandwidth."""
    bandwidth = costs.transfer_bandwidth(engine, chip.memories, _endpoints(instr), dma_shares(instr, chip))
    return dma_latency(instr, chip, engine) + math.ceil(bytes_moved(instr, chip) / bandwidth)


def vector_dtype(instr: Vector) -> str:
    """The dtype a vector instruction is priced in: its widest region operand's (table operands left out)."""
    tables = TABLE_OPERANDS.get(instr.fn, ())
    regions = [instr.dst] + [s for i, s in enumerate(instr.srcs) if isinstance(s, Region) and i not in tables]
    return max(regions, key=lambda r: dtypes.itemsize(r.dtype)).dtype


def vector_elements(instr: Vector) -> int:
    """The destination's elements, or a reduction's source's (the work is over its input)."""
    if instr.fn in REDUCTIONS:
        src = instr.srcs[0]
        assert isinstance(src, Region), f"{instr.fn} reduces a region"
        return src.size
    return instr.dst.size


def vector_cycles(instr: Vector, engine: Engine) -> int:
    assert engine.vector is not None, f"engine {engine.name} has no vector unit"
    return costs.vector_cycles(vector_elements(instr), vector_dtype(instr), instr.fn, engine.vector, engine.issue_latency)


def matrix_cycles(instr: Matmul, engine: Engine) -> int:
    assert engine.matrix is not None, f"engine {engine.name} has no matrix unit"
    kernel = tuple(instr.a.shape[instr.m + 1:]) if instr.conv else ()  # a convolution's a: (n, outputs..., channels, kernel...)
    return costs.matmul_cycles(*instr.dims(), engine.matrix, instr.a.dtype, engine.issue_latency, instr.conv, kernel)
