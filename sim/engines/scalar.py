"""The scalar engine: a general-purpose core running kernels (sim/kernels/) on DDR operands.

cycles = issue_latency + ceil(per_element * op_cycles[fn] * work), work from the kernel and
the operands' shapes; a user's custom op gives its cycles itself (plus issue_latency).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.errors import ProgramError, SimError
from sim.kernels import lookup

if TYPE_CHECKING:
    from chips.schema import Engine
    from isa.instructions import Region, Scalar
    from sim.memory import Memory


def cycles(instr: Scalar, engine: Engine, where: str) -> int:
    k = lookup(instr.fn, where)
    srcs, dsts, args = [r.shape for r in instr.srcs], [r.shape for r in instr.dsts], dict(instr.args)
    if k.cycles is not None:
        return engine.issue_latency + math.ceil(k.cycles(srcs, dsts, args))
    unit = engine.scalar
    assert unit is not None and k.work is not None  # the loader gives a scalar engine its unit; built-in kernels their work
    return engine.issue_latency + math.ceil(unit.per_element * unit.op_cycles.get(instr.fn, 1) * k.work(srcs, dsts, args))


def execute(instr: Scalar, memories: dict[str, Memory]) -> list[tuple[Region, tuple[int, ...]]]:
    """Run the kernel; returns (region, shape) for each destination it filled only in part."""
    where = f"op {instr.op or '?'}, kernel {instr.fn}"
    arrays = [memories[r.mem].view(r).copy() for r in instr.srcs]
    try:
        results = lookup(instr.fn, where).run(arrays, dict(instr.args))
    except SimError as exc:  # a kernel's own error (an index out of range) gets the op's name
        raise type(exc)(f"{where}: {exc}") from None
    if len(results) != len(instr.dsts):
        raise ProgramError(f"{where}: gave {len(results)} results for {len(instr.dsts)} destinations")
    partial = []
    for region, value in zip(instr.dsts, results):
        value = np.asarray(value)
        full = value.shape == region.shape
        if not full and (value.shape[1:] != region.shape[1:] or not value.shape or value.shape[0] > region.shape[0]):
            raise ProgramError(f"{where}: result of shape {value.shape} does not fit destination {region.text()}")
        view = memories[region.mem].view(region)
        view[: len(value)] = dtypes.convert(value, region.dtype)
        if not full:
            partial.append((region, value.shape))
    return partial
