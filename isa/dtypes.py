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
    """C's round(): halves go away from zero. Exact in any float format (adding 0.5 first would
    round 0.49999997 up and 2^23 + 1 away in float32)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


# The seed's RoundingMode (arithmetic_shift and friends), by enum name and value.
ROUNDING = {
    "ROUNDING_HALF_TO_EVEN": 0,
    "ROUNDING_HALF_AWAY_FROM_ZERO": 1,
    "ROUNDING_TOWARDS_ZERO": 2,
    "ROUNDING_DOWN": 3,  # floor: what `>>` does
    "ROUNDING_UP": 4,  # ceil
    "ROUNDING_HALF_UP": 5,  # the seed's rounding right shift: ((x >> (s - 1)) + 1) >> 1
    "ROUNDING_HALF_DOWN": 6,
}
HALF_TO_EVEN, HALF_AWAY, TOWARDS_ZERO, DOWN, UP, HALF_UP, HALF_DOWN = range(7)


def rounding(mode):
    """A RoundingMode given by name ("ROUNDING_HALF_UP", "half_up") or value, as its value."""
    if isinstance(mode, str):
        key = mode.upper() if mode.upper().startswith("ROUNDING_") else "ROUNDING_" + mode.upper()
        if key in ROUNDING:
            return ROUNDING[key]
    elif mode in ROUNDING.values() and not isinstance(mode, bool):
        return int(mode)
    raise UnsupportedError(f"unknown rounding mode {mode!r}; known: {', '.join(ROUNDING)}")


def shift(x, n, mode=DOWN):
    """x * 2^n exactly for n >= 0; for n < 0, x / 2^-n rounded by `mode` (a RoundingMode value).

    x and n are integer arrays (or scalars); the result is int64. Shifts are capped at 62 bits,
    which changes nothing the saturation to a 32-bit or narrower result would not.
    """
    x = np.asarray(x, np.int64)
    n = np.clip(np.asarray(n, np.int64), -62, 62)
    left = np.where(n > 0, n, 0)
    right = np.where(n < 0, -n, 0)
    with np.errstate(over="ignore"):
        up = np.where(np.abs(x) < np.right_shift(np.int64(1) << 62, left), np.left_shift(x, left), np.sign(x) << 62)
    q = np.right_shift(x, right)  # floor
    r = x - np.left_shift(q, right)  # 0 <= r < 2^right
    half = np.where(right > 0, np.left_shift(np.int64(1), np.maximum(right - 1, 0)), 1)
    mode = int(mode)
    if mode == DOWN:
        bump = np.zeros_like(r, bool)
    elif mode == UP:
        bump = r > 0
    elif mode == TOWARDS_ZERO:
        bump = (r > 0) & (x < 0)
    elif mode == HALF_UP:
        bump = r >= half
    elif mode == HALF_DOWN:
        bump = r > half
    elif mode == HALF_AWAY:
        bump = np.where(x >= 0, r >= half, r > half)
    else:  # HALF_TO_EVEN
        bump = (r > half) | ((r == half) & (q % 2 != 0))
    down = q + (bump & (right > 0))
    return np.where(n >= 0, up, down)


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
