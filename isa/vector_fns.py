"""The vector unit's functions, one row each: how many operands a function takes, what it
computes and what the instruction set checks of it. The instruction set (isa/instructions.py)
reads the arities and flags, the machine's vector engine (sim/engines/vector.py) the meaning,
and a chip's `op_cycles` may price each function by its name.

A meaning is applied to operands already converted to the instruction's compute dtype; the
machine stores its result with isa.dtypes.convert (saturation). A shift's or rounding's `mode`
operand is a RoundingMode value (isa.dtypes.ROUNDING)."""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import dtypes

REDUCE = "reduce"  # the source has the destination's dimensions, then the reduced ones (the last argument: their axes)
TABLE = "table"  # its second operand is a table read whole (256 entries, one per value of a byte)
INTEGER = "integer"  # bitwise: computes on integers (or bool) only
NO_BOOL = "no_bool"  # numpy has no bool form of it
MODE = "mode"  # its last operand is a RoundingMode value
COMMUTES = "commutes"  # of two operands, either order gives the same result at the same cost


class VectorFn(NamedTuple):
    arity: int  # operands: regions or numbers
    meaning: Callable
    flags: frozenset = frozenset()
    note: str = ""


def _fn(arity: int, meaning: Callable, *flags: str, note: str = "") -> VectorFn:
    return VectorFn(arity, meaning, frozenset(flags), note)


FNS: dict[str, VectorFn] = {
    "copy": _fn(1, lambda x: x),
    "add": _fn(2, np.add, COMMUTES),
    "sub": _fn(2, np.subtract, NO_BOOL),
    "mul": _fn(2, np.multiply, COMMUTES),
    "div": _fn(2, np.divide),
    "max": _fn(2, np.maximum, COMMUTES),
    "min": _fn(2, np.minimum, COMMUTES),
    "mul_add": _fn(3, lambda x, y, z: x * y + z, note="x * y + z"),
    "clamp": _fn(3, lambda x, low, high: np.minimum(np.maximum(x, low), high), note="(x, low, high)"),
    "relu": _fn(1, lambda x: np.maximum(x, 0)),
    "leaky_relu": _fn(2, lambda x, slope: np.where(x > 0, x, x * slope), note="(x, negative slope)"),
    "abs": _fn(1, np.abs),
    "tanh": _fn(1, np.tanh),
    "sigmoid": _fn(1, lambda x: 1 / (1 + np.exp(-x)), NO_BOOL),
    "exp": _fn(1, np.exp),
    "elu": _fn(1, lambda x: np.where(x > 0, x, np.expm1(x))),
    "sqrt": _fn(1, np.sqrt),
    "square": _fn(1, np.square),
    "rsqrt": _fn(1, lambda x: 1 / np.sqrt(x)),
    "ln": _fn(1, np.log),
    "round": _fn(1, dtypes.round_half_away, NO_BOOL, note="halves away from zero, as C's round()"),
    "ceil": _fn(1, np.ceil),
    "floor": _fn(1, np.floor),
    "sin": _fn(1, np.sin),
    "cos": _fn(1, np.cos),
    "gt": _fn(2, np.greater, note="comparisons give 1 or 0"),
    "ge": _fn(2, np.greater_equal),
    "lt": _fn(2, np.less),
    "le": _fn(2, np.less_equal),
    "eq": _fn(2, np.equal, COMMUTES),
    "ne": _fn(2, np.not_equal, COMMUTES),
    "select_gt": _fn(4, lambda a, b, c, d: np.where(a > b, c, d), note="(a, b, c, d): a > b ? c : d"),
    "select_ge": _fn(4, lambda a, b, c, d: np.where(a >= b, c, d), note="a >= b ? c : d"),
    "and": _fn(2, np.bitwise_and, INTEGER, COMMUTES),
    "or": _fn(2, np.bitwise_or, INTEGER, COMMUTES),
    "xor": _fn(2, np.bitwise_xor, INTEGER, COMMUTES),
    "lshift": _fn(3, lambda x, n, mode: dtypes.shift(x, n, mode), MODE, note="(x, n, mode): x << n, or for n < 0 x >> -n rounded by mode"),
    "rshift": _fn(3, lambda x, n, mode: dtypes.shift(x, n, mode, right=True), MODE,
                  note="(x, n, mode): x >> n rounded by mode, or for n < 0 x << -n"),
    "mul_rshift": _fn(4, lambda x, m, s, mode: dtypes.shift(np.asarray(x, np.int64) * np.asarray(m, np.int64), s, mode, right=True),
                      MODE, note="(x, m, s, mode): x * m >> s rounded by mode, exactly"),
    "lut": _fn(2, lambda x, table: table.reshape(-1)[np.asarray(x, np.int64) & 0xFF], TABLE,
               note="(x, table): table[x's low 8 bits as unsigned]"),
    "reduce_sum": _fn(1, lambda x, dims: np.sum(x, axis=dims), REDUCE),
    "reduce_max": _fn(1, lambda x, dims: np.max(x, axis=dims), REDUCE),
    "reduce_min": _fn(1, lambda x, dims: np.min(x, axis=dims), REDUCE),
    "reduce_prod": _fn(1, lambda x, dims: np.prod(x, axis=dims), REDUCE),
}


def having(flag: str) -> tuple:
    """The functions with `flag`, in the table's order."""
    return tuple(name for name, fn in FNS.items() if flag in fn.flags)
