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


def op_dtypes(program: Program, steps: dict[str, list[Any | Step | None] | list[Step | Any]],
              skipped: dict[str, tuple[int, int, int]] | None = None) -> dict:
    """op -> unit kind ("matrix", "vector") -> the dtype its instructions of that kind are priced
    in (isa/timing/price.py: a vector instruction in its widest operand's, a product in its a
    operand's), the one with the most arithmetic where they differ. steps: each engine's priced
    Steps, as the machine ran them. skipped: engine -> (lo, hi, n), the blocks of n instructions
    [lo, hi) a fast-forward cut out (sim/forward.py), each priced as the one before it under its
    own op names: each counted as that one, an op name read once per op and Step."""
    work: dict[str, dict[str, dict[str, int]]] = {}
    for engine, stream in program.streams.items():
        priced = steps[engine]  # repeated instructions share one Step: each (op, Step) is tallied once
        lo, hi, n = (skipped or {}).get(engine, (0, 0, 0))
        places = [*range(lo), *range(hi, len(stream))] if n and hi > lo else range(len(stream))
        ran = list(map(priced.__getitem__, places))
        by_id = {id(step): step for step in ran}  # a cut block's are the block before's
        if not any(step is not None and step.kind in ("matrix", "vector") for step in by_id.values()):
            continue  # a stream of copies and waits
        counts = collections.Counter(zip(op_names(stream, places), map(id, ran)))
        if n and hi > lo:
            before = list(zip(op_names(stream, range(lo - n, lo)), map(id, priced[lo - n:lo])))
            kinds, first = collections.Counter(before), {key: p for p, key in enumerate(before)}
            for a in range(lo, hi, n):  # a name is its block's: the one at the same place
                for name, (key, count) in zip(op_names(stream, [a + first[key] for key in kinds]), kinds.items()):
                    counts[name, key[1]] += count
        for (op, k), count in counts.items():
            step = by_id[k]
            if step is None or not op or step.kind not in ("matrix", "vector"):
                continue
            tally = work.setdefault(op, {}).setdefault(step.kind, {})
            tally[step.dtype] = tally.get(step.dtype, 0) + step.ops * count
    return {op: {unit: max(tally, key=lambda dtype: tally[dtype]) for unit, tally in units.items()} for op, units in work.items()}
