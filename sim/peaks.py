"""A chip's peak arithmetic throughput, the roof of a roofline: 2 ops per multiply-accumulate
of the matrix unit (m * n * k MACs every block_cycles[dtype] cycles, k its depth in dtype), 1 op per element of the
vector unit (lanes * per_lane[dtype] elements per cycle), summed over the engines of a kind; and
the dtype each op of a program runs in, whose peak is that op's roof."""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from isa.program import op_names

if TYPE_CHECKING:
    from chips.schema import Chip, MatrixUnit, VectorUnit
    from isa.program import Program
    from isa.timing.price import Step


def matrix_ops_per_cycle(unit: MatrixUnit) -> dict[str, float]:
    """dtype -> ops per cycle of one matrix unit."""
    return {dtype: 2 * unit.m * unit.n * unit.depth(dtype) / cycles for dtype, cycles in unit.block_cycles.items()}


def vector_ops_per_cycle(unit: VectorUnit) -> dict[str, int]:
    """dtype -> elements per cycle of one vector unit."""
    return {dtype: unit.lanes * per_lane for dtype, per_lane in unit.per_lane.items()}


def peak_ops(chip: Chip) -> dict[str, dict[str, float | int]]:
    """{"matrix": {dtype: ops per cycle}, "vector": {...}} over all the chip's engines (a kind
    no engine has is left out)."""
    peaks: dict[str, dict[str, float]] = {}
    for kind, per_unit in (("matrix", matrix_ops_per_cycle), ("vector", vector_ops_per_cycle)):
        for engine in chip.engines_of(kind):
            total = peaks.setdefault(kind, {})
            for dtype, ops in per_unit(getattr(engine, kind)).items():
                total[dtype] = total.get(dtype, 0) + ops
    return peaks


def op_dtypes(program: Program, steps: dict[str, list[Any | Step | None] | list[Step | Any]]) -> dict:
    """op -> unit kind ("matrix", "vector") -> the dtype its instructions of that kind are priced
    in (isa/timing/price.py: a vector instruction in its widest operand's, a product in its a
    operand's), the one with the most arithmetic where they differ. steps: each engine's priced
    Steps, as the machine ran them."""
    work: dict[str, dict[str, dict[str, int]]] = {}
    for engine, stream in program.streams.items():
        priced = steps[engine]  # repeated instructions share one Step: each (op, Step) is tallied once
        by_id = {id(step): step for step in priced}
        if not any(step is not None and step.kind in ("matrix", "vector") for step in by_id.values()):
            continue  # a stream of copies and waits
        for (op, k), count in collections.Counter(zip(op_names(stream, range(len(stream))), map(id, priced))).items():
            step = by_id[k]
            if step is None or not op or step.kind not in ("matrix", "vector"):
                continue
            tally = work.setdefault(op, {}).setdefault(step.kind, {})
            tally[step.dtype] = tally.get(step.dtype, 0) + step.ops * count
    return {op: {unit: max(tally, key=lambda dtype: tally[dtype]) for unit, tally in units.items()} for op, units in work.items()}
