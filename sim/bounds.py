"""What a run may ask of the host, checked when the machine loads a program, before it backs a
memory or computes a byte.

A program runs on the chip it was lowered for (its `.program chip=` line). A functional run
backs every byte a program uses of each memory with host memory and computes each instruction
with numpy, so those bytes together, and the elements one instruction touches, are bounded
(isa/limits.py): a program text naming 1e15 bytes of a chip whose DDR is that large, or a
reduction over a 1e12-element zero-stride view, is refused rather than left to exhaust the host
or run for hours. Timing mode touches no data; only a cache of ddr keeps a word per ddr line in
it, so that is bounded too.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from isa import limits
from isa.errors import OutOfMemoryError, ProgramError
from isa.instructions import Matmul, Wait, regions

if TYPE_CHECKING:
    from chips.schema import Chip
    from isa.instructions import Instr
    from isa.program import Program

CACHE_WORD = 8  # bytes isa/timing/cache.py keeps per line of ddr: the access that last touched it


def check_chip(chip: Chip, program: Program) -> None:
    """Raise unless `program` was lowered for `chip` (its .program line names the chip)."""
    if program.chip != chip.name:
        raise ProgramError(f"the program was lowered for chip {program.chip!r}, not {chip.name!r} (its .program line names it): "
                           f"lower the graph for {chip.name} to run it there")


def check_run(chip: Chip, program: Program, extents: dict, functional: bool) -> None:
    """Raise unless `program` was lowered for `chip` and a run of it in this mode fits the host;
    `extents` are the bytes the program uses of each memory (what a functional run backs)."""
    check_chip(chip, program)
    if chip.cache is not None:
        lines = math.ceil(extents.get("ddr", 0) / chip.memories["ddr"].burst) * CACHE_WORD
        if lines > limits.HOST_MEMORY:
            raise OutOfMemoryError(f"the cache model of {chip.cache.name} keeps {lines} bytes for the program's {extents['ddr']} "
                                   f"bytes of ddr, more than the host-memory cap ({limits.HOST_MEMORY} bytes)")
    if not functional:
        return
    backed = sum(extents.values())
    if backed > limits.HOST_MEMORY:
        used = ", ".join(f"{mem} {n}" for mem, n in extents.items() if n)
        raise OutOfMemoryError(f"a functional run backs the {backed} bytes the program uses of the chip's memories ({used}), more than "
                               f"the host-memory cap ({limits.HOST_MEMORY} bytes); timing mode backs none")
    seen = set()
    for engine, stream in program.streams.items():
        for i, instr in enumerate(stream):
            if isinstance(instr, Wait) or instr in seen:
                continue
            seen.add(instr)
            work = _work(instr)
            if work > limits.INSTRUCTION_WORK:
                raise ProgramError(f"{engine}.{i}: touches {work} elements, more than the limit of {limits.INSTRUCTION_WORK} "
                                   "a functional run computes in one instruction; timing mode prices it without computing")


def _work(instr: Instr) -> int:
    """Elements an instruction's computation goes over: a product's multiply-adds, else its
    largest operand's elements (a zero-stride view counts every element it repeats)."""
    if isinstance(instr, Matmul):
        m, k, n = instr.dims()
        return m * k * n
    reads, written = regions(instr)
    return max((r.size for r in (*reads, *written)), default=0)
