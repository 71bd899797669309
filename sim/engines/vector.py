"""The vector unit: element-wise functions over regions of its memory.

cycles = issue_latency + ceil(elements / (lanes * per_lane[dtype])) * op_cycles[fn]
where dtype is the widest operand's (the destination's on a tie) and op_cycles defaults to 1.

Each function's meaning is a row of FNS, applied to operands already converted to the
instruction's compute dtype; the result is stored with isa.dtypes.convert (saturation).
Where IEEE gives an answer (x/0, sqrt of a negative, log 0) it is the answer, silently.
"""

import math

import numpy as np

from isa import dtypes

FNS = {
    "copy": lambda x: x,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "relu": lambda x: np.maximum(x, 0),
    "leaky_relu": lambda x, slope: np.where(x > 0, x, x * slope),
    "abs": np.abs,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "exp": np.exp,
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "sqrt": np.sqrt,
    "square": np.square,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "ln": np.log,
    "round": dtypes.round_half_away,
    "ceil": np.ceil,
    "floor": np.floor,
    "sin": np.sin,
    "cos": np.cos,
    "round_rshift": dtypes.round_half_up_rshift,
}


def cost_dtype(instr):
    regions = [instr.dst] + [s for s in instr.srcs if not isinstance(s, (int, float))]
    return max(regions, key=lambda r: dtypes.itemsize(r.dtype)).dtype


def cycles(instr, unit, issue_latency):
    per_cycle = unit.lanes * unit.per_lane[cost_dtype(instr)]
    return issue_latency + math.ceil(instr.dst.size / per_cycle) * unit.op_cycles.get(instr.fn, 1)


def execute(instr, memories):
    cdt = dtypes.np_dtype(instr.cdt)
    args = [
        cdt.type(s) if isinstance(s, (int, float)) else memories[s.mem].view(s).astype(cdt)
        for s in instr.srcs
    ]
    with np.errstate(all="ignore"):
        result = FNS[instr.fn](*args)
    memories[instr.dst.mem].view(instr.dst)[...] = dtypes.convert(result, instr.dst.dtype)
