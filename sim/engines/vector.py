"""The vector unit: element-wise functions over regions of its memory (what they cost is
isa/timing/price.py's).

Each function's meaning is a row of FNS, applied to operands already converted to the
instruction's compute dtype; the result is stored with isa.dtypes.convert (saturation).
Where IEEE gives an answer (x/0, sqrt of a negative, log 0) it is the answer, silently.
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from isa import dtypes
from isa.instructions import REDUCTIONS

FNS: dict[str, Callable[..., Any]] = {
    "copy": lambda x: x,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "mul_add": lambda x, y, z: x * y + z,
    "clamp": lambda x, low, high: np.minimum(np.maximum(x, low), high),
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
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "select_gt": lambda a, b, c, d: np.where(a > b, c, d),
    "select_ge": lambda a, b, c, d: np.where(a >= b, c, d),
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "lshift": lambda x, n, mode: dtypes.shift(x, n, mode),
    "rshift": lambda x, n, mode: dtypes.shift(x, n, mode, right=True),
    "mul_rshift": lambda x, m, s, mode: dtypes.shift(np.asarray(x, np.int64) * np.asarray(m, np.int64), s, mode, right=True),
    "lut": lambda x, table: table.reshape(-1)[np.asarray(x, np.int64) & 0xFF],
    "reduce_sum": lambda x, dims: np.sum(x, axis=dims),
    "reduce_max": lambda x, dims: np.max(x, axis=dims),
    "reduce_min": lambda x, dims: np.min(x, axis=dims),
    "reduce_prod": lambda x, dims: np.prod(x, axis=dims),
}


def execute(instr, memories) -> None:
    cdt = dtypes.np_dtype(instr.cdt)
    args = [
        cdt.type(s) if isinstance(s, (int, float)) else memories[s.mem].view(s).astype(cdt)
        for s in instr.srcs
    ]
    if instr.fn in REDUCTIONS:  # the source's trailing dimensions are the reduced ones
        args.append(tuple(range(len(instr.dst.shape), len(instr.srcs[0].shape))))
    store(instr.fn, args, instr.dst, memories)


def store(fn, args, dst, memories) -> None:
    """dst = FNS[fn](*args), its operands already in the compute dtype, saturated into dst's
    dtype (a converting DMA stores its result so too, sim/engines/dma.py)."""
    with np.errstate(all="ignore"):
        result = FNS[fn](*args)
    memories[dst.mem].view(dst)[...] = dtypes.convert(result, dst.dtype)
