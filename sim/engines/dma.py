"""DMA: N-d strided copies between linked memories.

cycles = latency + ceil(bytes_moved / bandwidth), where
- latency is the engine's plus each endpoint memory's;
- bytes_moved is the larger of the two sides, each side rounding every contiguous run of
  bytes up to its memory's burst (so strided and tiny transfers cost what they cost); a
  zero-stride dimension re-reads the same bytes (a broadcast), which the engine fetches once;
- bandwidth is the least of the engine's and each endpoint memory's, a memory that is both
  source and destination counting twice. Overlapping transfers share memory bandwidth
  (sim/bandwidth.py); this is the uncontended figure.
"""

import math

from isa import dtypes


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
    return max(side_bytes(instr.src, m[instr.src.mem].burst), side_bytes(instr.dst, m[instr.dst.mem].burst))


def latency(instr, chip, engine):
    m = chip.memories
    return engine.latency + m[instr.src.mem].latency + m[instr.dst.mem].latency


def port_use(instr):
    """memory -> how many of the transfer's endpoints are in it."""
    use = {instr.src.mem: 1}
    use[instr.dst.mem] = use.get(instr.dst.mem, 0) + 1
    return use


def bandwidth(instr, chip, engine):
    """Uncontended bytes per cycle."""
    return min([engine.bandwidth] + [chip.memories[m].bandwidth / n for m, n in port_use(instr).items()])


def cycles(instr, chip, engine):
    return latency(instr, chip, engine) + math.ceil(bytes_moved(instr, chip) / bandwidth(instr, chip, engine))


def execute(instr, memories):
    memories[instr.dst.mem].view(instr.dst)[...] = memories[instr.src.mem].view(instr.src)
