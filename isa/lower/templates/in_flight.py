"""An epilogue done on the way out of the accumulator.

Where a matrix unit accumulates outside its vector memory (an Ascend cube in L0C) and one DMA
hop leads from the accumulator to where the result lives, on an engine that converts with the
epilogue's function (a FixPipe quantizing int32 to int8, casting float32 to float16 or
rectifying as it writes L0C out to GM), the result tile leaves in one converting DMA
(isa/instructions.py): no copy of the accumulator in the vector memory, no vector instruction
and no result buffer there, so an output tile is bounded by the accumulator's memory alone.
An epilogue of one step over the accumulator and numbers qualifies (a bias, the asymmetric
mode's second product or a requantization in several roundings do not), and so does none at
all (the result is the accumulator: a plain copy). A cast followed by a fused ReLU is one step,
`relu` stored into the cast's dtype (`then_relu`): rounding keeps order and zero, so the values
are the same either way round.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...instructions import Dma
from ...ops.elementwise import OUT, In, Step, step_dtype
from ..memory.route import route

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chips.schema import Chip

    from ...instructions import Region
    from ..context import Unit
    from ..emit import Buf, Emits


@dataclass(frozen=True)
class InFlight:
    engine: str  # the DMA engine of the hop (on the unit's core)
    fn: str  # "" copies
    args: tuple[float, ...]
    cdt: str

    def emit(self, em: Emits, src: Region, src_bufs: Sequence[Buf], dst: Region, dst_buf: Buf, op: str) -> None:
        em.emit(self.engine, Dma(src, dst, op, self.fn, self.args, self.cdt), reads=src_bufs, writes=(dst_buf,))


def then_relu(steps: Sequence[Step], node_steps: Sequence[Step]) -> list[Step] | None:
    """The epilogue `steps` (none, or a cast) and a fused node's (a ReLU of their result) as
    one step, or None."""
    cast = not steps or (len(steps) == 1 and steps[0].fn == "copy" and steps[0].operands == (In(0),) and steps[0].dst == OUT)
    relu = len(node_steps) == 1 and node_steps[0].fn == "relu" and node_steps[0].operands == (In(0),) and node_steps[0].dst == OUT
    return [Step("relu", (In(0),))] if cast and relu else None


def in_flight(chip: Chip, unit: Unit, steps: Sequence[Step], acc_dtype: str, out_mem: str) -> InFlight | None:
    """The InFlight doing `steps` (isa.ops.elementwise.Step, In(0) the accumulator of acc_dtype)
    from unit's accumulator to the result in out_mem, or None where it cannot be done so."""
    if unit.matrix is None:
        return None
    cmem = unit.matrix.operand_memory("c")
    if cmem is None or (unit.vector is not None and cmem == unit.vector.memory) or len(steps) > 1:
        return None  # an accumulator the epilogue reads in place saves nothing
    hops = route(chip, cmem, out_mem, unit.matrix.core)
    if len(hops) != 1:
        return None
    engine = hops[0][0]
    if not steps:
        return InFlight(engine, "", (), "")
    step = steps[0]
    first, rest = step.operands[0], step.operands[1:]
    numbers = all(isinstance(o, (int, float)) for o in rest)
    if step.dst != OUT or first != In(0) or not numbers or step.fn not in chip.engines[engine].converts:
        return None
    return InFlight(engine, step.fn, tuple(rest), step_dtype(step, [acc_dtype]))
