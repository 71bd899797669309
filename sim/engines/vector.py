"""The vector unit: element-wise functions over regions of its memory (what they cost is
isa/timing/price.py's).

Each function's meaning is its row of isa/vector_fns.py, applied to operands already converted
to the instruction's compute dtype; the result is stored with isa.dtypes.convert (saturation).
Where IEEE gives an answer (x/0, sqrt of a negative, log 0) it is the answer, silently.
"""


from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.instructions import REDUCTIONS, Region
from isa.vector_fns import FNS

if TYPE_CHECKING:
    from isa.instructions import Vector
    from sim.memory import Memory


def execute(instr: Vector, memories: dict[str, Memory]) -> None:
    cdt = dtypes.np_dtype(instr.cdt)
    args = [
        cdt.type(s) if isinstance(s, (int, float)) else memories[s.mem].view(s).astype(cdt)
        for s in instr.srcs
    ]
    if instr.fn in REDUCTIONS:  # the source's trailing dimensions are the reduced ones
        source = instr.srcs[0]
        assert isinstance(source, Region)  # isa.instructions.check: a reduction reduces a region
        args.append(tuple(range(len(instr.dst.shape), len(source.shape))))
    store(instr.fn, args, instr.dst, memories)


def store(fn: str, args: list, dst: Region, memories: dict[str, Memory]) -> None:
    """dst = FNS[fn].meaning(*args), its operands already in the compute dtype, saturated into dst's
    dtype (a converting DMA stores its result so too, sim/engines/dma.py)."""
    with np.errstate(all="ignore"):
        result = FNS[fn].meaning(*args)
    memories[dst.mem].view(dst)[...] = dtypes.convert(result, dst.dtype)
