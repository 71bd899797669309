"""The dtype table and the integer rounding and saturation helpers every integer op uses.

Dtypes are named by strings (`"float32"`, `"int8"`, ...) everywhere in npusim: in graphs, chip
YAML, instructions and program text. bfloat16 comes from ml_dtypes.
"""

import ml_dtypes
import numpy as np

from .errors import UnsupportedError

_TABLE = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}

NAMES = tuple(_TABLE)
FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


def check(name, where="dtype"):
    """Return `name` if it is a known dtype, else raise naming where it was asked for."""
    if name not in _TABLE:
        raise UnsupportedError(f"{where}: unknown dtype {name!r}; known: {', '.join(NAMES)}")
    return name


def np_dtype(name):
    return _TABLE[check(name)]


def itemsize(name):
    return np_dtype(name).itemsize


def is_float(name):
    return name in FLOATS


def is_int(name):
    return name in INTS


def of_array(array, where="array"):
    """The npusim name of a numpy array's dtype."""
    for name, dt in _TABLE.items():
        if array.dtype == dt:
            return name
    raise UnsupportedError(f"{where}: numpy dtype {array.dtype} has no npusim dtype; known: {', '.join(NAMES)}")


def int_range(name):
    info = np.iinfo(np_dtype(name))
    return int(info.min), int(info.max)


def round_half_away(x):
    """C's round(): halves go away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def round_half_up_rshift(x, shift):
    """Arithmetic right shift by `shift` bits rounding half up: (x + 2^(shift-1)) >> shift.

    This is the seed's rounding right shift (see mul_shift): a shift of 0 leaves x unchanged.
    `x` must be an integer array wide enough not to overflow (int64).
    """
    shift = np.asarray(shift, dtype=np.int64)
    bias = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return np.right_shift(x + bias, shift)


def convert(x, name):
    """Store values into dtype `name`, saturating integers.

    Floats become integers by round-half-to-even (the IEEE default conversion), then are clipped
    to the target range; NaN becomes 0. Float targets take the nearest value (IEEE).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE overflow to inf is the answer
        return _convert(np.asarray(x), name)


def _convert(x, name):
    dt = np_dtype(name)
    if name == "bool":
        return x != 0
    if is_int(name):
        if x.dtype.kind == "f":
            x = np.rint(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        lo, hi = int_range(name)
        if x.dtype.kind in "iu" and np.iinfo(x.dtype).min >= lo and np.iinfo(x.dtype).max <= hi:
            return x.astype(dt)
        return np.clip(x, lo, hi).astype(dt)
    return x.astype(dt)
